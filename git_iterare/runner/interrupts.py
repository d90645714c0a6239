"""Ctrl-C held back while steps that must not be cut in half run (a sandbox that started
is recorded as running before an interrupt acts)."""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from types import FrameType
from typing import TypeVar

T = TypeVar("T")


class HeldInterrupts:
    """SIGINT noted instead of raised between :meth:`hold` and :meth:`release`.

    Only the main thread can change signal handlers: elsewhere both are no-ops.
    """

    def __init__(self) -> None:
        self.pending = False
        self._previous: object = None
        self._held = False

    def _note(self, signum: int, frame: FrameType | None) -> None:
        self.pending = True

    def hold(self) -> None:
        """From now on a SIGINT is only noted (idempotent)."""
        if self._held or threading.current_thread() is not threading.main_thread():
            return
        self._previous = signal.signal(signal.SIGINT, self._note)
        self._held = True

    def release(self, *, raise_pending: bool = True) -> None:
        """Restore the previous SIGINT handler.

        Raises:
            KeyboardInterrupt: a SIGINT came while held (with ``raise_pending``).
        """
        if self._held:
            signal.signal(signal.SIGINT, self._previous)  # type: ignore[arg-type]
            self._held = False
        if self.pending and raise_pending:
            self.pending = False
            raise KeyboardInterrupt


def uninterrupted(fn: Callable[[], T]) -> T:
    """``fn()`` with Ctrl-C held back, for undoing what a launch cut short made: git hands
    the terminal's SIGINT on to ``git-iterare`` too, so one Ctrl-C arrives twice, and the
    second would cut that undoing short (leaving a container or folder behind). A SIGINT
    meanwhile is dropped: the one that started the undoing is on its way already."""
    held = HeldInterrupts()
    held.hold()
    try:
        return fn()
    finally:
        held.release(raise_pending=False)


#: Seconds after an interrupt was handled during which another SIGINT is taken for the
#: same Ctrl-C (see :func:`end_on_next_interrupt`).
SAME_CTRL_C = 1.0


def end_on_next_interrupt() -> None:
    """From now on, Ctrl-C ends the process at once with exit status 130, printing
    nothing: for when an interrupt was handled and the command is on its way out, so a
    second Ctrl-C cannot cut the interpreter's clean-up short (a traceback from an atexit
    handler). git hands the terminal's SIGINT on to ``git-iterare`` too, so one Ctrl-C
    arrives twice: a SIGINT within :data:`SAME_CTRL_C` seconds is that same one and is
    ignored, so it cannot end the process before its goodbye line. Main thread only."""
    import os
    import time

    if threading.current_thread() is not threading.main_thread():
        return
    since = time.monotonic()

    def on_interrupt(signum: int, frame: FrameType | None) -> None:
        if time.monotonic() - since >= SAME_CTRL_C:
            os._exit(130)

    signal.signal(signal.SIGINT, on_interrupt)


class RunGoesOn(KeyboardInterrupt):
    """Ctrl-C came once the run's agent had started: the run is recorded as running and
    goes on; whoever catches this says so (a bare "interrupted" would leave the user
    without its id).

    Attributes:
        run_id: the run.
    """

    def __init__(self, run_id: str) -> None:
        super().__init__(run_id)
        self.run_id = run_id


def caused_by_interrupt(exc: BaseException) -> bool:
    """Whether ``exc`` is a KeyboardInterrupt or was raised while one propagated (its
    ``__context__`` chain): a library cut short by Ctrl-C may fail with its own error
    (paramiko: ``RuntimeError: release unlocked lock``)."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, KeyboardInterrupt):
            return True
        seen.add(id(current))
        current = current.__context__
    return False
