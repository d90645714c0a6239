"""Running a command on a pseudo-terminal, as a user at a terminal would."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path


def in_terminal(argv: list[str], cwd: Path, keys: bytes, ready: bytes, timeout: float = 60
                 ) -> tuple[int, bytes]:
    """Run ``argv`` on a pseudo-terminal; type ``keys`` a moment after ``ready`` appeared.

    Returns (exit status, everything it printed); a session still running after
    ``timeout`` seconds is killed (status -9).
    """
    import pty

    pid, fd = pty.fork()
    if pid == 0:  # the child: becomes argv on the terminal
        try:
            os.chdir(cwd)
            os.execvp(argv[0], argv)
        finally:
            os._exit(127)
    deadline = time.monotonic() + timeout
    try:
        output = converse(fd, keys, ready, deadline)
    except BaseException:
        os.kill(pid, signal.SIGKILL)  # never leave the session (and its sandbox) behind
        raise
    if time.monotonic() >= deadline:
        os.kill(pid, signal.SIGKILL)
    _, status = os.waitpid(pid, 0)
    os.close(fd)
    return os.waitstatus_to_exitcode(status), output


def converse(fd: int, keys: bytes, ready: bytes, deadline: float) -> bytes:
    """Read the terminal until it closes or ``deadline``; type ``keys`` after ``ready``."""
    import select

    output = b""
    typed = False
    while time.monotonic() < deadline:
        readable, _, _ = select.select([fd], [], [], 0.5)
        if readable:
            try:
                chunk = os.read(fd, 4096)
            except OSError:
                break
            if not chunk:
                break
            output += chunk
        elif not typed and ready in output:
            # Half a second with nothing new after ``ready``: the shell has printed its
            # prompt and waits for keys.
            os.write(fd, keys)
            typed = True
    return output
