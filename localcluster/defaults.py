"""Server-side defaulting the API server applies on create, so children look as they would in a cluster.

Modelled because it matters for the three-way merge: a field the server fills in (a Service port's
protocol, a Pod's tolerations) must not look like a difference to apply. What is here is checked,
field by field, against a real API server (tests/localcluster/test_apiserver_stand_ins.py, over every child the
hooks answer for the golden requests and hand-made edge cases): the defaulting functions of
`k8s.io/kubernetes/pkg/apis/{core,apps,batch}/v1` (for a Pod's spec, and the pod templates of Jobs
and StatefulSets), the create strategies of Jobs (the generated selector and template labels:
`prepare_for_create`, once the store has given the Job its uid) and Services (a ClusterIP), and the
default admission plugins on Pods (ServiceAccount, DefaultTolerationSeconds, Priority without a
PriorityClass).

What the server sets and this does not model is listed in the same test with a reason each; in
short: quantity canonicalisation (`1000m` → `1`, `2` → `"2"`: the hooks' `hooks/shared/quantity.py`
has the canonical form, which localcluster may not import; with the real control plane the project
can ask the server instead, and does in that test), a Pod's `status.qosClass` (needs the same
quantity arithmetic), the ServiceAccount token volume and its mounts (a generated name; nothing
local reads them), a PriorityClass's value (the local cluster has no PriorityClasses), a NodePort
or LoadBalancer Service's allocated ports and probes' defaults.
"""

from __future__ import annotations

import itertools
import re
from typing import Any, cast

from .types import KubeObject

_cluster_ips = itertools.count(1)
DEFAULT_TOLERATIONS = [
    {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
    {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
]
# Volume sources whose files get a mode (SetDefaults_{ConfigMap,Secret,DownwardAPI,Projected}VolumeSource): 0644.
MODE_VOLUMES = ("configMap", "secret", "downwardAPI", "projected")
DEFAULT_MODE = 0o644

# A container image reference as github.com/distribution/reference parses it (ParseNormalizedNamed).
_DOMAIN_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_DOMAIN = rf"(?:{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})*|\[[a-fA-F0-9:]+\])(?::[0-9]+)?"
_PATH_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|[-]+)[a-z0-9]+)*"
IMAGE_REFERENCE = re.compile(
    rf"(?P<name>(?:{_DOMAIN}/)?{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*)"
    r"(?::(?P<tag>[\w][\w.-]{0,127}))?"
    r"(?:@(?P<digest>[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}))?"
)
DIGEST_LENGTHS = {"sha256": 64, "sha384": 96, "sha512": 128}


def image_tag(image: str) -> str:
    """The tag kubelet's ParseImageName finds: "latest" when there is neither a tag nor a digest,
    "" when there is only a digest or the reference does not parse (an upper-case repository, say)."""
    first, slash, _ = image.partition("/")
    if not slash or not (any(c in first for c in ".:") or first == "localhost" or first.lower() != first):
        image = f"docker.io/{image}"  # splitDockerDomain: a first component that is no domain is a Docker Hub path
    match = IMAGE_REFERENCE.fullmatch(image)
    if match is None or len(match["name"]) > 255:
        return ""
    digest = match["digest"]
    if digest is not None:
        algorithm, _, hex_digits = digest.partition(":")
        if DIGEST_LENGTHS.get(algorithm) != len(hex_digits):
            return ""
    return match["tag"] or ("" if digest else "latest")


def _unset(obj: dict[str, Any], key: str) -> bool:
    """Go's defaulting sees an absent field and a zero one alike (a string "", a nil pointer)."""
    return obj.get(key) in (None, "")


def _set(obj: dict[str, Any], key: str, value: Any) -> None:
    if _unset(obj, key):
        obj[key] = value


