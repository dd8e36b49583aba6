"""The Metacontroller stand-in's hook URLs: the URL Metacontroller v4.17 builds from a webhook (pkg/hooks/webhook.go,
webhookURL), and, under service_dns, where a call to it goes: the local hooks server when the URL's host names a
Service of the store on the URL's port, else the error Metacontroller's HTTP client reports."""
from __future__ import annotations

import pytest
from helpers.objectstore import ObjectBag

from localcluster.config import DEFAULT_COMPOSITE_CONTROLLER, parse_composite_controller, webhook_url
from localcluster.metacontroller import MetacontrollerStandIn, SyncError, resolve_service

BASE = "http://127.0.0.1:5000"


def test_a_url_is_called_as_written():
    assert webhook_url({"url": "http://h.ns/x/sync", "timeout": "10s"}) == "http://h.ns/x/sync"


def test_a_service_reference_becomes_name_namespace_port_path():
    webhook = {"service": {"name": "mxjob-hooks", "namespace": "ml"}, "path": "/sync"}
    assert webhook_url(webhook) == "http://mxjob-hooks.ml:80/sync"
    webhook["service"] |= {"port": 8443, "protocol": "https"}
    assert webhook_url(webhook) == "https://mxjob-hooks.ml:8443/sync"


@pytest.mark.parametrize("webhook", [{}, {"service": {"name": "h", "namespace": "ns"}}, {"path": "/sync"},
                                     {"service": {"name": "h"}, "path": "/sync"}])
def test_an_incomplete_webhook_is_refused(webhook):
    with pytest.raises(ValueError, match="invalid webhook config"):
        webhook_url(webhook)


def test_the_default_controller_names_the_shipped_service():
    config = parse_composite_controller(DEFAULT_COMPOSITE_CONTROLLER, "default")
    assert (config.hook_url, config.hook_path) == ("http://mxjob-hooks.mxjob-system:80/sync", "/sync")


def store_with_service(namespace: str = "ml", port: int = 80) -> ObjectBag:
    store = ObjectBag()
    store.create({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "mxjob-hooks", "namespace": namespace},
                  "spec": {"ports": [{"port": port}]}})
    return store


@pytest.mark.parametrize("host", ["mxjob-hooks.ml", "mxjob-hooks.ml.svc", "mxjob-hooks.ml.svc.cluster.local"])
def test_cluster_dns_names_of_a_service_resolve(host):
    found = resolve_service(store_with_service(), host)
    assert found is not None and found["metadata"]["name"] == "mxjob-hooks"


@pytest.mark.parametrize("host", ["mxjob-hooks.mxjob-system", "mxjob-hooks", "other.ml", "mxjob-hooks.ml.svc.example.org", ""])
def test_other_names_do_not(host):
    assert resolve_service(store_with_service(), host) is None


def stand_in(store: ObjectBag, namespace: str, *, service_dns: bool) -> MetacontrollerStandIn:
    controller = {**DEFAULT_COMPOSITE_CONTROLLER, "spec": {**DEFAULT_COMPOSITE_CONTROLLER["spec"], "hooks": {"sync": {"webhook": {
        "service": {"name": "mxjob-hooks", "namespace": namespace, "port": 80}, "path": "/sync"}}}}}
    return MetacontrollerStandIn(store, parse_composite_controller(controller, "test"), BASE, service_dns=service_dns)


def test_under_service_dns_a_call_goes_to_the_hooks_server_at_the_urls_path():
    controller = stand_in(store_with_service("ml"), "ml", service_dns=True)
    assert controller._endpoint(controller.config.hook_url, controller.config.hook_path) == f"{BASE}/sync"


def test_under_service_dns_a_url_naming_no_service_fails_as_in_a_cluster():
    controller = stand_in(store_with_service("ml"), "mxjob-system", service_dns=True)
    with pytest.raises(SyncError) as raised:
        controller._endpoint(controller.config.hook_url, controller.config.hook_path)
    assert str(raised.value) == 'Post "http://mxjob-hooks.mxjob-system:80/sync": dial tcp: lookup mxjob-hooks.mxjob-system: no such host'


def test_under_service_dns_a_port_the_service_lacks_is_refused():
    controller = stand_in(store_with_service("ml", port=8080), "ml", service_dns=True)
    with pytest.raises(SyncError, match="connection refused"):
        controller._endpoint(controller.config.hook_url, controller.config.hook_path)


def test_without_service_dns_only_the_path_counts():
    controller = stand_in(ObjectBag(), "anywhere", service_dns=False)
    assert controller._endpoint(controller.config.hook_url, controller.config.hook_path) == f"{BASE}/sync"
