"""The hooks server's log format: one JSON object per line, for the app's sync lines and gunicorn's own.

A module of its own, importing only the standard library, so that gunicorn's master can load it from
`gunicorn_conf.logconfig_dict` without importing the app (Flask, the cores).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message and the record's `fields`."""

    def format(self, record: logging.LogRecord) -> str:
        """The record as one line of compact JSON."""
        entry: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds")[:-6] + "Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        fields = getattr(record, "fields", None)
        if isinstance(fields, Mapping):
            entry.update(fields)
        if record.exc_info and "traceback" not in entry:
            entry["traceback"] = self.formatException(record.exc_info)
        # default=str: a log line must never fail because of an odd value.
        return json.dumps(entry, separators=(",", ":"), default=str)
