"""Engine selection as the docker CLI does it: DOCKER_HOST, DOCKER_CONTEXT, [docker] context,
the CLI's current context, the default socket; contexts read from a fake ``~/.docker``."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from git_iterare import config as config_mod
from git_iterare.errors import OperationFailed, UserError
from git_iterare.sandbox import engine as eng
from git_iterare.sandbox.engine import DEFAULT_URL, Engine, engine_for, select_engine
from tests.conftest import iterare


def make_context(home: Path, name: str, host: str, *, tls: bool = False,
                 skip_verify: bool = False) -> Path:
    """Write a context as `docker context create` does; return its TLS folder."""
    digest = hashlib.sha256(name.encode()).hexdigest()
    meta = home / ".docker" / "contexts" / "meta" / digest
    meta.mkdir(parents=True)
    endpoint: dict[str, object] = {"Host": host, "SkipTLSVerify": skip_verify}
    (meta / "meta.json").write_text(json.dumps(
        {"Name": name, "Metadata": {}, "Endpoints": {"docker": endpoint}}))
    tls_dir = home / ".docker" / "contexts" / "tls" / digest / "docker"
    if tls:
        tls_dir.mkdir(parents=True)
        for part in ("ca", "cert", "key"):
            (tls_dir / f"{part}.pem").write_text(f"{part}\n")
    return tls_dir


def set_current(home: Path, name: str) -> None:
    (home / ".docker").mkdir(exist_ok=True)
    (home / ".docker" / "config.json").write_text(json.dumps({"currentContext": name}))


def cfg(context: str = "", origin: str = "flag") -> config_mod.Config:
    loaded = config_mod.load(None, env={}, git_entries=[])
    settings = dict(loaded.settings)
    settings["docker.context"] = config_mod.Setting("docker.context", context, origin)
    return config_mod.Config(settings=settings)


@pytest.fixture
def home(hermetic_env: Path) -> Iterator[Path]:
    eng.reset()
    yield hermetic_env
    eng.reset()


def env_of(home: Path, **more: str) -> dict[str, str]:
    return {"HOME": str(home), **more}


def test_default_socket_when_nothing_names_an_engine(home: Path) -> None:
    engine = select_engine(cfg(), env_of(home))
    assert (engine.name, engine.url, engine.tls, engine.source) == (
        "default", DEFAULT_URL, None, "default")


def test_precedence_host_then_context_env_then_config_then_current(home: Path) -> None:
    for name in ("from-env", "from-config", "from-current"):
        make_context(home, name, f"tcp://{name}.example:2375")
    set_current(home, "from-current")
    full = env_of(home, DOCKER_HOST="ssh://me@box:2222", DOCKER_CONTEXT="from-env")
    assert select_engine(cfg("from-config"), full).url == "ssh://me@box:2222"
    del full["DOCKER_HOST"]
    picked = select_engine(cfg("from-config"), full)
    assert (picked.name, picked.url, picked.source) == (
        "from-env", "tcp://from-env.example:2375", "DOCKER_CONTEXT")
    del full["DOCKER_CONTEXT"]
    picked = select_engine(cfg("from-config"), full)
    assert (picked.name, picked.source) == ("from-config", "docker.context (flag)")
    picked = select_engine(cfg(), full)
    assert picked.name == "from-current"
    assert picked.source.startswith("currentContext of ")


def test_context_named_default_is_the_default_socket(home: Path) -> None:
    make_context(home, "remote", "tcp://remote.example:2375")
    set_current(home, "remote")
    engine = select_engine(cfg(), env_of(home, DOCKER_CONTEXT="default"))
    assert (engine.name, engine.url) == ("default", DEFAULT_URL)


def test_docker_config_moves_the_store(home: Path, tmp_path: Path) -> None:
    other = tmp_path / "elsewhere"
    make_context(other, "moved", "unix:///run/moved.sock")
    set_current(other, "moved")
    engine = select_engine(cfg(), env_of(home, DOCKER_CONFIG=str(other / ".docker")))
    assert engine.url == "unix:///run/moved.sock"


def test_context_tls_material_is_read_from_the_store(home: Path) -> None:
    tls_dir = make_context(home, "secure", "tcp://box:2376", tls=True)
    engine = select_engine(cfg(), env_of(home, DOCKER_CONTEXT="secure"))
    assert engine.tls == eng.TLS(verify=True, ca=str(tls_dir / "ca.pem"),
                                 cert=str(tls_dir / "cert.pem"), key=str(tls_dir / "key.pem"))
    make_context(home, "lax", "tcp://box:2376", skip_verify=True)
    lax = select_engine(cfg(), env_of(home, DOCKER_CONTEXT="lax"))
    assert lax.tls == eng.TLS(verify=False)
    make_context(home, "plain", "tcp://box:2375")
    assert select_engine(cfg(), env_of(home, DOCKER_CONTEXT="plain")).tls is None


def test_docker_host_tls_from_cert_path(home: Path, tmp_path: Path) -> None:
    certs = tmp_path / "certs"
    certs.mkdir()
    for part in ("ca", "cert", "key"):
        (certs / f"{part}.pem").write_text(part)
    engine = select_engine(None, env_of(home, DOCKER_HOST="tcp://box:2376",
                                        DOCKER_TLS_VERIFY="1", DOCKER_CERT_PATH=str(certs)))
    assert engine.tls == eng.TLS(True, str(certs / "ca.pem"), str(certs / "cert.pem"),
                                 str(certs / "key.pem"))
    plain = select_engine(None, env_of(home, DOCKER_HOST="tcp://box:2375",
                                       DOCKER_CERT_PATH=str(certs)))
    assert plain.tls is None  # like the CLI: TLS only with DOCKER_TLS_VERIFY or DOCKER_TLS
    with pytest.raises(UserError, match=r"DOCKER_TLS_VERIFY is set but .*ca.pem does not"):
        select_engine(None, env_of(home, DOCKER_HOST="tcp://box:2376", DOCKER_TLS_VERIFY="1",
                                   DOCKER_CERT_PATH=str(tmp_path / "none")))


def test_missing_context_names_it_and_who_asked(home: Path) -> None:
    with pytest.raises(UserError, match=r"docker context 'gone' \(from DOCKER_CONTEXT\) "
                                        r"does not exist"):
        select_engine(cfg(), env_of(home, DOCKER_CONTEXT="gone"))
    set_current(home, "stale")
    with pytest.raises(UserError, match=r"'stale' \(from currentContext of .*config.json\)"):
        select_engine(cfg(), env_of(home))


def test_bad_metadata_is_one_line(home: Path) -> None:
    make_context(home, "broken", "tcp://x:1")
    digest = hashlib.sha256(b"broken").hexdigest()
    meta = home / ".docker" / "contexts" / "meta" / digest / "meta.json"
    meta.write_text("{not json")
    with pytest.raises(UserError, match=r"meta.json: not valid JSON"):
        select_engine(cfg("broken"), env_of(home))
    meta.write_text(json.dumps({"Name": "broken", "Endpoints": []}))
    with pytest.raises(UserError, match="names no docker endpoint"):
        select_engine(cfg("broken"), env_of(home))


def test_a_run_finds_its_engine_only_among_the_users(home: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    make_context(home, "box", "ssh://me@box")
    monkeypatch.delenv("DOCKER_HOST", raising=False)
    monkeypatch.delenv("DOCKER_CONTEXT", raising=False)
    # No record of an engine (older runs): the current one.
    assert engine_for(None).url == DEFAULT_URL
    # By its context, even when another engine is selected now.
    assert engine_for({"name": "box", "url": "ssh://me@box"}).url == "ssh://me@box"
    # The local socket is always reachable.
    monkeypatch.setenv("DOCKER_CONTEXT", "box")
    eng.reset()
    assert engine_for({"name": "default", "url": DEFAULT_URL}).url == DEFAULT_URL
    # A record naming an endpoint the user's settings do not: refused, with what to set.
    with pytest.raises(OperationFailed) as caught:
        engine_for({"name": "default", "url": "tcp://attacker.example:2375"})
    assert caught.value.render() == (
        "the run is on the Docker engine at tcp://attacker.example:2375, which your "
        "settings do not select now (set DOCKER_HOST=tcp://attacker.example:2375, with "
        "DOCKER_TLS_VERIFY=1 and DOCKER_CERT_PATH when it speaks TLS)")
    with pytest.raises(OperationFailed, match=r"context box\), which"):
        engine_for({"name": "box", "url": "ssh://me@other"})  # same name, other endpoint


def test_using_switches_the_current_engine(home: Path) -> None:
    other = Engine("x", "unix:///tmp/x.sock")
    before = eng.current()
    with eng.using(other):
        assert eng.current() is other
    assert eng.current() == before


def test_project_file_cannot_choose_the_context(repo: Path, home: Path) -> None:
    (repo / ".iterare").mkdir()
    (repo / ".iterare" / "config.toml").write_text('[docker]\ncontext = "evil"\n')
    shown = iterare("config", "--list", "--show-origin", cwd=repo)
    assert shown.returncode == 0, shown.stderr
    assert "default\tdocker.context=\n" in shown.stdout
    assert shown.stderr == (
        f"warning: {repo}/.iterare/config.toml: docker.context ignored: a repository cannot "
        "choose it (set it in your own config: git config --global iterare.docker.context "
        "...)\n")
    # The user's own layers may: global file, git config, environment, the flag.
    glob = home / ".config" / "iterare"
    glob.mkdir(parents=True)
    (glob / "config.toml").write_text('[docker]\ncontext = "mine"\n')
    assert "docker.context=mine" in iterare("config", "--list", cwd=repo).stdout
    git_set = iterare("config", "--list", cwd=repo,
                      env={"GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": "iterare.docker.context",
                           "GIT_CONFIG_VALUE_0": "from-git"})
    assert "docker.context=from-git" in git_set.stdout
    from_env = iterare("config", "--list", cwd=repo, env={"ITERARE_DOCKER_CONTEXT": "env"})
    assert "docker.context=env" in from_env.stdout
    flag = iterare("--context", "flagged", "config", "--list", cwd=repo)
    assert "docker.context=flagged" in flag.stdout


def test_a_context_of_a_dead_engine_is_named_in_the_error(repo: Path, home: Path,
                                                          tmp_path: Path) -> None:
    dead = f"unix://{tmp_path}/dead.sock"
    make_context(home, "dead", dead)
    env = {"DOCKER_CONTEXT": "dead", "DOCKER_HOST": ""}
    result = iterare("image", "status", cwd=repo, env=env)
    assert (result.returncode, result.stderr) == (
        1, f"error: cannot reach the Docker engine at {dead} (context dead) "
           "(is dockerd running?)\n")
    assert "/var/run/docker.sock" not in result.stderr
    # The same through the current context and through --context.
    set_current(home, "dead")
    for args in (("image", "status"), ("--context", "dead", "image", "status")):
        again = iterare(*args, cwd=repo, env={"DOCKER_HOST": ""})
        assert again.stderr.startswith(f"error: cannot reach the Docker engine at {dead} "
                                       "(context dead)"), again.stderr
    tcp = iterare("image", "status", cwd=repo, env={"DOCKER_HOST": "tcp://127.0.0.1:9"})
    assert tcp.stderr == ("error: cannot reach the Docker engine at tcp://127.0.0.1:9 "
                          "(is dockerd running?)\n")


def test_missing_context_from_the_flag_is_a_usage_error(repo: Path, home: Path) -> None:
    result = iterare("--context", "nope", "image", "status", cwd=repo,
                     env={"DOCKER_HOST": "", "DOCKER_CONTEXT": ""})
    assert (result.returncode, result.stderr) == (
        2, "error: docker context 'nope' (from docker.context (flag)) does not exist "
           "(list them with `docker context ls`)\n")


def test_cli_env_reaches_the_same_engine() -> None:
    assert Engine("box", "ssh://me@box").cli_env() == {"DOCKER_CONTEXT": "box",
                                                       "DOCKER_HOST": ""}
    tls = Engine("default", "tcp://h:2376", eng.TLS(True, "/c/ca.pem", "/c/cert.pem",
                                                    "/c/key.pem"))
    assert tls.cli_env() == {"DOCKER_HOST": "tcp://h:2376", "DOCKER_CONTEXT": "",
                             "DOCKER_TLS_VERIFY": "1", "DOCKER_CERT_PATH": "/c"}
    assert os.path.basename(DEFAULT_URL) == "docker.sock"


def _running_run(repo: Path, monkeypatch: pytest.MonkeyPatch, env: dict[str, str]) -> str:
    """A run record in state running whose origin was taken with ``env`` set."""
    from git_iterare.git.repo import discover
    from git_iterare.runner.ownership import origin
    from git_iterare.runs.status import RUNNING
    from git_iterare.runs.store import RunStore
    from tests.runs_helpers import make_run

    monkeypatch.chdir(repo)
    monkeypatch.delenv("DOCKER_HOST", raising=False)  # it would win over DOCKER_CONTEXT
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    eng.reset()
    record = make_run(repo, extra=origin(discover()))
    RunStore(repo).transition(record.id, RUNNING, container="c0ffee")
    for name in env:
        monkeypatch.delenv(name)
    eng.reset()
    return record.id


def test_a_run_records_its_engine_and_commands_go_there(
        repo: Path, home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    box = f"unix://{tmp_path}/box.sock"
    make_context(home, "box", box)
    run_id = _running_run(repo, monkeypatch, {"DOCKER_CONTEXT": "box"})
    from git_iterare.runs.store import RunStore

    assert RunStore(repo).get(run_id).extra["engine"] == {"name": "box", "url": box}
    # Now nothing selects "box": show and stop still talk to the run's engine.
    shown = iterare("show", run_id, cwd=repo, env={"DOCKER_HOST": "", "DOCKER_CONTEXT": ""})
    assert shown.returncode == 0, shown.stderr
    assert f"engine:    {box} (context box)\n" in shown.stdout
    assert shown.stderr == (f"warning: run {run_id} may have ended; its status could not be "
                            f"checked: cannot reach the Docker engine at {box} (context box) "
                            "(is dockerd running?)\n")
    stopped = iterare("stop", run_id, cwd=repo, env={"DOCKER_HOST": "", "DOCKER_CONTEXT": ""})
    assert (stopped.returncode, stopped.stderr) == (
        1, f"error: cannot reach the Docker engine at {box} (context box) "
           "(is dockerd running?)\n")


def test_a_run_on_an_engine_no_longer_selected_says_what_to_set(
        repo: Path, home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run_id = _running_run(repo, monkeypatch, {"DOCKER_HOST": "ssh://me@build-box"})
    stopped = iterare("stop", run_id, cwd=repo, env={"DOCKER_HOST": "", "DOCKER_CONTEXT": ""})
    assert (stopped.returncode, stopped.stderr) == (
        1, "error: the run is on the Docker engine at ssh://me@build-box, which your settings "
           "do not select now (set DOCKER_HOST=ssh://me@build-box)\n")
    tcp_id = _running_run(repo, monkeypatch, {"DOCKER_HOST": "tcp://build-box:2376"})
    stopped = iterare("stop", tcp_id, cwd=repo, env={"DOCKER_HOST": "", "DOCKER_CONTEXT": ""})
    assert stopped.stderr == (
        "error: the run is on the Docker engine at tcp://build-box:2376, which your settings "
        "do not select now (set DOCKER_HOST=tcp://build-box:2376, with DOCKER_TLS_VERIFY=1 "
        "and DOCKER_CERT_PATH when it speaks TLS)\n")


@pytest.mark.parametrize("url,addresses", [
    ("ssh://me@192.0.2.10:2222", ("192.0.2.10",)),
    ("ssh://192.0.2.11", ("192.0.2.11",)),
    ("tcp://[2001:db8::7]:2376", ("2001:db8::7",)),
    ("unix:///var/run/docker.sock", ()),
    ("npipe:////./pipe/docker_engine", ()),
])
def test_a_network_engine_names_its_host_addresses(url: str, addresses: tuple[str, ...]
                                                   ) -> None:
    assert Engine("default", url).network_addresses() == addresses


def test_a_remote_engine_host_is_closed_to_its_sandboxes(home: Path, tmp_path: Path) -> None:
    """The engine host's address joins the sidecar's closed hosts (DNS rebinding onto it);
    a local engine closes this machine's own addresses instead."""
    from git_iterare.sandbox import EgressPolicy, Limits, SandboxSpec
    from git_iterare.sandbox.hostnet import host_addresses
    from git_iterare.sandbox.hostnet import with_dns as _with_dns

    spec = SandboxSpec(image="i", sidecar_image="i", name="n", command=("true",),
                       policy=EgressPolicy(("a.test",), dns=("192.0.2.53",),
                                           hosts=("198.51.100.1",)),
                       out_dir=tmp_path, limits=Limits(cpus=1.0, memory="64m", pids=16))
    with eng.using(Engine("box", "ssh://me@203.0.113.5")):
        assert _with_dns(spec).policy.hosts == ("198.51.100.1", "203.0.113.5")
    with eng.using(Engine("box", "tcp://127.0.0.1:2376")):  # loopback: closed anyway
        assert _with_dns(spec).policy.hosts == ("198.51.100.1",)
    with eng.using(Engine("default", DEFAULT_URL)):
        assert _with_dns(spec).policy.hosts == tuple(dict.fromkeys(
            ("198.51.100.1", *host_addresses())))
