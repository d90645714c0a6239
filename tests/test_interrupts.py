"""Ctrl-C held back over steps that must not be cut in half, and a library's own error on
Ctrl-C taken as the interrupt it is."""

from __future__ import annotations

import os
import signal

import pytest

from git_iterare.cli.main import run
from git_iterare.runner.interrupts import HeldInterrupts, caused_by_interrupt


def test_a_sigint_while_held_is_raised_on_release() -> None:
    held = HeldInterrupts()
    held.hold()
    os.kill(os.getpid(), signal.SIGINT)  # noted, not raised
    assert held.pending
    with pytest.raises(KeyboardInterrupt):
        held.release()
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    quiet = HeldInterrupts()
    quiet.hold()
    quiet.release()  # none came: nothing raised


def test_release_without_raising_drops_the_pending_interrupt() -> None:
    held = HeldInterrupts()
    held.hold()
    os.kill(os.getpid(), signal.SIGINT)
    held.release(raise_pending=False)
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def _paramiko_like() -> None:
    try:
        raise KeyboardInterrupt
    finally:
        raise RuntimeError("release unlocked lock")  # as the library does


def test_an_error_raised_while_an_interrupt_propagated_counts_as_one(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(RuntimeError) as caught:
        _paramiko_like()
    assert caused_by_interrupt(caught.value)
    assert not caused_by_interrupt(RuntimeError("release unlocked lock"))

    def broken(*args: object, **kwargs: object) -> None:
        _paramiko_like()

    monkeypatch.setattr("git_iterare.cli.main.cli.main", broken)
    assert run(["git-iterare", "list"]) == 130
    err = capsys.readouterr().err
    assert err == "\ninterrupted\n" and "bug" not in err


def test_the_same_ctrl_c_handed_on_by_git_does_not_cut_the_goodbye_short() -> None:
    """git hands the terminal's SIGINT on to git-iterare, so one Ctrl-C arrives twice: the
    second must not end the process before its goodbye line (found by a helper); a later
    one does end it."""
    import subprocess
    import sys

    probe = ("import os, signal, time\n"
             "from git_iterare.runner.interrupts import SAME_CTRL_C, end_on_next_interrupt\n"
             "end_on_next_interrupt()\n"
             "os.kill(os.getpid(), signal.SIGINT)\n"
             "print('goodbye', flush=True)\n"
             "time.sleep(SAME_CTRL_C + 0.2)\n"
             "os.kill(os.getpid(), signal.SIGINT)\n"
             "time.sleep(5)\n"
             "print('still here')\n")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          timeout=30, check=False)
    assert (done.returncode, done.stdout) == (130, "goodbye\n")


def test_undoing_a_launch_is_not_cut_short_by_the_same_ctrl_c_arriving_twice() -> None:
    """git hands the terminal's SIGINT on to git-iterare: the second copy is dropped while
    what the first interrupted is undone."""
    from git_iterare.runner.interrupts import uninterrupted

    def undo() -> str:
        os.kill(os.getpid(), signal.SIGINT)  # the copy git forwarded
        return "undone"

    assert uninterrupted(undo) == "undone"
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


