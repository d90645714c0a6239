"""A run's sidecar started ahead (git_iterare.sandbox.headstart) on the real engine: the
run enforces its own policy and gets its trees made inert and given back, as with any
sidecar; a run refused or interrupted after it was made leaves nothing; the socket client
(git_iterare.sandbox.socketapi) against the engine itself."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from git_iterare.errors import UserError
from git_iterare.git import repo as repo_mod
from git_iterare.runner import launch
from git_iterare.runner.session import load_config
from git_iterare.sandbox import engine
from git_iterare.sandbox.socketapi import EngineAnswer, SocketEngine
from tests.conftest import git, iterare
from tests.runs_helpers import prompt, record
from tests.sandbox_fixtures import TEST_IMAGE
from tests.test_spare_e2e import (  # noqa: F401  (project, servers: fixtures)
    assert_trees_given_back,
    net_prompt,
    project,
    run,
    servers,
    spares,
    user_config,
)

pytestmark = pytest.mark.docker


def _spare_folders(repo: Path) -> list[Path]:
    return list((repo / ".git" / "iterare" / "state").glob("*spare-*"))


def test_a_run_with_none_waiting_enforces_its_own_policy_on_the_sidecar_it_started_ahead(
        project: Path, servers: tuple[str, str]) -> None:  # noqa: F811
    allowed, blocked = servers
    net_prompt(project, allowed, blocked)
    # No spares: every run is the first in a while. The very first in a repository makes
    # the folders the trees live in (nothing is made before it is checked).
    user_config(f'spare_seconds = 0\n[firewall]\nallowed_cidrs = ["{allowed}/32"]\n')
    first, _ = run(project, "net")
    assert record(project, first)["extra"]["sidecar"] == "own"
    rid, out = run(project, "net")
    assert record(project, rid)["extra"]["sidecar"] == "ahead"
    assert "allowed: allowed:80\n" in out and "blocked-refused\n" in out
    assert f"uid {os.getuid()}\n" not in out
    assert_trees_given_back(project, rid)
    # It ended with its run: no spare container or folder is left.
    assert spares(project) == [] and _spare_folders(project) == []


def _refuse_once_made(repo: Path, monkeypatch: pytest.MonkeyPatch, raised: BaseException,
                      made: list[str]) -> None:
    """Refuse the request (its base commit) only once the sidecar ahead exists."""
    def base_commit(*args: Any, **kwargs: Any) -> str:
        deadline = time.monotonic() + 30
        while not spares(repo):
            assert time.monotonic() < deadline, "no sidecar was started ahead"
            time.sleep(0.02)
        made.extend(c for c, _ in spares(repo))
        raise raised

    monkeypatch.setattr(launch, "_base_commit", base_commit)


@pytest.mark.parametrize("raised", [UserError("--branch x: no such branch"),
                                    KeyboardInterrupt()], ids=["refused", "ctrl-c"])
def test_a_run_refused_or_interrupted_after_it_started_a_sidecar_ahead_leaves_nothing(
        project: Path, monkeypatch: pytest.MonkeyPatch, raised: BaseException) -> None:  # noqa: F811
    user_config("spare_seconds = 0\n")
    prompt(project, "one", "echo one\n")
    run(project, "one")  # makes the folders the trees go in
    made: list[str] = []
    _refuse_once_made(project, monkeypatch, raised, made)
    engine.reset()
    r = repo_mod.discover(project)
    with pytest.raises(type(raised)):
        launch.execute(r, load_config(r, {}), launch.ExecuteRequest(prompt="one"))
    assert len(made) == 1
    assert spares(project) == [] and _spare_folders(project) == []
    assert subprocess.run(["docker", "ps", "-aq", "--filter", f"id={made[0]}"],
                          capture_output=True, text=True, check=True).stdout == ""


def _socket_engine() -> SocketEngine:
    from git_iterare.sandbox.docker_errors import client, engine_facts

    engine.reset()
    client().version()  # the SDK negotiates the version and keeps it
    found = engine.current()
    version = engine_facts(found).get("api_version") or client().api.api_version
    return SocketEngine(found.url[len("unix://"):], str(version))


def test_the_socket_client_speaks_to_the_engine(sandbox_image: str) -> None:
    api = _socket_engine()
    image = api.inspect_image(TEST_IMAGE)
    assert image is not None and image["Id"].startswith("sha256:")
    assert api.inspect_image(f"h-none-{os.getpid()}:missing") is None
    with pytest.raises(EngineAnswer) as refused:
        api.create_container({"Image": f"h-none-{os.getpid()}:missing"}, f"h-x-{os.getpid()}")
    assert refused.value.status == 404 and "No such image" in refused.value.message
    name = f"itr-socketapi-{os.getpid()}"
    made = api.create_container({"Image": TEST_IMAGE, "Entrypoint": ["sleep"],
                                 "Cmd": ["30"], "HostConfig": {"NetworkMode": "none"}}, name)
    try:
        api.start_container(made)
        state = subprocess.run(["docker", "inspect", "-f", "{{.State.Running}}", name],
                               capture_output=True, text=True, check=True).stdout.strip()
        assert state == "true"
    finally:
        api.remove_container(made)
    api.remove_container(made)  # gone already: no error
    asking = SocketEngine(api.path, None)  # the engine's own version, asked once
    assert asking.inspect_image(TEST_IMAGE) == image and asking.api_version
    assert subprocess.run(["docker", "ps", "-aq", "--filter", f"name={name}"],
                          capture_output=True, text=True, check=True).stdout == ""


def test_cleanup_never_takes_a_running_sandbox_s_sidecar_for_a_spare(
        project: Path) -> None:  # noqa: F811
    """Even when its renaming failed (it still has the spare's name, and no folder names
    it): an agent's container names it as its sidecar."""
    user_config("spare_seconds = 0\n")
    prompt(project, "one", "echo one\n")
    first, _ = run(project, "one")  # makes the folders the trees go in
    prompt(project, "slow", "sleep 8; echo done > done.txt\n")
    started = iterare("execute", "slow", cwd=project)
    assert started.returncode == 0, started.stderr
    rid = started.stdout.split()[2]
    assert record(project, rid)["extra"]["sidecar"] == "ahead"
    [(sidecar, _)] = spares(project)  # (it keeps the spare's label)
    token = subprocess.run(["docker", "inspect", "-f", '{{index .Config.Labels '
                            '"dev.iterare.spare"}}', sidecar], capture_output=True,
                           text=True, check=True).stdout.strip()
    subprocess.run(["docker", "rename", sidecar, f"iterare-spare-{token}-net"], check=True)
    cleaned = iterare("cleanup", "-y", first, cwd=project)
    assert cleaned.returncode == 0, cleaned.stderr
    assert spares(project) == [(sidecar, "running")]
    followed = iterare("log", "-f", rid, cwd=project)
    assert followed.returncode == 0, followed.stderr
    assert record(project, rid)["status"] == "succeeded"
    assert git("show", f"iterare/{rid}:done.txt", cwd=project).stdout == "done\n"
