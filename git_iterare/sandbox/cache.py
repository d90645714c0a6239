"""Small facts kept between commands in the user's cache directory.

Asking the engine costs a round trip per question on every ``execute``; some answers
change rarely (an image's ``/etc/passwd`` never, an engine's API version and CPU count
almost never), so they are kept as one JSON file per key under
``$XDG_CACHE_HOME/git-iterare/<kind>/`` (``~/.cache`` when unset, as the XDG Base
Directory specification says). A cache that cannot be read or written only costs time:
every function here fails quietly.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path
from typing import Any


def cache_dir() -> Path:
    """``$XDG_CACHE_HOME/git-iterare`` (``~/.cache/git-iterare`` when unset or empty)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "git-iterare"


def _path(kind: str, key: str) -> Path:
    return cache_dir() / kind / (hashlib.sha256(key.encode()).hexdigest()[:32] + ".json")


def read(kind: str, key: str, max_age: float | None = None) -> dict[str, Any] | None:
    """The value :func:`write` kept for ``key`` of ``kind``, or None.

    Args:
        kind: the folder (``accounts``, ``engines``).
        key: any string (hashed into the file name, and kept in the file to check it).
        max_age: seconds after which a value counts as missing; None keeps it forever.

    Returns:
        The dict written, or None when missing, older than ``max_age``, or unreadable.
    """
    try:
        entry = json.loads(_path(kind, key).read_text(encoding="utf-8"))
        if entry.get("key") != key or not isinstance(entry.get("value"), dict):
            return None
        if max_age is not None and not 0 <= time.time() - float(entry["time"]) <= max_age:
            return None
        value: dict[str, Any] = entry["value"]
        return value
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def write(kind: str, key: str, value: dict[str, Any]) -> None:
    """Keep ``value`` (JSON-serializable) for ``key`` of ``kind``, replacing the file
    atomically so concurrent commands never read half of it."""
    path = _path(kind, key)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps({"key": key, "time": time.time(), "value": value}),
                       encoding="utf-8")
        tmp.replace(path)
    except (OSError, TypeError, ValueError):
        pass

