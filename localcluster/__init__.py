"""A local cluster for MXJobs: a Metacontroller stand-in driving the real hooks server, and a process kubelet.

Modules: store (the API "store"), config (the CompositeController it follows), metacontroller (the
stand-in), kubelet (pods as processes), dns (Service names and ports on loopback), defaults
(server-side defaulting), hooks_server (gunicorn and a fault proxy), cluster (wiring), cli.
"""
