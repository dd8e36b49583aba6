"""Loopback ports for the processes the local cluster starts, and telling when one was taken.

A port is picked by binding port 0 and closing the socket, then handed to a process that binds it
later. In between, any other process (an outgoing connection's ephemeral port, a second test
process starting its own cluster) may take it. Each starter therefore tries again on new ports,
up to PORT_ATTEMPTS times, when its process exited saying its address was in use.
"""
from __future__ import annotations

import socket

LOOPBACK = "127.0.0.1"
PORT_ATTEMPTS = 4
# What Go's net package (etcd, the Kubernetes components, Kueue, Metacontroller) and Python's
# socket (gunicorn) say when a bind finds the address taken; compared without case.
ADDRESS_IN_USE = "address already in use"


def free_port() -> int:
    """A TCP port free on loopback right now (only now: see the module's docstring)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((LOOPBACK, 0))
        port: int = sock.getsockname()[1]  # (host, port) for AF_INET; typeshed says Any
        return port


def says_port_taken(log_text: str) -> bool:
    """Whether a process's log says a bind of its found the address in use."""
    return ADDRESS_IN_USE in log_text.lower()
