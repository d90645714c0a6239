"""Counting the bytes of a long transfer as they go, for its progress line
(:meth:`git_iterare.ui.Progress.meter`): a file handed to the Docker SDK as a request's
body is read through :class:`Metered`."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import IO

#: Transfers smaller than this show no progress (bytes): they take no time to see.
SHOWN_FROM = 8 << 20
#: Seconds between two redraws of the progress line.
EVERY = 0.2
#: What http.client reads at a time from a body that is a file.
BLOCK = 64 << 10


class Metered:
    """A file open for reading whose reads are counted: ``shown(sent, total)`` (bytes) is
    called at most every :data:`EVERY` seconds and once at the end, for transfers of
    :data:`SHOWN_FROM` bytes or more. It has a length (``total``), so a request sends it
    with a Content-Length, in blocks, as it would the file itself."""

    def __init__(self, handle: IO[bytes], total: int, shown: Callable[[int, int], None]):
        self._handle, self._total, self._shown = handle, total, shown
        self._sent, self._last = 0, float("-inf")

    def __len__(self) -> int:
        return self._total

    def read(self, size: int = -1) -> bytes:
        data = self._handle.read(size)
        self._sent += len(data)
        now = time.monotonic()
        if self._total >= SHOWN_FROM and (now - self._last >= EVERY or not data):
            self._last = now
            self._shown(self._sent, self._total)
        return data

    def __iter__(self) -> Iterator[bytes]:
        while data := self.read(BLOCK):
            yield data


def transfer_line(what: str, sent: int, total: int) -> str:
    """``what: 12.5 of 205.0 MiB (6%)``: a transfer's progress line."""
    mib = 1 << 20
    percent = 100 * sent // total if total else 100
    return f"{what}: {sent / mib:.1f} of {total / mib:.1f} MiB ({percent}%)"
