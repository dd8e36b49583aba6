"""A local cluster for MXJobs and ChainerJobs: the real Kubernetes control plane, Metacontroller
stand-ins driving the real hooks server, and a process kubelet.

Modules: controlplane (etcd, kube-apiserver and kube-controller-manager as child processes),
apistore (the API client every part uses) behind store (its interface, errors and events), config
(the CompositeControllers it follows), metacontroller (the stand-in, one per CompositeController, on
delayqueue), gang (the gang gate), kubelet (a pod's life, one worker thread each) with podprocess (a
container's process: start, signals, exit codes, backoff), podsandbox (what a process sees: env,
paths, stand-ins, DNS wiring), podenv (env resolution and `$(NAME)` expansion), podstatus (phase,
conditions, containerStatuses), volumes (emptyDir/configMap on disk, mount paths mapped), noprocess
(pods without processes, for scale), kubeletapi (the log endpoint `kubectl logs` reaches), crds (the
served CRD versions), kubectlyaml (a manifest read as kubectl reads it), kubectl (the `kubectl exec`
stand-in), dns (Service names and ports on loopback), hooks_server (gunicorn and a fault proxy),
cluster (wiring), clusterup (`localcluster up`), cli.
"""
