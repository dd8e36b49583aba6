"""A local cluster for MXJobs and ChainerJobs: Metacontroller stand-ins driving the real hooks server, and a process kubelet.

Modules: store (the API "store"), config (the CompositeControllers it follows), metacontroller (the
stand-in, one per CompositeController), jobcontroller and statefulset (the Job and StatefulSet
controllers, on reconciler's loop), kubelet (pods as processes), volumes (emptyDir/configMap on disk,
mount paths mapped), kubectl (the `kubectl exec` stand-in), dns (Service names and ports on
loopback), defaults (server-side defaulting), hooks_server (gunicorn and a fault proxy), cluster
(wiring), cli.
"""
