"""Runs on a real three-node Docker Swarm (tests/swarm.py): the client talks to the
drained manager over tcp+TLS and to nothing else; the agent's task lands on a worker,
gets its trees from the run's tree server and gives them back; the results come back as
commits, and cleanup leaves nothing on any node."""

from __future__ import annotations

import os
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
    container ends a little later on its node)."""
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
        f'[run]\nagent = "shell"\n[swarm]\nenabled = true\nregistry = "{swarm.registry}"\n'
        'constraints = ["node.role==worker"]\nsnapshot_seconds = 2\n')
    (repo / ".iterare" / "prompts").mkdir(parents=True)
    (repo / ".iterare" / ".gitignore").write_text("/worktrees/\n")
    git("add", ".iterare", cwd=repo)
    git("commit", "-qm", "iterare", cwd=repo)
    yield repo
    from git_iterare.runs.status import ACTIVE

    listed = iterare("list", "--format", "porcelain", cwd=repo).stdout.splitlines()
    for rid in (line.split("\t")[0] for line in listed):
        if record(repo, rid)["status"] in ACTIVE:
            iterare("stop", rid, cwd=repo)
        iterare("cleanup", "-y", "--force", rid, cwd=repo)
    iterare("cleanup", "--cache", cwd=repo)


SHELL_TASK = """\
echo "hello from $(id -un) $(id -u) on $(hostname)" > hello.txt
git add hello.txt
git commit -qm "Add hello"
echo "left for the autocommit" > more.txt
cat base.txt
head -c 9 /run/iterare/prompt.md; echo
stat -c "secret %a %u" /run/iterare/secrets/env/SWARM_TOKEN
[ "$SWARM_TOKEN" = "tok-$(id -u)" ] && echo "token ok"
echo finished
"""


def test_shell_agent_end_to_end_on_the_swarm(on_swarm: Path, swarm: SwarmLab) -> None:
    project = on_swarm
    (project / "base.txt").write_text("from the base\n")
    prompt(project, "hello", SHELL_TASK)
    git("add", ".", cwd=project)
    git("commit", "-qm", "prompt", cwd=project)
    uid = agent_ids()[0]
    started = iterare("execute", "hello", "--follow", "-e", "SWARM_TOKEN", cwd=project,
                      env={"SWARM_TOKEN": f"tok-{uid}"})
    assert started.returncode == 0, started.stdout + started.stderr
    rid = run_id(started.stdout)
    assert (f"from the base\necho \"hel\nsecret 400 {uid}\ntoken ok\nfinished\n"
            in started.stdout), started.stdout
    assert started.stderr.splitlines()[-1] == f"run {rid} succeeded", started.stderr
    rec = record(project, rid)
    assert (rec["status"], rec["exit_code"], rec["placement"]) == ("succeeded", 0, "swarm")
    hello = git("show", f"iterare/{rid}:hello.txt", cwd=project).stdout
    assert hello.startswith(f"hello from agent {uid} on "), hello
    assert git("show", f"iterare/{rid}:more.txt", cwd=project).stdout == (
        "left for the autocommit\n")
    # The client talked to the manager only; the task ran on a worker.
    workers = {swarm.node_id(w) for w in swarm.workers}
    assert rec["extra"]["swarm"]["node_id"] in workers, rec["extra"]
    shown = iterare("show", rid, cwd=project)
    assert f"swarm {swarm.manager.tcp_url}" in shown.stdout, shown.stdout
    first = rec["extra"]["shipped"]
    assert first["objects"] > 0 and first["pack_bytes"] > 0, first
    # The swarm keeps the repository's object cache: a second run ships its change.
    (project / "small.txt").write_text("small change\n")
    git("add", "small.txt", cwd=project)
    git("commit", "-qm", "small", cwd=project)
    prompt(project, "noop", "cat small.txt\n")
    git("add", ".", cwd=project)
    git("commit", "-qm", "noop", cwd=project)
    again = iterare("execute", "noop", "--follow", cwd=project)
    assert again.returncode == 0 and "small change" in again.stdout, again.stderr
    second = record(project, run_id(again.stdout))["extra"]["shipped"]
    assert second["objects"] <= 8 and second["pack_bytes"] < 4000, second
    merged = iterare("merge", rid, cwd=project)
    assert merged.returncode == 0, merged.stderr
    assert (project / "more.txt").read_text() == "left for the autocommit\n"
    cleaned = iterare("cleanup", "-y", rid, cwd=project)
    assert cleaned.returncode == 0, cleaned.stderr
    removed = iterare("cleanup", "--cache", cwd=project)
    assert removed.returncode == 0, removed.stderr
    assert _settle(swarm) == []


BUSY_TASK = """\
echo "so far" > sofar.txt
echo started
i=0; while [ $i -lt 600 ]; do sleep 0.5; i=$((i+1)); done
echo never
"""


def _wait_for(what: str, done: object, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not done():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.5)


def _started_busy(project: Path, name: str = "busy", task: str = BUSY_TASK) -> str:
    """Start a run of the prompt ``name`` (``task``); return its id once it printed
    ``started``."""
    prompt(project, name, task)
    git("add", ".", cwd=project)
    git("commit", "-qm", name, cwd=project)
    started = iterare("execute", name, cwd=project)
    assert started.returncode == 0, started.stderr
    rid = run_id(started.stdout)
    _wait_for("its first output", lambda: "started" in iterare("log", rid, cwd=project).stdout)
    return rid


def test_stop_gives_the_work_back_first(on_swarm: Path, swarm: SwarmLab) -> None:
    project = on_swarm
    rid = _started_busy(project)
    stopped = iterare("stop", rid, cwd=project)
    assert stopped.returncode == 0, stopped.stderr
    rec = record(project, rid)
    assert rec["status"] == "stopped", rec
    assert git("show", f"iterare/{rid}:sofar.txt", cwd=project).stdout == "so far\n"
    assert "never" not in iterare("log", rid, cwd=project).stdout


def test_a_node_that_dies_leaves_the_run_lost_with_its_work_so_far(
        on_swarm: Path, swarm: SwarmLab) -> None:
    project = on_swarm
    doomed = swarm.add_worker()
    config = Path(os.environ["HOME"]) / ".config" / "iterare" / "config.toml"
    config.write_text(config.read_text().replace(
        '"node.role==worker"', f'"node.id=={swarm.node_id(doomed)}"'))
    rid = _started_busy(project)
    time.sleep(5)  # a snapshot or two of its work
    swarm.kill_node(doomed)
    _wait_for("the run to end", lambda: record(project, rid)["status"] != "running"
              and iterare("list", cwd=project).returncode == 0, timeout=180)
    rec = record(project, rid)
    assert rec["status"] == "lost", rec
    assert git("show", f"iterare/{rid}:sofar.txt", cwd=project).stdout == "so far\n"


def test_an_engine_that_is_no_manager_is_one_line(on_swarm: Path, swarm: SwarmLab,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    worker = swarm.workers[0]
    for name, value in worker.tls_env().items():
        monkeypatch.setenv(name, value)
    prompt(on_swarm, "hello", "true\n")
    result = iterare("execute", "hello", cwd=on_swarm)
    assert result.returncode == 2, result.stderr
    assert result.stderr.splitlines() == [
        f"error: swarm.enabled is on but the Docker engine at {worker.tcp_url} is a swarm "
        "worker, not a manager (select the manager's engine (DOCKER_HOST, --context), or "
        "set swarm.enabled = false)"]
    assert "hello" not in iterare("list", cwd=on_swarm).stdout


def test_a_run_no_node_can_take_waits_queued_with_the_reason_and_stop_ends_it(
        on_swarm: Path, swarm: SwarmLab) -> None:
    project = on_swarm
    config = Path(os.environ["HOME"]) / ".config" / "iterare" / "config.toml"
    config.write_text(config.read_text().replace('"node.role==worker"',
                                                 '"node.labels.nowhere==yes"'))
    prompt(project, "hello", "echo never > never.txt\n")
    git("add", ".", cwd=project)
    git("commit", "-qm", "hello", cwd=project)
    started = iterare("execute", "hello", cwd=project)
    assert started.returncode == 0, started.stderr
    rid = run_id(started.stdout)
    _wait_for("the swarm's reason", lambda: "queued: no suitable node" in iterare(
        "show", rid, cwd=project).stdout)
    listed = iterare("list", cwd=project).stdout
    assert any(line.split()[:2] == [rid, "queued"] for line in listed.splitlines()), listed
    stopped = iterare("stop", rid, cwd=project)
    assert stopped.returncode == 0, stopped.stderr
    assert record(project, rid)["status"] == "stopped"
    assert git("cat-file", "-e", f"iterare/{rid}:never.txt", cwd=project,
               check=False).returncode != 0


#: An agent that ignores SIGTERM and kills whatever asks its task to stop (swarm-start's
#: watcher and snapshot loops: the parents of `sleep 2`).
DEFIANT_TASK = """\
trap '' TERM
echo started
while :; do
  for d in /proc/[0-9]*; do
    [ "$(tr '\\0' ' ' < "$d/cmdline" 2>/dev/null)" = "sleep 2 " ] || continue
    kill -KILL "$(awk '/^PPid/ {print $2}' "$d/status")" 2>/dev/null
  done
  sleep 0.5
done
"""


def test_an_agent_that_kills_the_stop_watcher_is_stopped_by_the_engine(
        on_swarm: Path, swarm: SwarmLab) -> None:
    project = on_swarm
    rid = _started_busy(project, "defiant", DEFIANT_TASK)
    time.sleep(5)  # the watcher is dead by now
    began = time.monotonic()
    stopped = iterare("stop", rid, cwd=project)
    assert stopped.returncode == 0, stopped.stderr
    assert record(project, rid)["status"] == "stopped"
    assert time.monotonic() - began < 150
