"""A local cluster for MXJobs and ChainerJobs: Metacontroller stand-ins driving the real hooks server, and a process kubelet.

Modules: store (the API "store"), config (the CompositeControllers it follows), metacontroller (the
stand-in, one per CompositeController), jobcontroller and statefulset (the Job and StatefulSet
controllers, on reconciler's loop, one delayqueue), gang (the gang gate), kubelet (a pod's life, one
worker thread each) with podprocess (a container's process: start, signals, exit codes, backoff),
podsandbox (what a process sees: env, paths, stand-ins, DNS wiring), podenv (env resolution and
`$(NAME)` expansion), podstatus (phase, conditions, containerStatuses), volumes (emptyDir/configMap
on disk, mount paths mapped), crds (the served CRD versions), fieldvalidation (the fields a CRD
prunes, its defaults), kubectlyaml (a manifest read as kubectl reads it), kubectl (the `kubectl exec`
stand-in), dns (Service names and ports on loopback), defaults (server-side
defaulting), hooks_server (gunicorn and a fault proxy), cluster (wiring), cli.
"""