def _field_selectors(items: list[Any]) -> None:
    """A fieldRef's apiVersion is v1, a resourceFieldRef's divisor "0" (env, downwardAPI volumes)."""
    for item in items:
        if not isinstance(item, dict):
            continue
        source = item.get("valueFrom") if "valueFrom" in item else item
        if isinstance(source, dict):
            if isinstance(source.get("fieldRef"), dict):
                _set(source["fieldRef"], "apiVersion", "v1")
            if isinstance(source.get("resourceFieldRef"), dict):
                source["resourceFieldRef"].setdefault("divisor", "0")


def _probe(probe: Any) -> None:
    """SetDefaults_Probe and SetDefaults_HTTPGetAction."""
    if not isinstance(probe, dict):
        return
    for key, value in (("timeoutSeconds", 1), ("periodSeconds", 10), ("successThreshold", 1), ("failureThreshold", 3)):
        if not probe.get(key):
            probe[key] = value
    if isinstance(probe.get("httpGet"), dict):
        _set(probe["httpGet"], "scheme", "HTTP")


def _container(container: dict[str, Any], *, host_network: bool) -> None:
    if _unset(container, "imagePullPolicy"):
        container["imagePullPolicy"] = "Always" if image_tag(str(container.get("image", ""))) == "latest" else "IfNotPresent"
    _set(container, "terminationMessagePath", "/dev/termination-log")
    _set(container, "terminationMessagePolicy", "File")
    if not isinstance(container.get("resources"), dict):
        container["resources"] = {}
    _field_selectors(container.get("env") or [])
    for port in container.get("ports") or []:
        _set(port, "protocol", "TCP")
        if host_network and not port.get("hostPort") and "containerPort" in port:
            port["hostPort"] = port["containerPort"]
    for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
        _probe(container.get(probe))


def default_pod_spec(spec: dict[str, Any]) -> None:
    """SetDefaults_PodSpec and what it calls, for a Pod's spec or a pod template's."""
    _set(spec, "restartPolicy", "Always")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    _set(spec, "dnsPolicy", "ClusterFirst")
    _set(spec, "schedulerName", "default-scheduler")
    spec.setdefault("securityContext", {})
    # serviceAccount is the deprecated name of serviceAccountName: each is filled in from the other.
    if spec.get("serviceAccountName"):
        _set(spec, "serviceAccount", spec["serviceAccountName"])
    elif spec.get("serviceAccount"):
        spec["serviceAccountName"] = spec["serviceAccount"]
    for volume in spec.get("volumes") or []:
        for source in MODE_VOLUMES:
            if isinstance(volume.get(source), dict):
                volume[source].setdefault("defaultMode", DEFAULT_MODE)
        _field_selectors((volume.get("downwardAPI") or {}).get("items") or [])
        for projected in (volume.get("projected") or {}).get("sources") or []:
            _field_selectors((projected.get("downwardAPI") or {}).get("items") or [])
    for container in (spec.get("initContainers") or []) + (spec.get("containers") or []):
        _container(container, host_network=bool(spec.get("hostNetwork")))


def _template_spec(workload: KubeObject) -> None:
    template = workload.get("spec", {}).get("template")
    if isinstance(template, dict):
        default_pod_spec(template.setdefault("spec", {}))


def _tolerates(tolerations: list[dict[str, Any]], key: str) -> bool:
    """DefaultTolerationSeconds: does a toleration already cover `key`'s NoExecute taint (an empty key
    or effect matches any)?"""
    return any(t.get("key", "") in (key, "") and t.get("effect", "") in ("NoExecute", "") for t in tolerations)


