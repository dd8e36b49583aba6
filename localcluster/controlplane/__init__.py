"""The control plane: the real Kubernetes components as processes, and the one client every part uses.

`processes` starts etcd, kube-apiserver, kube-controller-manager and kube-scheduler v1.37.2 (built by
`make controlplane`) on loopback and writes their kubeconfigs; `apistore` is the API client the
Metacontroller emulation, the kubelet and the CLI share (informer caches, fresh reads, binding,
status, TokenRequest), behind the `localcluster.store` interface; `kueue` runs a real Kueue
manager against it (`make kueue`); `gang` is the one stand-in here, a second scheduler for the
Volcano and scheduler-plugins `schedulerName`s, binding a gang only when all of it fits.
"""
