"""Finishing a run nobody follows as soon as its agent ends.

``execute`` without ``--follow`` returns while the run goes on. Left alone, the run would
be finished by whichever command next looks at it, maybe hours later: its network sidecar
would stay up until then. So ``execute`` starts a watcher: ``git iterare finish --wait
RUN`` in a process of its own session (Ctrl-C and a closed terminal leave it alone) that
waits for the sandbox and finishes the run (its commit, record and notes) the moment it
ends, then removes the sandbox. Finishing is idempotent and locked per run, so a user's
``log -f`` meanwhile is no race; a run the user stops is left to that ``stop``, which
finishes it and says how it went. What the watcher says goes to the run's
state folder (``watch.log``); a watcher that cannot be started, or dies, only leaves the
run to the next command, as before.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from git_iterare.git.repo import Repo
from git_iterare.runner.paths import state_dir

#: The watcher's program: ``git iterare finish --wait RUN`` in this interpreter. ``-c``
#: puts the current directory (the repository, which may be hostile) first on the import
#: path: the program replaces it with the folder this git_iterare was imported from
#: before importing anything of its own.
_PROGRAM = ("import sys; sys.path[0] = sys.argv[2]; from git_iterare.cli.main import run; "
            "sys.exit(run(['git-iterare', 'finish', '--wait', '--watcher', sys.argv[1]]))")

#: The folder holding the ``git_iterare`` package in use (installed or a checkout).
_IMPORT_ROOT = str(Path(__file__).resolve().parents[2])


def watch(repo: Repo, run_id: str) -> int | None:
    """Start the watcher of run ``run_id``, in the current directory and environment;
    return its process id, or None when it could not be started (nothing is raised: the
    run is finished by the next command that looks at it).

    The watcher of a loop drives its rounds: the loop's driver mark
    (:func:`git_iterare.runner.driver.hold_driver`) is held here before the watcher
    starts, so no other command takes the loop's rounds in the meantime, and handed to
    it (the descriptor inherited, its number in
    :data:`~git_iterare.runner.driver.LOOP_FD`).
    """
    from git_iterare.runner.driver import LOOP_FD, hold_driver, is_loop_run

    held = hold_driver(repo, run_id) if is_loop_run(repo, run_id) else None
    log = state_dir(repo, run_id) / "watch.log"
    env = {**os.environ, "NO_COLOR": "1"}
    if held is not None:
        env[LOOP_FD] = str(held)
    try:
        with open(log, "ab") as out:
            child = subprocess.Popen(
                [sys.executable, "-c", _PROGRAM, run_id, _IMPORT_ROOT], stdin=subprocess.DEVNULL,
                stdout=out, stderr=out, start_new_session=True, close_fds=True,
                pass_fds=() if held is None else (held,), env=env)
    except OSError:
        return None
    finally:
        if held is not None:
            os.close(held)  # the watcher's copy holds it now
    return child.pid
