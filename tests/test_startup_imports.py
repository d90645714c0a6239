"""What start-up and ``list`` load (issue 11: registering more agents must not slow them).

Each case runs in a fresh interpreter and reads ``sys.modules`` after the command, so a
module-level import added anywhere on the path shows up here, not only in a benchmark.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.runs_helpers import make_run

#: Modules neither ``--version`` nor a warm ``list --format json`` needs.
HEAVY = ("git_iterare.agents.base", "git_iterare.agents.values", "git_iterare.config",
         "dulwich", "json", "difflib", "traceback")
AGENT_MODULES = ("git_iterare.agents.claude", "git_iterare.agents.codex",
                 "git_iterare.agents.gemini", "git_iterare.agents.shell")


def _loaded_after(code: str, cwd: Path) -> set[str]:
    probe = (f"import sys\n{code}\n"
             "print('\\n'.join(sorted(sys.modules)), file=sys.stderr)")
    out = subprocess.run([sys.executable, "-c", probe], cwd=cwd, capture_output=True,
                         text=True, check=True)
    return set(out.stderr.split())


def _run_cli(*args: str) -> str:
    return ("from git_iterare.cli.main import run\n"
            f"code = run(['git-iterare', *{list(args)!r}])\n"
            "assert code == 0, code")


def test_version_loads_no_agent_and_nothing_heavy(tmp_path: Path) -> None:
    loaded = _loaded_after(_run_cli("--version"), tmp_path)
    assert "click" in loaded
    # locale stays: click's own -h looks its help text up with gettext on every start (a
    # few milliseconds, too little to keep an option of our own for).
    assert not loaded & {*HEAVY, *AGENT_MODULES, "subprocess", "shutil"}


@pytest.mark.parametrize("args", [["-h"], ["execute", "-h"], ["interactive", "-h"],
                                  ["image", "-h"], ["completion", "bash"]])
def test_help_and_completion_load_no_agent(args: list[str], tmp_path: Path) -> None:
    # Agent names come from the registry; what only an agent's module knows is read for
    # `credentials -h` and `image build` alone.
    loaded = _loaded_after("import contextlib, io\n"
                           "with contextlib.redirect_stdout(io.StringIO()):\n    "
                           + _run_cli(*args).replace("\n", "\n    "), tmp_path)
    assert "click" in loaded
    assert not loaded & {*AGENT_MODULES, "git_iterare.agents.base"}


def test_warm_json_list_loads_no_agent(repo: Path) -> None:
    for i in range(3):
        make_run(repo, f"r{i}", status="succeeded")
    first = _loaded_after(_run_cli("list", "--format", "json"), repo)  # fills the cache
    assert not first & set(AGENT_MODULES)
    warm = _loaded_after(_run_cli("list", "--format", "json"), repo)
    assert "git_iterare.runs.index" in warm
    assert not warm & {*HEAVY, *AGENT_MODULES}


def test_table_list_labels_costs_without_agent_modules(repo: Path) -> None:
    make_run(repo, "paid", status="succeeded", cost_usd=0.5)
    loaded = _loaded_after(_run_cli("list"), repo)
    assert "git_iterare.agents.labels" in loaded
    assert not loaded & {*AGENT_MODULES, "git_iterare.agents.base", "git_iterare.agents.values",
                         "git_iterare.agents.render"}


def test_core_key_lookup_imports_no_agent(tmp_path: Path) -> None:
    loaded = _loaded_after("from git_iterare.config import KEYS\n"
                           "assert KEYS['docker.image'].name == 'docker.image'\n"
                           "assert 'firewall.allowed_domains' in KEYS", tmp_path)
    assert not loaded & set(AGENT_MODULES)
    everything = _loaded_after("from git_iterare.config import KEYS\n"
                               "assert 'claude.model' in KEYS", tmp_path)
    assert set(AGENT_MODULES) <= everything


def test_warm_list_matches_cold(repo: Path) -> None:
    from tests.conftest import iterare

    make_run(repo, "a", status="failed", cost_usd=0.25)
    make_run(repo, "b", status="stopped")
    cold = iterare("list", "--format", "json", cwd=repo).stdout
    warm = iterare("list", "--format", "json", cwd=repo).stdout
    assert [r["id"] for r in json.loads(cold)["runs"]] == [r["id"] for r in
                                                           json.loads(warm)["runs"]]
    strip = [{k: v for k, v in r.items() if k != "duration_s"} for r in json.loads(cold)["runs"]]
    assert strip == [{k: v for k, v in r.items() if k != "duration_s"}
                     for r in json.loads(warm)["runs"]]
