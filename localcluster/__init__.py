"""A local cluster for MXJobs and ChainerJobs: the real Kubernetes control plane, Metacontroller (its
emulation or the real binary) driving the real hooks server, and a process kubelet.

Folders by what runs: `controlplane/` (etcd, kube-apiserver, kube-controller-manager,
kube-scheduler, Kueue, the gang stand-in, and the API client), `node/` (the process kubelet, its
Node, DNS and logs), `metacontroller/` (the emulation, laid out as Metacontroller's packages, and
the runner of a real binary), `cli/` (the `localcluster` command). Beside them: `cluster`
(`LocalCluster`, which wires the parts), `store` (the client interface, its errors and events),
`config` (the CompositeControllers it follows), `types`, and `hooks_server` (gunicorn and a fault
proxy).
"""
