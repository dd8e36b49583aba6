"""The one error of the emulation: a sync that failed and is retried with backoff."""

from __future__ import annotations


class SyncError(Exception):
    """A failed sync: the hook call failed, its answer was refused, or applying it failed."""
