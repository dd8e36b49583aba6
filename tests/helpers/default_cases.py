"""Children for the differential test of localcluster/defaults.py (tests/localcluster/test_apiserver_stand_ins.py):
every child the hooks answer for the golden requests (tests/golden/*/request.yaml, through the pure
sync functions tests/shared/test_golden.py calls), and hand-made edge cases of what defaulting looks at.

Each is `(id, object)`; the test creates it with a dry run in a namespace of the real server.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import yaml

from hooks.kinds import SYNC

GOLDEN = Path(__file__).resolve().parents[1] / "golden"
DIGEST = "sha256:" + "ab" * 32
# PriorityClasses the golden children name; the test creates them (the server refuses a Pod whose class is missing).
PRIORITY_CLASSES = {"high-priority": 1000, "best-effort": 0, "stand-in-test": 7}


def golden_children() -> list[tuple[str, dict]]:
    """(golden case/kind/name, child) for every child of every golden answer, each child once."""
    children: list[tuple[str, dict]] = []
    for folder in sorted(GOLDEN.iterdir()):
        request = yaml.safe_load((folder / "request.yaml").read_text())
        now = datetime.fromisoformat(request.pop("now"))
        answer = SYNC[request["parent"]["kind"]](request, now=now)
        for child in answer.get("children", []):
            children.append((f"{folder.name}/{child['kind']}/{child['metadata']['name']}", child))
    return children


def pod(name: str, *containers: dict, **spec: object) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"containers": list(containers) or [container()], **spec}}


def container(image: str = "busybox:1.36", **fields: object) -> dict:
    return {"name": "main", "image": image, "command": ["sleep", "1"], **fields}


def service(name: str, **spec: object) -> dict:
    return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name},
            "spec": {"selector": {"app": name}, **spec}}


def template(**spec: object) -> dict:
    return {"metadata": {"labels": {"app": "t"}}, "spec": {"containers": [container()], **spec}}


def job(name: str, **spec: object) -> dict:
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name},
            "spec": {"template": template(restartPolicy="Never"), **spec}}


def statefulset(name: str, **spec: object) -> dict:
    return {"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": name},
            "spec": {"serviceName": name, "selector": {"matchLabels": {"app": "t"}}, "template": template(), **spec}}


EDGE_CASES: list[tuple[str, dict]] = [
    # Images: the tag decides imagePullPolicy (Always only for "latest", written or implied).
    ("image-without-tag", pod("p", container("busybox"))),
    ("image-latest", pod("p", container("busybox:latest"))),
    ("image-tag", pod("p", container("busybox:1.36"))),
    ("image-digest", pod("p", container(f"busybox@{DIGEST}"))),
    ("image-latest-and-digest", pod("p", container(f"busybox:latest@{DIGEST}"))),
    ("image-registry-port-no-tag", pod("p", container("localhost:5000/team/busybox"))),
    ("image-registry-port-tag", pod("p", container("registry.example.com:5000/team/busybox:v1"))),
    ("image-upper-case", pod("p", container("MyImage"))),
    ("image-pull-policy-given", pod("p", container("busybox", imagePullPolicy="Never"))),
    # Containers
    ("env-empty-and-absent-value", pod("p", container(env=[{"name": "A", "value": ""}, {"name": "B"}, {"name": "C", "value": "c"}]))),
    ("env-field-ref-without-api-version", pod("p", container(env=[
        {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "CPU", "valueFrom": {"resourceFieldRef": {"resource": "limits.cpu", "containerName": "main"}}}]))),
    ("ports-without-protocol", pod("p", container(ports=[{"containerPort": 80, "name": "http"},
                                                        {"containerPort": 53, "protocol": "UDP"}]))),
    ("host-network-ports", pod("p", container(ports=[{"containerPort": 8080}]), hostNetwork=True)),
    ("init-containers", pod("p", initContainers=[container(
        "alpine", name="init", ports=[{"containerPort": 9}],
        resources={"requests": {"cpu": "0.1"}, "limits": {"cpu": "100m", "memory": 64 * 2**20}})])),
    # Resources: a limit without a request is the request; quantities are canonicalised.
    ("limits-only", pod("p", container(resources={"limits": {"cpu": "1000m", "memory": "1024Mi"}}))),
    ("limits-and-some-requests", pod("p", container(resources={"requests": {"cpu": "500m"},
                                                              "limits": {"cpu": "1", "memory": "1Gi"}}))),
    ("integer-quantities", pod("p", container(resources={"limits": {"nvidia.com/gpu": 1, "cpu": 2}, "requests": {"cpu": 0.5}}))),
    ("requests-only", pod("p", container(resources={"requests": {"cpu": "0.1", "memory": "1e3"}}))),
    ("guaranteed", pod("p", container(resources={"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"cpu": "1", "memory": "1Gi"}}))),
    # Tolerations: DefaultTolerationSeconds adds a NoExecute toleration unless one already covers it.
    ("tolerations-no-schedule-only", pod("p", tolerations=[
        {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoSchedule"}])),
    ("tolerations-tolerate-everything", pod("p", tolerations=[{"operator": "Exists"}])),
    ("tolerations-not-ready-covered", pod("p", tolerations=[
        {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 10}])),
    ("tolerations-any-effect", pod("p", tolerations=[{"key": "node.kubernetes.io/unreachable", "operator": "Exists"}])),
    ("toleration-without-operator", pod("p", tolerations=[{"key": "a", "value": "b", "effect": "NoSchedule"}])),
    # Volumes
    ("volumes", pod("p", container(volumeMounts=[{"name": "c", "mountPath": "/c"}, {"name": "e", "mountPath": "/e"}]), volumes=[
        {"name": "c", "configMap": {"name": "cm", "items": [{"key": "k", "path": "k"}]}},
        {"name": "s", "secret": {"secretName": "s"}},
        {"name": "e", "emptyDir": {}},
        {"name": "d", "downwardAPI": {"items": [{"path": "n", "fieldRef": {"fieldPath": "metadata.name"}}]}},
        {"name": "p", "projected": {"sources": [{"configMap": {"name": "cm"}}]}}])),
    # Pod fields
    ("service-account-given", pod("p", serviceAccountName="default")),
    ("deprecated-service-account", pod("p", serviceAccount="default")),
    ("priority-class", pod("p", priorityClassName="stand-in-test")),
    ("pod-spec-given", pod("p", restartPolicy="OnFailure", dnsPolicy="Default", terminationGracePeriodSeconds=5,
                           schedulerName="volcano", securityContext={"runAsUser": 1000}, enableServiceLinks=False)),
    ("probes", pod("p", container(livenessProbe={"httpGet": {"path": "/", "port": 80}},
                                  readinessProbe={"exec": {"command": ["true"]}}))),
    # Services
    ("service-cluster-ip", service("s", ports=[{"port": 80}])),
    ("service-named-target-port", service("s", ports=[{"port": 80, "targetPort": "http", "name": "web"}])),
    ("service-headless", service("s", clusterIP="None", ports=[{"port": 80, "name": "a"}, {"port": 80, "name": "b", "protocol": "UDP"}])),
    ("service-headless-no-ports", service("s", clusterIP="None")),
    ("service-client-ip-affinity", service("s", ports=[{"port": 80}], sessionAffinity="ClientIP")),
    ("service-node-port", service("s", type="NodePort", ports=[{"port": 80}])),
    # Jobs
    ("job-minimal", job("j")),
    ("job-pod-failure-policy", job("j", podFailurePolicy={"rules": [
        {"action": "FailJob", "onExitCodes": {"operator": "In", "values": [42]}}]})),
    ("job-manual-selector", job("j", manualSelector=True, selector={"matchLabels": {"app": "t"}})),
    ("job-indexed", job("j", completionMode="Indexed", completions=3, parallelism=2)),
    ("job-suspended", job("j", suspend=True, backoffLimit=0)),
    # StatefulSets
    ("statefulset-minimal", statefulset("s")),
    ("statefulset-rolling-update-no-partition", statefulset("s", updateStrategy={"type": "RollingUpdate"})),
    # Quantities in templates: a child updated in place is rewritten on every sync when they are not canonical.
    ("statefulset-template-quantities", statefulset("s", template=template(
        containers=[container(resources={"requests": {"cpu": "1000m"}, "limits": {"memory": "1024Mi", "nvidia.com/gpu": 4}})],
        initContainers=[container(name="init", resources={"requests": {"cpu": 1}, "limits": {"cpu": "1.0"}})]))),
    ("job-template-quantities", job("j", template=template(
        restartPolicy="Never", containers=[container(resources={"requests": {"cpu": 0.5, "memory": "1e9"}, "limits": {"cpu": "2000m"}})],
        initContainers=[container(name="init", resources={"requests": {"memory": "0.5Gi"}, "limits": {"memory": "1024Mi"}})]))),
    ("statefulset-on-delete", statefulset("s", updateStrategy={"type": "OnDelete"}, podManagementPolicy="Parallel", replicas=0)),
    # Others
    ("configmap", {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"a": "", "b": "x"}}),
    ("podgroup-volcano-minimal", {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup", "metadata": {"name": "g"},
                                  "spec": {"minMember": 2}}),
    ("podgroup-scheduler-plugins-minimal", {"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
                                            "metadata": {"name": "g"}, "spec": {"minMember": 2}}),
]

# Empty maps and lists: what Go's `omitempty` drops when the server encodes the object.
EDGE_CASES += [
    ("empty-maps-and-lists", {**pod("p", container(env=[], args=[], ports=[], volumeMounts=[],
                                                 resources={"limits": {}, "requests": {}}),
                                    nodeSelector={}, volumes=[], imagePullSecrets=[], tolerations=[], initContainers=[]),
                              "metadata": {"name": "p", "labels": {}, "annotations": {}}}),
    ("empty-security-context-and-empty-dir", pod("p", container(securityContext={}), securityContext={},
                                                 volumes=[{"name": "e", "emptyDir": {}}])),
    ("service-empty-selector-and-ports", {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"},
                                          "spec": {"selector": {}, "clusterIP": "None", "ports": []}}),
    ("configmap-empty-data", {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {}, "binaryData": {}}),
    ("role-empty-rules", {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": "r"}, "rules": []}),
    ("rolebinding-empty-subjects", {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": "r"},
                                    "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "r"}, "subjects": []}),
    ("statefulset-empty-template-labels-and-selector", statefulset("s", template={"metadata": {"labels": {"app": "t"}, "annotations": {}},
                                                                                 "spec": {"containers": [container(env=[])]}})),
    ("job-empty-lists", job("j", template={"metadata": {"annotations": {}}, "spec": {"restartPolicy": "Never", "volumes": [],
                                                                                    "containers": [container(command=[])]}})),
    ("service-account-empty-secrets", {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "sa"}, "secrets": [],
                                       "imagePullSecrets": []}),
    ("load-balancer", service("s", type="LoadBalancer", ports=[{"port": 80}])),
]
EDGE_CASES += [
    ("zero-scalars", pod("p", container(stdin=False, tty=False, workingDir="", imagePullPolicy="IfNotPresent",
                                        securityContext={"privileged": False, "runAsNonRoot": False}),
                         hostNetwork=False, hostPID=False, hostname="", subdomain="", nodeName="", activeDeadlineSeconds=None,
                         shareProcessNamespace=False, automountServiceAccountToken=False, terminationGracePeriodSeconds=0)),
    ("service-zero-scalars", service("s", ports=[{"port": 80, "name": "", "nodePort": 0}], publishNotReadyAddresses=False,
                                     externalName="", loadBalancerIP="")),
    ("job-zero-scalars", job("j", suspend=False, backoffLimit=0, ttlSecondsAfterFinished=0, activeDeadlineSeconds=1)),
]
EDGE_CASES += [
    ("empty-strings-are-unset", pod("p", container(imagePullPolicy="", terminationMessagePath="", terminationMessagePolicy="",
                                                   ports=[{"containerPort": 80, "protocol": ""}]),
                                    restartPolicy="", dnsPolicy="", schedulerName="", serviceAccountName="")),
    ("service-empty-strings-are-unset", service("s", type="", sessionAffinity="", clusterIP="",
                                                ports=[{"port": 80, "protocol": "", "targetPort": ""}])),
]