def default_pod(pod: KubeObject) -> None:
    """Fill in what the API server and its default admission plugins add to a new Pod."""
    spec = pod.setdefault("spec", {})
    default_pod_spec(spec)
    spec.setdefault("enableServiceLinks", True)
    _set(spec, "serviceAccountName", "default")  # the ServiceAccount admission plugin
    _set(spec, "serviceAccount", spec["serviceAccountName"])
    if _unset(spec, "priorityClassName"):  # the Priority admission plugin, with no global default class
        spec.setdefault("priority", 0)
        spec.setdefault("preemptionPolicy", "PreemptLowerPriority")
    tolerations = spec.get("tolerations") or []
    for default in DEFAULT_TOLERATIONS:
        if not _tolerates(tolerations, str(default["key"])):
            tolerations.append(dict(default))
    spec["tolerations"] = tolerations
    for container in (spec.get("initContainers") or []) + (spec.get("containers") or []):
        resources = container["resources"]
        if resources.get("limits"):  # SetDefaults_Pod: a limit without a request is also the request
            requests = resources.get("requests") or {}
            for name, limit in resources["limits"].items():
                requests.setdefault(name, limit)
            resources["requests"] = requests
    pod.setdefault("status", {"phase": "Pending"})


def default_service(service: KubeObject) -> None:
    """Fill in what the API server adds to a new Service (a ClusterIP unless headless)."""
    spec = service.setdefault("spec", {})
    _set(spec, "type", "ClusterIP")
    _set(spec, "sessionAffinity", "None")
    if spec["sessionAffinity"] == "ClientIP":
        spec.setdefault("sessionAffinityConfig", {}).setdefault("clientIP", {}).setdefault("timeoutSeconds", 10800)
    if _unset(spec, "clusterIP"):
        n = next(_cluster_ips)
        spec["clusterIP"] = f"10.96.{n // 250}.{n % 250 + 1}"
    spec.setdefault("clusterIPs", [spec["clusterIP"]])
    if spec["clusterIP"] == "None" and not spec.get("selector"):
        # A headless Service without a selector takes both families whatever the cluster's (its
        # endpoints are written by hand, and may be of either).
        spec.setdefault("ipFamilyPolicy", "RequireDualStack")
        spec.setdefault("ipFamilies", ["IPv4", "IPv6"])
    spec.setdefault("ipFamilies", ["IPv4"])
    spec.setdefault("ipFamilyPolicy", "SingleStack")
    spec.setdefault("internalTrafficPolicy", "Cluster")
    if spec["type"] in ("NodePort", "LoadBalancer"):
        _set(spec, "externalTrafficPolicy", "Cluster")  # the node ports themselves are allocated: not modelled
    if spec["type"] == "LoadBalancer":
        spec.setdefault("allocateLoadBalancerNodePorts", True)
    for port in spec.get("ports") or []:
        _set(port, "protocol", "TCP")
        if port.get("targetPort") in (None, 0, ""):
            port["targetPort"] = port.get("port")
    service.setdefault("status", {"loadBalancer": {}})


def default_job(job: KubeObject) -> None:
    """The batch/v1 Job fields the API server fills in."""
    spec = job.setdefault("spec", {})
    spec.setdefault("backoffLimit", 6)
    spec.setdefault("completions", 1)
    spec.setdefault("parallelism", 1)
    _set(spec, "completionMode", "NonIndexed")
    spec.setdefault("suspend", False)
    spec.setdefault("manualSelector", False)
    _set(spec, "podReplacementPolicy", "Failed" if spec.get("podFailurePolicy") else "TerminatingOrFailed")
    if spec.get("manualSelector") or "selector" in spec:  # else job_selector does it, once it has made the labels
        _job_labels(job)
    _template_spec(job)
    job.setdefault("status", {})


def _job_labels(job: KubeObject) -> None:
    """SetDefaults_Job: a Job without labels takes its pod template's (the same map in Go, so the labels
    the create strategy then adds to the template are the Job's too)."""
    meta = job.setdefault("metadata", {})
    labels = ((job.get("spec") or {}).get("template") or {}).get("metadata", {}).get("labels")
    if labels and not meta.get("labels"):
        meta["labels"] = dict(labels)


