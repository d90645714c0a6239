"""Runs on a real three-node Docker Swarm (tests/swarm.py): the client talks to the
drained manager over tcp+TLS and to nothing else; the agent's task lands on a worker,
gets its trees from the run's tree server and gives them back; the results come back as
commits, and cleanup leaves nothing on any node."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from git_iterare.sandbox import agent_ids
from tests.conftest import git, iterare
from tests.runs_helpers import prompt, record, run_id
from tests.swarm import SwarmLab

pytestmark = [pytest.mark.docker, pytest.mark.slow]


@pytest.fixture(scope="module")
def swarm_image(swarm: SwarmLab, sandbox_image: str) -> str:
    """The sandbox image, built here and copied into the manager (builds happen there)."""
    swarm.manager.load_image(sandbox_image)
    return sandbox_image


def _settle(lab: SwarmLab, timeout: float = 60) -> list[str]:
    """What is left on the swarm once removals settled (a removed service's task
    containers end a little later on their node)."""
    deadline = time.monotonic() + timeout
    while True:
        left = lab.leftovers()
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.5)


@pytest.fixture
def on_swarm(repo: Path, hermetic_env: Path, swarm: SwarmLab, swarm_image: str,
             monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A repository whose runs go to the swarm lab; the settings are the user's."""
    for name, value in swarm.manager.tls_env().items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("DOCKER_CONTEXT", raising=False)
    config = hermetic_env / ".config" / "iterare"
    config.mkdir(parents=True, exist_ok=True)
    (config / "config.toml").write_text(
        f'[docker]\nimage = "{swarm_image}"\ncpus = 1\nmemory = "1g"\n'
        f'[run]\nagent = "shell"\n[swarm]\nenabled = true\nregistry = "{swarm.registry}"\n')
    (repo / ".iterare" / "prompts").mkdir(parents=True)
    (repo / ".iterare" / ".gitignore").write_text("/worktrees/\n")
    git("add", ".iterare", cwd=repo)
    git("commit", "-qm", "iterare", cwd=repo)
    yield repo
    iterare("cleanup", "-y", "--force", "--all", cwd=repo)
    iterare("cleanup", "--cache", cwd=repo)


SHELL_TASK = """\
echo "hello from $(id -un) $(id -u) on $(hostname)" > hello.txt
git add hello.txt
git commit -qm "Add hello"
echo "left for the autocommit" > more.txt
cat base.txt
head -c 9 /run/iterare/prompt.md; echo
echo finished
"""


def test_shell_agent_end_to_end_on_the_swarm(on_swarm: Path, swarm: SwarmLab) -> None:
    project = on_swarm
    (project / "base.txt").write_text("from the base\n")
    prompt(project, "hello", SHELL_TASK)
    git("add", ".", cwd=project)
    git("commit", "-qm", "prompt", cwd=project)
    started = iterare("execute", "hello", "--follow", cwd=project)
    assert started.returncode == 0, started.stdout + started.stderr
    rid = run_id(started.stdout)
    assert "from the base\necho \"he\nfinished\n" in started.stdout, started.stdout
    assert started.stderr.splitlines()[-1] == f"run {rid} succeeded", started.stderr
    rec = record(project, rid)
    assert (rec["status"], rec["exit_code"], rec["placement"]) == ("succeeded", 0, "swarm")
    hello = git("show", f"iterare/{rid}:hello.txt", cwd=project).stdout
    uid = agent_ids()[0]
    assert hello.startswith(f"hello from agent {uid} on "), hello
    assert git("show", f"iterare/{rid}:more.txt", cwd=project).stdout == (
        "left for the autocommit\n")
    # The client talked to the manager only; the task ran on a worker.
    workers = {swarm.node_id(w) for w in swarm.workers}
    assert rec["extra"]["swarm"]["node_id"] in workers, rec["extra"]
    shown = iterare("show", rid, cwd=project)
    assert f"swarm {swarm.manager.tcp_url}" in shown.stdout, shown.stdout
    merged = iterare("merge", rid, cwd=project)
    assert merged.returncode == 0, merged.stderr
    assert (project / "more.txt").read_text() == "left for the autocommit\n"
    cleaned = iterare("cleanup", "-y", rid, cwd=project)
    assert cleaned.returncode == 0, cleaned.stderr
    removed = iterare("cleanup", "--cache", cwd=project)
    assert removed.returncode == 0, removed.stderr
    assert _settle(swarm) == []
