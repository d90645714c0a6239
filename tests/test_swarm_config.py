"""Choosing a swarm is the user's: the ``[swarm]`` keys (and ``--swarm``) from the user's
own layers only, checked before anything exists; the placement and engine of runs that
follow from them."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from git_iterare import config as config_mod
from git_iterare.errors import UserError
from git_iterare.runner.ownership import engine_of
from git_iterare.runner.placement import kind_of, placement_for
from git_iterare.runs.record import RunRecord
from git_iterare.sandbox import engine as eng
from git_iterare.sandbox.engine import Engine, SwarmTarget, select_engine
from git_iterare.sandbox.spec import sandbox_name
from git_iterare.sandbox.swarm_backend import service_name
from tests.conftest import iterare


def cfg(**values: object) -> config_mod.Config:
    loaded = config_mod.load(None, env={}, git_entries=[])
    settings = dict(loaded.settings)
    for key, value in values.items():
        name = key.replace("__", ".")
        settings[name] = config_mod.Setting(name, value, "flag")
    return config_mod.Config(settings=settings)


@pytest.fixture
def home(hermetic_env: Path) -> Iterator[Path]:
    eng.reset()
    yield hermetic_env
    eng.reset()


def test_swarm_settings_ride_on_the_selected_engine(home: Path) -> None:
    env = {"HOME": str(home), "DOCKER_HOST": "tcp://manager.lan:2376"}
    plain = select_engine(cfg(), env)
    assert plain.swarm is None and placement_for(plain).kind == "remote"
    chosen = select_engine(cfg(swarm__enabled=True, swarm__registry="reg.lan:5000",
                               swarm__constraints=["node.role==worker", " "]), env)
    assert chosen.url == "tcp://manager.lan:2376"
    assert chosen.swarm == SwarmTarget("reg.lan:5000", ("node.role==worker",))
    assert placement_for(chosen).kind == "swarm"
    # A local socket that manages a swarm sends runs to the swarm too.
    local = select_engine(cfg(swarm__enabled=True, swarm__registry="10.0.0.5"),
                          {"HOME": str(home)})
    assert local.on_this_host and placement_for(local).kind == "swarm"


@pytest.mark.parametrize(("registry", "message"), [
    ("", r"swarm.enabled is on but swarm.registry is empty"),
    ("http://reg.lan:5000", r"swarm.registry 'http://reg.lan:5000' is not HOST\[:PORT\]"),
    ("reg.lan/team", r"is not HOST\[:PORT\]"),
])
def test_bad_swarm_settings_are_one_line(home: Path, registry: str, message: str) -> None:
    with pytest.raises(UserError, match=message):
        select_engine(cfg(swarm__enabled=True, swarm__registry=registry), {"HOME": str(home)})


def test_the_repository_cannot_send_runs_to_a_swarm(repo: Path, home: Path) -> None:
    (repo / ".iterare").mkdir()
    (repo / ".iterare" / "config.toml").write_text(
        '[swarm]\nenabled = true\nregistry = "evil.example:5000"\n'
        'constraints = ["node.hostname==victim"]\nsnapshot_seconds = 1\n')
    shown = iterare("config", "--list", "--show-origin", cwd=repo)
    assert shown.returncode == 0, shown.stderr
    assert "default\tswarm.enabled=false\n" in shown.stdout
    assert "default\tswarm.registry=\n" in shown.stdout
    for key in ("swarm.enabled", "swarm.registry", "swarm.constraints",
                "swarm.snapshot_seconds"):
        assert (f"{repo}/.iterare/config.toml: {key} ignored: a repository cannot choose it"
                in shown.stderr), shown.stderr
    # The user's own layers and the flag may.
    flagged = iterare("--swarm", "config", "--list", "--show-origin", cwd=repo)
    assert "flag\tswarm.enabled=true\n" in flagged.stdout, flagged.stdout


def test_swarm_without_a_registry_refuses_execute_in_one_line(repo: Path, home: Path) -> None:
    (repo / ".iterare" / "prompts").mkdir(parents=True)
    (repo / ".iterare" / "prompts" / "task.md").write_text("do it\n")
    result = iterare("--swarm", "execute", "task", "--agent", "shell", cwd=repo)
    assert result.returncode == 2, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert lines[0] == ("error: swarm.enabled is on but swarm.registry is empty: the swarm's "
                        "nodes pull the runs' images from a registry (set it: git config --global "
                        "iterare.swarm.registry HOST:PORT)"), result.stderr
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr


def _record(placement: str) -> RunRecord:
    return RunRecord(id="r-0000abcd", name="r", status="running", placement=placement,
                     extra={"engine": {"name": "default", "url": "tcp://manager.lan:2376"}})


def test_a_run_keeps_the_backend_of_its_placement(home: Path) -> None:
    """A swarm run is the manager's services whatever [swarm] says now, and a remote run
    on the same engine its containers while new runs go to the swarm."""
    manager = Engine("default", "tcp://manager.lan:2376")
    for now in (manager, Engine("default", manager.url, swarm=SwarmTarget("r:5000"))):
        with eng.using(now):
            swarm_run, remote_run = _record("swarm"), _record("remote")
            assert kind_of(swarm_run) == "swarm"
            assert engine_of(swarm_run).swarm is not None
            assert engine_of(remote_run).swarm is None


def test_list_and_show_name_the_swarm_and_node() -> None:
    from git_iterare.runs.render import engine_text, status_text

    queued = _record("swarm")
    queued = RunRecord(id=queued.id, name="r", status="running", placement="swarm",
                       extra={**queued.extra, "swarm": {}})
    assert status_text(queued) == "queued"
    assert engine_text(queued.extra) == "swarm tcp://manager.lan:2376"
    placed = RunRecord(id=queued.id, name="r", status="succeeded", placement="swarm",
                       extra={**queued.extra, "swarm": {"node": "node-2", "node_id": "x1"}})
    assert status_text(placed) == "succeeded on node-2"
    assert engine_text(placed.extra) == "swarm tcp://manager.lan:2376, node node-2"
    remote = _record("remote")
    assert status_text(remote) == "running"
    assert engine_text(remote.extra) == "tcp://manager.lan:2376"


_DNS_COMPONENT = re.compile(r"[a-zA-Z0-9](?:[-_]*[A-Za-z0-9]+)*\Z")


@pytest.mark.parametrize("run_id", ["hello-0123abcd", "span.1-0123abcd", "a.b_c-0123abcd",
                                    "x" * 100 + ".2-0123abcd"])
def test_a_runs_service_name_is_a_dns_name_component(run_id: str) -> None:
    """Swarm service and network names are DNS name components (no ``.``, at most 63
    characters with the network's ``-run``): attempts' ids (``NAME.K-HEX``) and long
    names still get one, unique by the run id's hex, the same from either handle."""
    name = service_name(sandbox_name(run_id))
    assert _DNS_COMPONENT.match(f"{name}-run") and len(f"{name}-run") <= 63, name
    assert name.endswith(run_id[-9:]) and name.startswith("iterare-"), name
    assert service_name(name) == name
