"""The environment the operator wires into every container: MX_CONFIG and the DMLC_* variables."""
from __future__ import annotations

import json

from hooks.mxjob.names import child_name
from hooks.mxjob.spec import MXJob

OPERATOR_ENV_NAMES = frozenset({
    "MX_CONFIG", "DMLC_PS_ROOT_PORT", "DMLC_PS_ROOT_URI", "DMLC_NUM_SERVER", "DMLC_NUM_WORKER",
    "DMLC_ROLE", "DMLC_USE_KUBERNETES", "DMLC_WORKER_ID",
})


def mx_config_prefix(job: MXJob) -> str:
    """MX_CONFIG up to the task part, which is the same for every pod of the job.

    Keys are sorted ("cluster" < "labels" < "task"), so the per-pod task object comes last and the
    cluster map (one entry per replica, so O(replicas) long) is serialised once per sync, not once
    per pod.
    """
    cluster = {
        spec.name: [{"port": spec.port, "url": child_name(job.name, rtype, i)}
                    for i in range(spec.replicas)]
        for rtype, spec in job.replicas.items()
    }
    labels = {spec.name: spec.tuner_key for spec in job.replicas.values()}
    head = json.dumps({"cluster": cluster, "labels": labels}, sort_keys=True,
                      separators=(",", ":"))
    return head[:-1] + ',"task":'


def mx_config(prefix: str, rtype: str, index: int) -> str:
    """The full MX_CONFIG of one pod, from the job's prefix."""
    return f'{prefix}{{"index":{index},"type":"{rtype.lower()}"}}}}'


def env_for(job: MXJob, rtype: str, index: int, *, prefix: str) -> list[dict[str, str]]:
    """Operator env entries of one pod, in the documented order."""
    env = [{"name": "MX_CONFIG", "value": mx_config(prefix, rtype, index)}]
    scheduler = job.replicas.get("Scheduler")
    # Without a Scheduler there is nothing to point at; an empty value would be dropped by the
    # API server and make the pod differ from what we applied.
    if scheduler is not None and scheduler.replicas > 0:
        env.append({"name": "DMLC_PS_ROOT_PORT", "value": str(scheduler.port)})
        env.append({"name": "DMLC_PS_ROOT_URI", "value": child_name(job.name, "Scheduler", 0)})
    env.append({"name": "DMLC_NUM_SERVER", "value": str(_count(job, "Server"))})
    env.append({"name": "DMLC_NUM_WORKER", "value": str(_count(job, "Worker"))})
    env.append({"name": "DMLC_ROLE", "value": rtype.lower()})
    env.append({"name": "DMLC_USE_KUBERNETES", "value": "1"})
    if rtype == "Worker":
        env.append({"name": "DMLC_WORKER_ID", "value": str(index)})
    return env


def merge_env(operator_env: list[dict[str, str]], user_env: list) -> list:
    """Operator entries first, then the user's entries that do not collide with them.

    Operator entries win over user entries of the same name. They come first so that user
    entries can refer to them with $(DMLC_WORKER_ID)-style expansion.
    """
    return operator_env + [e for e in user_env or []
                           if not (isinstance(e, dict) and e.get("name") in OPERATOR_ENV_NAMES)]


def _count(job: MXJob, rtype: str) -> int:
    spec = job.replicas.get(rtype)
    return spec.replicas if spec is not None else 0
