"""The node: what a kubelet does on this machine, with processes instead of containers.

`registration` registers the Node (its size: this machine's, or `up --cpus/--memory/--gpus`) and
keeps its Lease and status current; `kubelet` runs each Pod bound to it, one worker thread per
Pod, and removes and writes a Pod only by its uid; `podprocess` is a container's process (start,
signals, exit codes, restart backoff), `podsandbox` what it sees (env, paths, stand-ins, DNS
wiring), `podenv` env resolution, `volumes` emptyDir/configMap/projected volumes on disk,
`podstatus` phase, conditions and containerStatuses; `noprocess` runs pods without processes, for
scale; `dns` gives Service and pod names loopback addresses and ports; `kubeletapi` is the log
endpoint `kubectl logs` reaches; `kubectl` the `kubectl exec`/`get pod` stand-in inside a pod.
"""
