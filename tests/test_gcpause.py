"""The garbage collector is paused while a command starts up (git_iterare.gcpause) and is
back for the command's real work: at once for most commands, after the launch for
``execute``, also when the launch is refused. Each case runs in a fresh interpreter, as
the bin/ scripts start one."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

#: Runs the command line in argv[1:] as bin/git-iterare does, then reports the collector.
PROBE = """
import gc, sys
from git_iterare import gcpause
gcpause.pause()
assert not gc.isenabled()
from git_iterare.cli import main
sys.argv = sys.argv[1:]
try:
    main.run()
finally:
    print("enabled" if gc.isenabled() else "paused", gc.get_freeze_count() > 0,
          file=sys.stderr)
"""


def _collector_after(*argv: str, cwd: Path) -> str:
    done = subprocess.run([sys.executable, "-c", PROBE, "git-iterare", *argv], cwd=cwd,
                          capture_output=True, text=True, check=False)
    return done.stderr.splitlines()[-1]


def test_the_bin_scripts_pause_it_before_importing_anything() -> None:
    script = (Path(__file__).parent.parent / "bin" / "git-iterare").read_text()
    assert script.index("gcpause.pause()") < script.index("from git_iterare.cli.main")


@pytest.mark.parametrize("argv", [("list",), ("config",), ("trust", "--help")])
def test_other_commands_run_with_it_back(repo: Path, argv: tuple[str, ...]) -> None:
    assert _collector_after(*argv, cwd=repo) == "enabled True"


def test_execute_gets_it_back_also_when_the_run_is_refused(repo: Path) -> None:
    # No such prompt: refused before anything exists, after the command started up.
    assert _collector_after("execute", "no-such-prompt", cwd=repo) == "enabled True"


def test_resume_without_pause_changes_nothing() -> None:
    probe = ("import gc; from git_iterare import gcpause; gcpause.resume(); "
             "print(gc.isenabled(), gc.get_freeze_count())")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         check=True).stdout
    assert out == "True 0\n"
