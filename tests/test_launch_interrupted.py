"""A launch interrupted (Ctrl-C) or failing part-way leaves nothing behind on the engine:
no sidecar, agent container or porter of the run, no run volumes, no spare worktree it had
taken over; the run is removed as if never started. The interrupt is raised in-process at
fixed points (right after the engine made the sidecar, while the client waited for its
answer; right after the spare was claimed), against the real local and DinD engines."""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from git_iterare.git import repo as repo_mod
from git_iterare.runner import launch
from git_iterare.runner.interrupts import RunGoesOn
from git_iterare.runner.session import load_config
from git_iterare.runs.store import RunStore
from git_iterare.sandbox import docker_backend, engine, sidecar
from git_iterare.sandbox.engine_client import client
from tests.conftest import git, iterare
from tests.engines import DindEngine
from tests.sandbox_fixtures import sandbox_image  # noqa: F401  (fixture)
from tests.test_remote_runs import _project, remote_image  # noqa: F401
from tests.test_remote_runs import over_tls as over_tls  # fixture

pytestmark = pytest.mark.docker


def _interrupt_after_begin(monkeypatch: pytest.MonkeyPatch) -> None:
    """The engine makes the sidecar, then Ctrl-C arrives before its answer is used."""
    real = sidecar.create_sidecar

    def create(*args: Any, **kwargs: Any) -> Any:
        real(*args, **kwargs)
        raise KeyboardInterrupt

    monkeypatch.setattr(docker_backend, "create_sidecar", create)


@pytest.fixture(autouse=True)
def _engine_chosen_per_test() -> Iterator[None]:
    """Each test's environment picks the engine (as each command does)."""
    engine.reset()
    yield
    engine.reset()


def _execute(repo: Path, prompt: str) -> None:
    """``git iterare execute PROMPT`` in this process."""
    r = repo_mod.discover(repo)
    launch.execute(r, load_config(r, {}), launch.ExecuteRequest(prompt=prompt))


def _left(repo: Path) -> tuple[list[str], list[str]]:
    """The containers and volumes of ``repo``'s runs on the current engine."""
    label = {"label": f"dev.iterare.repo={repo}"}
    engine = client()
    return (sorted(c.name for c in engine.containers.list(all=True, filters=label)),
            sorted(v.name for v in engine.volumes.list(filters=label)))


def _no_runs(repo: Path) -> None:
    assert RunStore(repo_mod.discover(repo)).list() == []
    assert git("for-each-ref", "refs/heads/iterare", cwd=repo).stdout == ""


