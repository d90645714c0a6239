"""Marks a process holds while it works on something: an exclusive ``flock`` (flock(2)) on
a file, which the kernel lets go of when the process ends (kill -9 included), so other
processes can tell work going on from work whose process is gone. The descriptor is not
inherited by child processes (PEP 446), so a program the holder starts cannot keep it."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path


def hold(path: Path, *, wait: bool = True) -> int:
    """Hold the mark ``path`` (made, mode 0600, when missing); return the descriptor that
    holds it: close it to let go.

    Args:
        path: the mark's file.
        wait: wait while another process holds it; else fail at once.

    Raises:
        BlockingIOError: another process holds it (without ``wait``).
        OSError: the file cannot be made or locked.
    """
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
    except BaseException:
        os.close(fd)
        raise
    return fd


def held(path: Path) -> bool | None:
    """Whether a live process holds the mark ``path``: None when there is no such file
    (or it cannot be opened), False when nobody holds it."""
    try:
        fd = os.open(path, os.O_RDWR)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return None
    finally:
        os.close(fd)
    return False