def job_selector(job: KubeObject) -> None:
    """The Job create strategy: unless manualSelector, a selector on the Job's uid, and the same
    labels (and the job's name) on its pod template."""
    spec, meta = job.setdefault("spec", {}), job.get("metadata", {})
    if spec.get("manualSelector") or "selector" in spec or not meta.get("uid"):
        return
    spec["selector"] = {"matchLabels": {"batch.kubernetes.io/controller-uid": meta["uid"]}}
    labels = spec.setdefault("template", {}).setdefault("metadata", {}).setdefault("labels", {})
    for key in ("batch.kubernetes.io/controller-uid", "controller-uid"):
        labels.setdefault(key, meta["uid"])
    for key in ("batch.kubernetes.io/job-name", "job-name"):
        labels.setdefault(key, meta.get("name"))
    _job_labels(job)


def default_statefulset(sts: KubeObject) -> None:
    """The apps/v1 StatefulSet fields the API server fills in (SetDefaults_StatefulSet)."""
    spec = sts.setdefault("spec", {})
    spec.setdefault("replicas", 1)
    _set(spec, "podManagementPolicy", "OrderedReady")
    strategy = spec.setdefault("updateStrategy", {})
    if _unset(strategy, "type"):
        strategy["type"] = "RollingUpdate"
        strategy.setdefault("rollingUpdate", {})
    if strategy["type"] == "RollingUpdate" and isinstance(strategy.get("rollingUpdate"), dict):
        # Only a rollingUpdate given (or implied by an absent type) is filled in; maxUnavailable
        # is the MaxUnavailableStatefulSet gate's, on by default (the local controller ignores it).
        strategy["rollingUpdate"].setdefault("partition", 0)
        strategy["rollingUpdate"].setdefault("maxUnavailable", 1)
    spec.setdefault("revisionHistoryLimit", 10)
    policy = spec.setdefault("persistentVolumeClaimRetentionPolicy", {})
    _set(policy, "whenDeleted", "Retain")
    _set(policy, "whenScaled", "Retain")
    _template_spec(sts)
    sts.setdefault("status", {"replicas": 0, "availableReplicas": 0})  # neither is omitempty in the Go type


def default_volcano_podgroup(podgroup: KubeObject) -> None:
    """Volcano's PodGroup CRD defaults the queue."""
    podgroup.setdefault("spec", {}).setdefault("queue", "default")


# Go's `omitempty`: the server encodes the object from its Go type, so a field whose value is the
# type's zero value is not stored at all. Every null is left out; an empty map only where the Go type
# is a map (a struct such as `resources` or `securityContext` stays `{}`); an empty list but where the
# Go field has no omitempty; "", false and 0 only for the non-pointer fields listed (a pointer, such as
# `automountServiceAccountToken` or `backoffLimit`, keeps false and 0).
MAP_FIELDS = frozenset({"labels", "annotations", "nodeSelector", "limits", "requests", "data", "binaryData",
                        "matchLabels", "overhead"})
KEPT_EMPTY_LISTS = frozenset({"containers"})
POD_SPEC_ZERO = frozenset({"hostNetwork", "hostPID", "hostIPC", "hostname", "subdomain", "nodeName",
                           "serviceAccountName", "serviceAccount", "priorityClassName"})
CONTAINER_ZERO = frozenset({"stdin", "stdinOnce", "tty", "workingDir", "image"})
CONTAINER_PORT_ZERO = frozenset({"name", "hostIP", "hostPort"})
VOLUME_MOUNT_ZERO = frozenset({"readOnly", "subPath", "subPathExpr"})
ENV_ZERO = frozenset({"value"})
SERVICE_SPEC_ZERO = frozenset({"externalName", "loadBalancerIP", "publishNotReadyAddresses", "healthCheckNodePort"})
SERVICE_PORT_ZERO = frozenset({"name", "nodePort"})