@pytest.fixture
def local_project(repo: Path, hermetic_env: Path, sandbox_image: str,  # noqa: F811
                  monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.delenv("DOCKER_HOST", raising=False)
    monkeypatch.delenv("DOCKER_CONTEXT", raising=False)
    yield _project(repo, hermetic_env, sandbox_image)
    for name in _left(repo)[0]:
        with contextlib.suppress(Exception):
            client().containers.get(name).remove(force=True)


def test_ctrl_c_while_the_sidecar_is_made_leaves_nothing_locally(
        local_project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    repo = local_project
    (repo / ".iterare" / "prompts" / "p.md").write_text("echo never\n")
    _interrupt_after_begin(monkeypatch)
    with pytest.raises(KeyboardInterrupt):
        _execute(repo, "p")
    assert _left(repo) == ([], [])
    _no_runs(repo)


def test_ctrl_c_during_the_checkout_removes_the_agent_container_made_meanwhile(
        local_project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The agent's container is made while the worktree is checked out: Ctrl-C in the
    checkout, once that container exists, leaves neither it nor anything else."""
    from git_iterare.runner import workspace

    repo = local_project
    (repo / ".iterare" / "prompts" / "p.md").write_text("echo never\n")
    real_fill, seen = workspace._fill, []

    def fill(*args: Any, **kwargs: Any) -> None:
        deadline = time.monotonic() + 60
        while all(n.endswith("-net") for n in _left(repo)[0]):
            assert time.monotonic() < deadline, "no agent container was made"
            time.sleep(0.05)
        seen.extend(_left(repo)[0])
        real_fill(*args, **kwargs)
        raise KeyboardInterrupt

    monkeypatch.setattr(workspace, "_fill", fill)
    with pytest.raises(KeyboardInterrupt):
        _execute(repo, "p")
    assert len(seen) == 2  # the sidecar and the agent's container, both made
    assert _left(repo) == ([], [])
    _no_runs(repo)


def test_ctrl_c_on_a_remote_engine_leaves_no_container_volume_or_spare(
        over_tls: Path, dind_engine: DindEngine, monkeypatch: pytest.MonkeyPatch) -> None:
    repo = over_tls
    (repo / ".iterare" / "prompts" / "p.md").write_text("echo done > done.txt\n")
    iterare("execute", "p", "--follow", cwd=repo)  # makes the spare for the next run
    spares = repo / ".git" / "iterare" / "spares"
    made = json.loads(next(spares.iterdir()).read_text())
    first = RunStore(repo_mod.discover(repo)).list()[0].id
    iterare("cleanup", "-y", "--force", first, cwd=repo)
    _interrupt_after_begin(monkeypatch)
    with pytest.raises(KeyboardInterrupt):
        _execute(repo, "p")  # takes the spare over, then Ctrl-C
    assert list(spares.iterdir()) == []  # claimed, and then removed with the run
    containers, volumes = _left(repo)
    assert containers == []
    assert made["work"] not in volumes and made["git"] not in volumes
    assert [v for v in volumes if not v.startswith("iterare-cache-")] == []
    _no_runs(repo)
    iterare("cleanup", "--cache", cwd=repo)  # nothing holds the cache either
    assert _left(repo) == ([], [])


def test_a_spare_claimed_by_a_launch_that_fails_before_its_record_is_dropped(
        over_tls: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    repo = over_tls
    (repo / ".iterare" / "prompts" / "p.md").write_text("true\n")
    iterare("execute", "p", "--follow", cwd=repo)
    spares = repo / ".git" / "iterare" / "spares"
    made = json.loads(next(spares.iterdir()).read_text())

    def create(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(RunStore, "create", create)
    with pytest.raises(KeyboardInterrupt):
        _execute(repo, "p")
    assert list(spares.iterdir()) == []
    deadline = time.monotonic() + 30
    while made["work"] in _left(repo)[1]:
        assert time.monotonic() < deadline, "the claimed spare's volumes stayed"
        time.sleep(0.3)
    assert made["git"] not in _left(repo)[1]


def test_cleanup_removes_what_a_launch_cut_short_left_on_the_engine(
        over_tls: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """As after kill -9, or an engine that did not answer while the launch was undone:
    the run is kept (stopped), its sidecar and volumes are still there."""
    repo = over_tls
    (repo / ".iterare" / "prompts" / "p.md").write_text("true\n")
    _interrupt_after_begin(monkeypatch)
    monkeypatch.setattr(launch, "_discard_on_engine", lambda *args: False)
    with pytest.raises(KeyboardInterrupt):
        _execute(repo, "p")
    kept = RunStore(repo_mod.discover(repo)).list()
    assert [r.status for r in kept] == ["stopped"] and not kept[0].container
    containers, volumes = _left(repo)
    assert f"iterare-{kept[0].id}-net" in containers  # (the checkout's porter may be too)
    assert f"iterare-{kept[0].id}-work" in volumes
    cleaned = iterare("cleanup", "-y", "--force", kept[0].id, cwd=repo)
    assert cleaned.returncode == 0, cleaned.stderr
    containers, volumes = _left(repo)
    assert containers == [] and [v for v in volumes if not v.startswith("iterare-cache-")] == []


def test_ctrl_c_once_the_agent_started_leaves_the_run_going(
        local_project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A real SIGINT while the started sandbox is being recorded: held back until the run
    is recorded as running, then raised; the run goes on and ends with its work."""
    import os
    import signal

    repo = local_project
    (repo / ".iterare" / "prompts" / "p.md").write_text(
        "sleep 1; echo work > work.txt\n")
    real = RunStore.transition

    def transition(self: RunStore, run_id: str, status: str, **fields: Any) -> Any:
        if status == "running":
            os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C, while this write goes on
        return real(self, run_id, status, **fields)

    monkeypatch.setattr(RunStore, "transition", transition)
    with pytest.raises(RunGoesOn) as raised:
        _execute(repo, "p")
    monkeypatch.setattr(RunStore, "transition", real)
    (record,) = RunStore(repo_mod.discover(repo)).list()
    assert raised.value.run_id == record.id
    assert record.status == "running" and record.container
    followed = iterare("log", "-f", record.id, cwd=repo)
    assert followed.returncode == 0, followed.stderr
    assert RunStore(repo_mod.discover(repo)).get(record.id).status == "succeeded"
    assert git("show", f"iterare/{record.id}:work.txt", cwd=repo).stdout == "work\n"


#: Loaded into ``git iterare`` by PYTHONPATH: a real SIGINT to itself while the started
#: run is recorded as running (Ctrl-C default even when the test runner ignores it).
_SIGINT_AT_RUNNING = """
import os, signal
signal.signal(signal.SIGINT, signal.default_int_handler)
from git_iterare.runs.store import RunStore
_real = RunStore.transition
def _transition(self, run_id, status, **fields):
    if status == "running":
        os.kill(os.getpid(), signal.SIGINT)
    return _real(self, run_id, status, **fields)
RunStore.transition = _transition
"""


def test_ctrl_c_as_execute_f_starts_says_which_run_goes_on(
        local_project: Path, tmp_path: Path) -> None:
    """``execute -f`` cut short by Ctrl-C once its agent started: not a bare
    "interrupted", but the run's id and how to follow it; the run ends with its work."""
    repo = local_project
    (repo / ".iterare" / "prompts" / "p.md").write_text("sleep 1; echo work > work.txt\n")
    hooks = tmp_path / "hooks"
    hooks.mkdir()
    (hooks / "sitecustomize.py").write_text(_SIGINT_AT_RUNNING)
    cut = iterare("execute", "p", "-f", cwd=repo, env={"PYTHONPATH": str(hooks)})
    (record,) = RunStore(repo_mod.discover(repo)).list()
    assert cut.returncode == 130, cut.stderr
    assert cut.stderr == (f"\ninterrupted; run {record.id} goes on "
                          f"(`git iterare log -f {record.id}`)\n"), cut.stderr
    followed = iterare("log", "-f", record.id, cwd=repo)
    assert followed.returncode == 0, followed.stderr
    assert git("show", f"iterare/{record.id}:work.txt", cwd=repo).stdout == "work\n"
