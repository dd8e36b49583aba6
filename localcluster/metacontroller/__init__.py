"""The local cluster's Metacontroller: an emulation of Metacontroller v4.17's CompositeController.

It is laid out as Metacontroller's own packages, each readable and testable alone: `apply` (Go's
three-way merge and the last-applied annotation), `controllerref` (claiming children: adopt and
release by the selector), `throttle` (the one client's 5 requests/s, burst 10), `informer` (the
parent cache a sync reads), `customize` (related objects), `manage_children` (the order and the
objects a sync writes), `webhook` (calling a hook over HTTP), `composite` (one sync: `Emulation`,
which the scenario tests step by hand) and `workers` (the watch-driven worker loop the local
cluster runs: `MetacontrollerStandIn`, on `delayqueue`). `binary` runs a real Metacontroller binary
instead (`localcluster up --metacontroller PATH`). docs/localcluster.md has the table of what it does as the
real one does, and where it differs.
"""

from .apply import LAST_APPLIED, three_way_merge
from .composite import Emulation, Event, Stale
from .errors import SyncError
from .manage_children import write_order
from .throttle import CLIENT_BURST, CLIENT_QPS, ClientThrottle
from .webhook import resolve_service
from .workers import RETRY_BACKOFF, WORKERS, MetacontrollerStandIn

__all__ = ["CLIENT_BURST", "CLIENT_QPS", "LAST_APPLIED", "RETRY_BACKOFF", "WORKERS", "ClientThrottle", "Emulation",
           "Event", "MetacontrollerStandIn", "Stale", "SyncError", "resolve_service", "three_way_merge",
           "write_order"]
