"""What ``execute`` keeps between commands so it asks the engine less: the user cache, the
engine's API version and CPU count, and the docker SDK imported without its ssh transport
for engines that are not ``ssh://``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from git_iterare import sandbox
from git_iterare.config import Config, load
from git_iterare.errors import UserError
from git_iterare.runner.request import sandbox_limits
from git_iterare.sandbox import cache
from git_iterare.sandbox.engine import Engine
from git_iterare.sandbox.engine_client import engine_facts, remember_engine_facts

LOCAL = Engine("default", "unix:///var/run/docker.sock", None, "test")


def test_cache_keeps_values_by_key_and_age(tmp_path: Path) -> None:
    assert cache.read("things", "a") is None
    cache.write("things", "a", {"n": 1})
    cache.write("things", "b", {"n": 2})
    assert cache.read("things", "a") == {"n": 1}
    assert cache.read("things", "b", max_age=60) == {"n": 2}
    files = list((cache.cache_dir() / "things").iterdir())
    assert len(files) == 2 and not [f for f in files if f.suffix != ".json"]
    # An old value counts as missing; so does a file written for another key or garbage.
    entry = json.loads(files[0].read_text())
    entry["time"] = time.time() - 120
    files[0].write_text(json.dumps(entry))
    key = entry["key"]
    assert cache.read("things", key) is not None
    assert cache.read("things", key, max_age=60) is None
    files[1].write_text("{not json")
    other = "b" if key == "a" else "a"
    assert cache.read("things", other) is None


def test_cache_lives_under_xdg_cache_home(tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "elsewhere"))
    cache.write("things", "k", {"v": True})
    assert len(list((tmp_path / "elsewhere" / "git-iterare" / "things").iterdir())) == 1


def test_engine_facts_are_kept_per_engine() -> None:
    other = Engine("box", "ssh://me@box", None, "test")
    remember_engine_facts(LOCAL, api_version="1.41")
    remember_engine_facts(LOCAL, ncpu=8)
    assert engine_facts(LOCAL) == {"api_version": "1.41", "ncpu": 8}
    assert engine_facts(other) == {}


def _config(cpus: float) -> Config:
    return load(overrides={"docker.cpus": cpus}, env={}, git_entries=[])


def test_limits_of_one_cpu_ask_the_engine_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    def engine_cpus(fresh: bool = False) -> int:
        raise AssertionError("the engine was asked")

    monkeypatch.setattr(sandbox, "engine_cpus", engine_cpus)
    assert sandbox_limits(_config(1.0)).cpus == 1.0


def test_a_kept_cpu_count_that_refuses_is_asked_again(monkeypatch: pytest.MonkeyPatch
                                                      ) -> None:
    asked: list[bool] = []

    def engine_cpus(fresh: bool = False) -> int:
        asked.append(fresh)
        return 16 if fresh else 2  # the engine grew since the count was kept

    monkeypatch.setattr(sandbox, "engine_cpus", engine_cpus)
    assert sandbox_limits(_config(8.0)).cpus == 8.0
    assert asked == [False, True]
    asked.clear()

    def four(fresh: bool = False) -> int:
        asked.append(fresh)
        return 4

    monkeypatch.setattr(sandbox, "engine_cpus", four)
    with pytest.raises(UserError, match=r"docker\.cpus is 8 but the Docker engine has only 4"):
        sandbox_limits(_config(8.0))
    assert asked == [False, True]


def test_the_cpu_count_is_kept_between_commands(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("git_iterare.sandbox.engine.current", lambda: LOCAL)
    remember_engine_facts(LOCAL, ncpu=3)
    assert sandbox.engine_cpus() == 3  # no engine at this address is asked


IMPORT_PROBE = """
import sys
from git_iterare.sandbox.engine_client import import_docker
from git_iterare.sandbox.engine import Engine
docker = import_docker(Engine("default", "unix:///var/run/docker.sock", None, "t"))
print("paramiko" in sys.modules, hasattr(docker.transport, "SSHHTTPAdapter"))
docker = import_docker(Engine("box", "ssh://me@box", None, "t"))
import docker.api.client
from docker.transport.sshconn import SSHHTTPAdapter
used = docker.api.client.SSHHTTPAdapter
print("paramiko" in sys.modules, issubclass(used, SSHHTTPAdapter), used.__name__)
"""


def test_the_ssh_transport_is_imported_only_for_ssh_engines() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DOCKER_")}
    out = subprocess.run([sys.executable, "-c", IMPORT_PROBE], capture_output=True,
                         text=True, check=True, env=env).stdout.split("\n")
    # The SDK's own adapter, with one pool per engine (sandbox.sshpool).
    assert out[:2] == ["False False", "True True OnePoolSSHAdapter"]
