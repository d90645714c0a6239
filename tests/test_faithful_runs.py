"""Issue 9 without the sandbox: how a run's end is judged (exit codes, timeouts), and merges
into a detached HEAD or from a recorded commit, through real git."""

from __future__ import annotations

from pathlib import Path
from typing import cast

import pytest

from git_iterare.agents.base import RunResult
from git_iterare.errors import UserError
from git_iterare.git.merge import detached_head, merge_run
from git_iterare.git.repo import discover
from git_iterare.runner.finish import _outcome
from git_iterare.runs.extra import RunExtra
from git_iterare.runs.record import RunRecord
from git_iterare.sandbox.docker_backend import ran_seconds
from tests.conftest import git
from tests.runs_helpers import commit_on_branch, head_of


def _record(timeout: int, **extra: object) -> RunRecord:
    return RunRecord(id="run-0123abcd", name="run",
                     extra=cast("RunExtra", {"timeout": timeout, **extra}),
                     started="2000-01-01T00:00:00Z")


OK, BAD = RunResult(is_error=False), RunResult(is_error=True)


@pytest.mark.parametrize(("timeout", "code", "ran", "result", "expected"), [
    # found: finished long after its timeout (started in 2000), the agent exited 0 in time
    (3, 0, 0.5, OK, ("succeeded", None)),
    (3, 124, 3.01, BAD, ("timed-out", "killed after the 3 s timeout")),
    # the engine noted its start a moment late: the limit was still what ended it
    (3, 124, 2.97, BAD, ("timed-out", "killed after the 3 s timeout")),
    (3, 137, 13.2, BAD, ("timed-out", "killed after the 3 s timeout (it ignored SIGTERM; "
                                      "SIGKILL 10 s later)")),
    (60, 124, 0.2, BAD, ("failed", "the agent exited with status 124")),
    (60, 137, 2.0, BAD, ("failed", "the agent exited with status 137")),
    (0, 124, 999.0, BAD, ("failed", "the agent exited with status 124")),
    (3, 1, 50.0, BAD, ("failed", "the agent exited with status 1")),
])
def test_the_outcome_is_the_agents_unless_its_limit_was_reached(
        timeout: int, code: int, ran: float, result: RunResult, expected: tuple) -> None:
    assert _outcome(_record(timeout), code, result, False, ran) == expected


def test_a_run_killed_for_memory_names_the_setting() -> None:
    status, error = _outcome(_record(60), 137, BAD, False, 2.0, oom_killed=True,
                             memory_bytes=512 << 20)
    assert status == "failed"
    assert error == ("the agent ran out of memory (exit status 137; the limit is "
                     "docker.memory = 512m); raise docker.memory in the config")
    # a process killed for memory that the agent survived is not its outcome
    assert _outcome(_record(60), 0, OK, False, 2.0, oom_killed=True) == ("succeeded", None)


def test_container_info_carries_the_oom_flag_and_memory_limit() -> None:
    from types import SimpleNamespace

    from git_iterare.sandbox import docker_backend

    container = SimpleNamespace(
        id="c1", name="iterare-x",
        attrs={"State": {"Status": "exited", "ExitCode": 137, "OOMKilled": True,
                         "StartedAt": "2026-01-01T00:00:00Z"},
               "HostConfig": {"Memory": 4 << 30}, "Config": {}})
    info = docker_backend.container_info(container)
    assert (info.oom_killed, info.memory_bytes, info.exit_code) == (True, 4 << 30, 137)
    assert info.started


def test_a_run_stopped_at_its_limit_by_a_later_command_is_timed_out() -> None:
    assert _outcome(_record(3, timed_out=True), 143, BAD, False, 70.0) == (
        "timed-out", "killed after the 3 s timeout")


def test_container_run_time_from_dockers_timestamps() -> None:
    def state(**times: str) -> dict[str, object]:
        return {"State": times}

    ran = ran_seconds(state(StartedAt="2026-01-01T00:00:00.25Z",
                            FinishedAt="2026-01-01T00:01:00.123456789Z"))
    assert ran == pytest.approx(59.873456)
    assert ran_seconds(state(StartedAt="2026-01-01T01:00:00+01:00",
                             FinishedAt="2026-01-01T00:00:02Z")) == 2.0
    assert ran_seconds(state(StartedAt="0001-01-01T00:00:00Z",
                             FinishedAt="2026-01-01T00:00:02Z")) is None
    assert ran_seconds({}) is None


def test_merge_from_a_recorded_commit_without_the_branch(repo: Path) -> None:
    work = commit_on_branch(repo, "iterare/gone-0123abcd", "w.txt", "w\n")
    git("branch", "-D", "iterare/gone-0123abcd", cwd=repo)
    result = merge_run(discover(repo), work, message="Merge run gone-0123abcd")
    assert (result.head_after, result.fast_forward, result.detached) == (work, True, False)
    assert head_of(repo, "main") == work
    with pytest.raises(UserError) as info:
        merge_run(discover(repo), "0" * 40)
    assert info.value.message == f"commit {'0' * 40} is not in this repository"


def test_a_detached_head_is_seen_and_reported(repo: Path) -> None:
    work = commit_on_branch(repo, "iterare/det-0123abcd", "d.txt", "d\n")
    assert detached_head(discover(repo)) is None
    before = head_of(repo, "main")
    git("checkout", "-q", "--detach", cwd=repo)
    assert detached_head(discover(repo)) == before
    result = merge_run(discover(repo), "iterare/det-0123abcd")
    assert (result.detached, result.head_after) == (True, work)
    assert head_of(repo, "main") == before


def test_a_container_the_engine_never_ran_gives_the_engines_reason() -> None:
    reason = "No such image: registry:5000/git-iterare@sha256:00"
    assert _outcome(_record(60), -1, BAD, False, None, reason=reason) == (
        "failed", f"the agent's container did not run: {reason}")


@pytest.mark.parametrize(("task", "reason"), [
    ({"Status": {"State": "rejected", "Err": "No such image: r/x@sha256:00"}},
     "No such image: r/x@sha256:00"),
    ({"Status": {"State": "failed"}}, "the swarm marked its task failed"),
    ({"Status": {"State": "failed", "Err": "task: non-zero exit (3)",
                 "ContainerStatus": {"ExitCode": 3}}}, None),
])
def test_a_swarm_task_ended_without_an_exit_status_carries_the_swarms_reason(
        monkeypatch: pytest.MonkeyPatch, task: dict, reason: str | None) -> None:
    from git_iterare.sandbox.swarm_backend import SwarmBackend

    backend = object.__new__(SwarmBackend)  # no manager: its two lookups are given
    service = {"Spec": {"Labels": {}, "Mode": {"Replicated": {"Replicas": 1}},
                        "TaskTemplate": {"ContainerSpec": {"Image": "i"}}}}
    monkeypatch.setattr(backend, "_service", lambda name: service, raising=False)
    monkeypatch.setattr(backend, "_task", lambda name: task, raising=False)
    info = backend.inspect("iterare-run")
    assert info is not None and info.state == "exited" and info.reason == reason
    assert info.exit_code == (3 if reason is None else -1)
