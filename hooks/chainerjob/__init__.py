"""ChainerJob (kubeflow.org/v1alpha1): the pure core of the second job kind.

`sync.sync_chainerjob(request, *, now, kubectl_image)` is the entry point; `spec` parses, defaults
and validates; `names` names and labels; `launch` the MPI launch wiring (env, rsh agent,
hostfile); `decision` what a sync answers, from the observations alone; `children` one builder
per child object; `status` the status; `vocabulary` its words and closed sets.

What the hook emits for a job J (namespace N) with worker sets W (in name order), exactly:

Non-distributed (no workerSets): only the Job `J-master` (below, without the launch additions).

Distributed:
- ServiceAccount `J-launcher`; Role `J-launcher-role` (rules: `pods` get/list and `pods/exec`
  create/get on the sorted worker pod names, both left out when there are no worker pods;
  `apps` `statefulsets` get on the StatefulSet names); RoleBinding `J-launcher-rolebinding`.
  Labels `chainerjob.kubeflow.org/name: J`.
- ConfigMap `J-assets`, data keys:
  - `kubexeb.sh`: the rsh agent, `kubexeb.sh <host> <command...>`. If `<host>` equals
    `$(hostname)` it runs `/bin/sh -c "<command...>"` here; otherwise
    `${KUBECTL_DIR:-/kubeflow/chainer-operator/kube}/kubectl exec -i <host> -c <container> --
    /bin/sh -c "<command...>"`, where `<container>` is the worker set's main container
    (`chainer`, else the template's first container). With `$CHAINERJOB_AGENT_RECORDS` set (by the
    launcher) it runs kubectl as a child instead, keeping a record `<its pid>.<host>` in that
    directory while it runs, removed when kubectl exits 0 and holding the exit code otherwise.
  - `launcher.sh`: the master's, `launcher.sh <command...>`: the command's exit code, except that
    0 becomes 1 when an agent's record is left (hooks.chainerjob.launch, launcher_script).
  - `hostfile`: one line `<host> slots=<N>` per worker pod (worker sets in name order,
    ordinals 0..replicas-1 in order), then `J-master slots=<M>` last; a final newline.
- Per worker set W: a headless Service `J-workerset-W` (clusterIP None, publishNotReadyAddresses,
  selector = the pod labels below), and a StatefulSet `J-workerset-W`: podManagementPolicy
  Parallel, serviceName `J-workerset-W`, replicas = spec replicas (0 once the master has finished),
  selector.matchLabels = `{chainerjob.kubeflow.org/name: J, chainerjob.kubeflow.org/role:
  workerset, chainerjob.kubeflow.org/workersetname: W}` (pod template labels: the user's plus
  these). Pods `J-workerset-W-<i>`, whose host names are their pod names. Their pod spec is the
  user's, plus the volume `chainer-operator-volume-assets` (configMap `J-assets`, items
  `hostfile` mode 0444 and `kubexeb.sh` mode 0555) mounted read-only at
  `/kubeflow/chainer-operator/assets` in every container and init container, and the launch env
  (below) after the user's env in every container. Their serviceAccountName is the user's.
- The Job `J-master`, only once every StatefulSet reports `status.readyReplicas` >= its replicas
  (then kept whatever the workers do; never created again once the job has finished):
  parallelism 1, completions 1, backoffLimit and activeDeadlineSeconds from spec.master, pod
  template labels the user's plus `{chainerjob.kubeflow.org/name: J, chainerjob.kubeflow.org/role:
  master}`, restartPolicy Never unless the user chose OnFailure. With worker sets its pod spec also
  gets: `serviceAccountName: J-launcher`; `hostname: J-master`; volumes
  `chainer-operator-volume-kubectl` (emptyDir) mounted at `/kubeflow/chainer-operator/kube` and
  the assets volume as on the workers plus the item `launcher.sh` (mode 0555), in every container
  and init container; the launch env in every container; the main container's `command`, when it
  has one, prefixed with `/kubeflow/chainer-operator/assets/launcher.sh`; and, after the user's
  init containers, the init container `kubectl-delivery`
  (image: the `kubectl_image` setting, command `cp /bin/kubectl
  /kubeflow/chainer-operator/kube/kubectl`, only the kubectl volume mounted).

Launch env, in this order, replacing user entries of the same names: `KUBECTL_DIR`
(`/kubeflow/chainer-operator/kube`), `OMPI_MCA_plm_rsh_agent`
(`/kubeflow/chainer-operator/assets/kubexeb.sh`), `OMPI_MCA_orte_keep_fqdn_hostnames=t`,
`OMPI_MCA_orte_default_hostfile` (`/kubeflow/chainer-operator/assets/hostfile`),
`OMPI_MCA_btl_tcp_if_exclude=lo,docker0`, `OMPI_MCA_plm_rsh_no_tree_spawn=1`,
`PRTE_MCA_plm_ssh_agent` (the agent), `PRTE_MCA_prte_default_hostfile` (the hostfile),
`PRTE_MCA_plm_ssh_no_tree_spawn=1`.
"""
