"""MXJob (kubeflow.org/v1): spec, names, env, children, observed pods, lifecycle and the sync entry point."""