def _drop_empty(value: Any) -> Any:
    """Nulls, empty maps of MAP_FIELDS and empty lists out, at any depth; returns the value."""
    if isinstance(value, dict):
        for key in list(value):
            item = _drop_empty(value[key])
            if item is None or (item == {} and key in MAP_FIELDS) or (item == [] and key not in KEPT_EMPTY_LISTS):
                del value[key]
    elif isinstance(value, list):
        for item in value:
            _drop_empty(item)
    return value


def _drop_zero(obj: Any, fields: frozenset[str]) -> None:
    if isinstance(obj, dict):
        for key in fields & obj.keys():
            if obj[key] in ("", False, 0) and not isinstance(obj[key], float):
                del obj[key]


def _omit_empty_pod_spec(spec: Any) -> None:
    if not isinstance(spec, dict):
        return
    _drop_zero(spec, POD_SPEC_ZERO)
    for container in (spec.get("initContainers") or []) + (spec.get("containers") or []):
        _drop_zero(container, CONTAINER_ZERO)
        for port in container.get("ports") or []:
            _drop_zero(port, CONTAINER_PORT_ZERO)
        for mount in container.get("volumeMounts") or []:
            _drop_zero(mount, VOLUME_MOUNT_ZERO)
        for var in container.get("env") or []:
            _drop_zero(var, ENV_ZERO)


def omit_empty(obj: KubeObject) -> None:
    """What the server leaves out of a built-in object when it encodes it (custom resources keep all)."""
    kind = obj.get("kind")
    if kind == "Service":
        spec = obj.get("spec") or {}
        if spec.get("selector") == {}:
            del spec["selector"]  # a map here (a LabelSelector struct in Jobs and StatefulSets)
        _drop_zero(spec, SERVICE_SPEC_ZERO)
        for port in spec.get("ports") or []:
            _drop_zero(port, SERVICE_PORT_ZERO)
    if kind in ("Role", "ClusterRole") and "rules" in obj:
        role = cast(dict[str, Any], obj)
        rules = role.pop("rules")
        _drop_empty(role)
        role["rules"] = _drop_empty(rules) or None  # `json:"rules"`, no omitempty: an empty list is stored as null
        return
    if kind == "Pod":
        _omit_empty_pod_spec(obj.get("spec"))
    elif kind in ("Job", "StatefulSet"):
        _omit_empty_pod_spec(((obj.get("spec") or {}).get("template") or {}).get("spec"))
    _drop_empty(obj)


# The built-in types the store holds: the server encodes them from Go types (omit_empty).
BUILT_IN = frozenset({("v1", "Pod"), ("v1", "Service"), ("v1", "ConfigMap"), ("v1", "ServiceAccount"), ("batch/v1", "Job"),
                      ("apps/v1", "StatefulSet"), ("rbac.authorization.k8s.io/v1", "Role"),
                      ("rbac.authorization.k8s.io/v1", "RoleBinding")})

DEFAULTERS = {
    ("v1", "Pod"): default_pod,
    ("v1", "Service"): default_service,
    ("batch/v1", "Job"): default_job,
    ("apps/v1", "StatefulSet"): default_statefulset,
    ("scheduling.volcano.sh/v1beta1", "PodGroup"): default_volcano_podgroup,
}


# What a type's create strategy (PrepareForCreate) adds once the object has its uid.
CREATE_STRATEGIES = {
    ("batch/v1", "Job"): job_selector,
}


def apply_defaults(obj: KubeObject) -> None:
    """Default an object in place according to its type (unknown types are left alone)."""
    kind = (obj.get("apiVersion", ""), obj.get("kind", ""))
    if kind in BUILT_IN:
        omit_empty(obj)  # first: Go's defaulting sees an empty field as absent
    defaulter = DEFAULTERS.get(kind)
    if defaulter is not None:
        defaulter(obj)


def prepare_for_create(obj: KubeObject) -> None:
    """What the API server adds to a new object from its uid (call after assigning it)."""
    strategy = CREATE_STRATEGIES.get((obj.get("apiVersion", ""), obj.get("kind", "")))
    if strategy is not None:
        strategy(obj)
