"""The record commands are wired up: registry, bin/ script, man page; list stays light."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from git_iterare.cli.registry import COMMANDS
from tests.runs_helpers import make_run

ROOT = Path(__file__).resolve().parent.parent
RECORD_COMMANDS = ("list", "show", "push", "fetch", "import-legacy", "forget")
SECTIONS = ("NAME", "SYNOPSIS", "DESCRIPTION", "OPTIONS", "CONFIGURATION", "FILES",
            "EXIT STATUS", "EXAMPLES", "SEE ALSO")


@pytest.mark.parametrize("name", RECORD_COMMANDS)
def test_command_is_complete(name: str) -> None:
    assert name in COMMANDS
    assert (ROOT / "bin" / f"git-iterare-{name}").read_bytes() == \
        (ROOT / "bin" / "git-iterare").read_bytes()
    page = (ROOT / "man" / f"git-iterare-{name}.1").read_text()
    for section in SECTIONS:
        assert f".SH {section}\n" in page, section
    assert f"bin/git-iterare-{name}\n" in (ROOT / "setup.cfg").read_text()


def test_records_page_exists() -> None:
    page = (ROOT / "man" / "gititerare-records.5").read_text()
    for status in ("created", "starting", "running", "succeeded", "failed", "stopped",
                   "timed\\-out", "lost", "merged", "cleaned"):
        assert status in page


def test_list_imports_neither_docker_nor_dulwich_when_warm(repo: Path) -> None:
    # A finished run: an active one makes list ask the engine whether it ended (see
    # test_runs_e2e.py for that path).
    make_run(repo, status="succeeded")
    probe = ("import sys\nfrom git_iterare.cli.main import run\n"
             "code = run(['git-iterare', 'list'])\n"
             "print(code, 'docker' in sys.modules, 'dulwich' in sys.modules)")
    first = subprocess.run([sys.executable, "-c", probe], cwd=repo, capture_output=True,
                           text=True, check=True)
    assert first.stdout.splitlines()[-1] == "0 False True"  # cold: reads the record once
    warm = subprocess.run([sys.executable, "-c", probe], cwd=repo, capture_output=True,
                          text=True, check=True)
    assert warm.stdout.splitlines()[-1] == "0 False False"
