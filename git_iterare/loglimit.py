"""The agent's output, in bounded memory: split into bounded lines, and capped for the record.

* :func:`split_lines` turns a stream of chunks into lines of at most
  :data:`~git_iterare.limits.MAX_LINE_BYTES` (longer ones come in pieces).
* :class:`CappedLog` keeps the first :data:`~git_iterare.limits.LOG_HEAD_BYTES` and the last
  :data:`~git_iterare.limits.LOG_TAIL_BYTES` of a log, whole lines, and a marker line in
  between saying how much was dropped.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator

from git_iterare import limits as lim


def split_lines(chunks: Iterable[bytes], max_line: int = lim.MAX_LINE_BYTES) -> Iterator[bytes]:
    """Yield the lines of ``chunks`` (newline kept), each at most ``max_line`` bytes.

    A line longer than ``max_line`` is yielded in pieces of ``max_line`` bytes (only its
    last piece ends with the newline); a last line without a newline is yielded as it is.
    Memory holds one line at most.
    """
    pending: list[bytes] = []
    size = 0
    for chunk in chunks:
        start = 0
        while start < len(chunk):
            end = chunk.find(b"\n", start)
            stop = len(chunk) if end < 0 else end + 1
            stop = min(stop, start + max_line - size)
            pending.append(chunk[start:stop])
            size += stop - start
            start = stop
            if pending[-1].endswith(b"\n") or size >= max_line:
                yield b"".join(pending)
                pending, size = [], 0
    if pending:
        yield b"".join(pending)


#: How git-iterare's own lines in a run's log begin (a round's start, what was dropped).
OWN_PREFIX = "[git iterare:"
#: What an agent's line that begins so is shown with, so that it cannot pass for one.
AGENT_MARK = "[agent] "


def looks_own(line: str) -> bool:
    """Whether ``line`` begins as git-iterare's own lines do (``[git``), read as a
    terminal shows it: compatibility forms folded (a fullwidth bracket or colon, NFKC),
    invisible format characters dropped, any run of blanks (a no-break space) one space,
    case ignored. (Letters of other scripts that look alike are not caught.)"""
    import unicodedata

    head = unicodedata.normalize("NFKC", line[:64])
    head = "".join(c for c in head if unicodedata.category(c) != "Cf")
    return " ".join(head.split()).casefold().startswith("[git")


def agent_line(line: str) -> str:
    """``line``, the agent's, with :data:`AGENT_MARK` before it when it
    :func:`looks_own`."""
    return AGENT_MARK + line if looks_own(line) else line


def agent_lines(lines: Iterable[bytes]) -> Iterator[bytes]:
    """``lines`` of the agent's output, each through :func:`agent_line`: in a stored log
    a line that begins with :data:`OWN_PREFIX` is then git-iterare's."""
    mark = AGENT_MARK.encode()
    for line in lines:
        yield mark + line if looks_own(line[:256].decode("utf-8", "replace")) else line


def marker(lines: int, size: int) -> bytes:
    """The line that stands for what :class:`CappedLog` dropped."""
    return (f"[git iterare: {size} bytes ({lines} lines) of output dropped here; the record "
            f"keeps the first {lim.human(lim.LOG_HEAD_BYTES)} and the last "
            f"{lim.human(lim.LOG_TAIL_BYTES)} (LOG_HEAD_BYTES, LOG_TAIL_BYTES)]\n").encode()


class CappedLog:
    """The first ``head`` and last ``tail`` bytes of a log, in whole lines.

    Feed lines with :meth:`add` (each at most :data:`~git_iterare.limits.MAX_LINE_BYTES`,
    as :func:`split_lines` makes them); :meth:`data` gives the kept log.

    Attributes:
        dropped_lines: lines left out so far.
        dropped_bytes: their bytes.
        total_bytes: bytes fed.
    """

    def __init__(self, head: int = lim.LOG_HEAD_BYTES, tail: int = lim.LOG_TAIL_BYTES):
        self._head_limit, self._tail_limit = head, tail
        self._head: list[bytes] = []
        self._head_size = 0
        self._head_full = False
        self._tail: deque[bytes] = deque()
        self._tail_size = 0
        self.dropped_lines = 0
        self.dropped_bytes = 0
        self.total_bytes = 0

    def add(self, line: bytes) -> None:
        """Add one line (with its newline, or the last line without)."""
        self.total_bytes += len(line)
        if not self._head_full and self._head_size + len(line) <= self._head_limit:
            self._head.append(line)
            self._head_size += len(line)
            return
        self._head_full = True
        self._tail.append(line)
        self._tail_size += len(line)
        while self._tail_size > self._tail_limit and self._tail:
            gone = self._tail.popleft()
            self._tail_size -= len(gone)
            self.dropped_lines += 1
            self.dropped_bytes += len(gone)

    def data(self) -> bytes:
        """The kept log: head, a :func:`marker` line when something was dropped, tail."""
        parts = list(self._head)
        if parts and not parts[-1].endswith(b"\n") and (self._tail or self.dropped_lines):
            parts[-1] += b"\n"
        if self.dropped_lines:
            parts.append(marker(self.dropped_lines, self.dropped_bytes))
        parts.extend(self._tail)
        return b"".join(parts)


def capped(lines: Iterable[bytes]) -> bytes:
    """:meth:`CappedLog.data` of ``lines``."""
    log = CappedLog()
    for line in lines:
        log.add(line)
    return log.data()
