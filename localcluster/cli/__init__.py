"""The `localcluster` command: `run`, `up`, `down` and `logs`.

`commands` is the shell: it parses the options once, starts the cluster and loops; `up` is
`localcluster up` and `down`. What the shell decides lives in small pure modules beside it: how a
job stands and how a run ends (`jobstatus`, one status reader per kind), the live view (`runview`),
what is said after a failure (`postmortem`), a manifest read as kubectl reads it (`kubectlyaml`),
and the served versions of the shipped CRDs (`crds`).
"""
