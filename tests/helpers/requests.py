"""Metacontroller sync requests built around a parent, as the MXJob CompositeController sends them for a new job."""
from __future__ import annotations

MXJOB_CHILD_KEYS = ("Pod.v1", "Service.v1", "ConfigMap.v1",
                    # Progress reporting's rules (metacontroller/compositecontroller.yaml).
                    "ServiceAccount.v1", "Role.rbac.authorization.k8s.io/v1", "RoleBinding.rbac.authorization.k8s.io/v1")


def mxjob_sync_request(parent: dict) -> dict:
    """A complete sync request for an MXJob parent that has no children yet."""
    return {
        "controller": {"apiVersion": "metacontroller.k8s.io/v1alpha1", "kind": "CompositeController",
                       "metadata": {"name": "mxjob-controller"}},
        "parent": parent,
        "children": {key: {} for key in MXJOB_CHILD_KEYS},
        "related": {},
        "finalizing": False,
    }
