"""A run's sidecar started ahead (git_iterare.sandbox.headstart) without an engine: where
one is started, that only its run claims it and what the claim hands over, that a run which
does not use it removes it, and the engine's failures. A fake engine stands for the
socket; the real one is in test_headstart_e2e.py."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest

from git_iterare.errors import OperationFailed
from git_iterare.sandbox import EgressPolicy, SandboxSpec, headstart, spare
from git_iterare.sandbox.image import ImageStatus, StatusOf
from git_iterare.sandbox.socketapi import EngineAnswer, SocketEngine, socket_path

SOCKET = "unix:///var/run/docker.sock"


class FakeEngine(SocketEngine):
    """Keeps what it was asked; ``fail`` names a request that fails with a 500."""

    def __init__(self, fail: str = "", started: threading.Event | None = None) -> None:
        super().__init__("/nonexistent", "1.41")
        self.fail = fail
        self.calls: list[tuple[str, Any]] = []
        self.started = started

    def request(self, method: str, path: str, body: Any = None,
                query: dict[str, str] | None = None, *, versioned: bool = True) -> Any:
        self.calls.append((f"{method} {path}", body if body is not None else query))
        if path.endswith("/start") and self.started is not None:
            self.started.wait(5)
        if self.fail and self.fail in path:
            raise EngineAnswer(500, f"{self.fail} refused")
        if path.startswith("/images/"):
            return {"Id": "sha256:own", "Config": {"Labels": {"dev.iterare.image": "own"}}}
        if path == "/containers/create":
            return {"Id": "c0ffee"}
        return None


def _template(tmp_path: Path, **changes: object) -> SandboxSpec:
    trees = tmp_path / "trees"
    (trees / "worktrees").mkdir(parents=True, exist_ok=True)
    (trees / "gitdirs").mkdir(exist_ok=True)
    (tmp_path / "state").mkdir(exist_ok=True)
    fields: dict = dict(image="-", sidecar_image="-", name="iterare-ahead", command=("start",),
                        policy=EgressPolicy(), out_dir=tmp_path / "state" / "ahead" / "out",
                        repo_path="/repo", owned=(trees / "worktrees" / "ahead",
                                                  trees / "gitdirs" / "ahead"))
    fields.update(changes)
    return SandboxSpec(**fields)


def _run_spec(template: SandboxSpec, run_id: str = "r-1", **changes: object) -> SandboxSpec:
    """The spec of the run itself: its own id, out folder and trees in the same folders."""
    import dataclasses

    fields: dict = dict(
        sidecar_image="sha256:own", run_id=run_id, name=f"iterare-{run_id}",
        out_dir=template.out_dir.parent.parent / run_id / "out",
        owned=tuple(Path(t).parent / run_id for t in template.owned))
    fields.update(changes)
    return dataclasses.replace(template, **fields)


def _own(status_of: StatusOf) -> str | None:
    return status_of("git-iterare:latest").id or None


def _head(tmp_path: Path, engine: FakeEngine, image_of: Any = _own,
          **changes: object) -> headstart.HeadStart:
    return headstart.HeadStart(engine, _template(tmp_path, **changes), image_of)


def test_a_sidecar_made_ahead_is_a_spare_no_other_run_may_claim(tmp_path: Path) -> None:
    engine = FakeEngine()
    head = _head(tmp_path, engine)
    spec = _run_spec(_template(tmp_path))
    assert head.sidecar_for(spec) == "c0ffee"
    head._done.wait(5)
    create = next(body for call, body in engine.calls if call == "POST /containers/create")
    assert ("POST /containers/c0ffee/start", None) in engine.calls
    env = dict(e.split("=", 1) for e in create["Env"])
    assert env["ITERARE_SPARE"] == str(headstart.WAIT_SECONDS) and env["ITERARE_TREES"] == ""
    assert create["Image"] == "sha256:own" and create["HostConfig"]["AutoRemove"] is True
    assert create["Labels"][spare.LABEL_SPARE] == head.token
    assert create["Labels"]["dev.iterare.run"] == ""
    # Its folder has no spare.json: no other run claims it.
    assert head.folder is not None and head.folder.is_dir()
    assert not (head.folder / "spare.json").exists()
    other = _run_spec(_template(tmp_path), "r-2")
    other.out_dir.mkdir(parents=True)
    assert spare.claim(other, lambda: ("", "")) is None


def test_the_claim_hands_the_run_its_policy_trees_and_folders(tmp_path: Path) -> None:
    head = _head(tmp_path, FakeEngine())
    spec = _run_spec(_template(tmp_path))
    spec.out_dir.mkdir(parents=True)  # the launch makes it, empty
    assert head.sidecar_for(spec) == "c0ffee"
    head.claim(spec, lambda: ("v 1\ndomain a.test\n", "0/r-1 1/r-1"))
    claim = spec.signal_dir() / "claim"
    assert (claim / "policy").read_text() == "v 1\ndomain a.test\n"
    assert (claim / "trees").read_text() == "0/r-1 1/r-1"
    assert (claim / "agent").read_text() == f"{spec.agent_uid} {spec.agent_gid}\n"
    assert head.folder is not None and not head.folder.exists()
    assert list(spec.out_dir.parent.parent.glob("claim-*")) == []
    engine_calls = len(head._engine.calls)  # type: ignore[attr-defined]
    head.discard()  # claimed: nothing is removed
    assert len(head._engine.calls) == engine_calls  # type: ignore[attr-defined]


@pytest.mark.parametrize("change", [
    {"sidecar_image": "sha256:rebuilt"},  # the launch built the image anew
    {"network": "mine"},
    {"repo_path": "/elsewhere"},
])
def test_a_run_it_cannot_serve_removes_it(tmp_path: Path, change: dict) -> None:
    engine = FakeEngine()
    head = _head(tmp_path, engine)
    assert head.sidecar_for(_run_spec(_template(tmp_path), **change)) is None
    assert ("DELETE /containers/c0ffee", {"force": "1", "v": "1"}) in engine.calls
    assert head.folder is not None and not head.folder.exists()
    assert list((tmp_path / "state").iterdir()) == []


def test_a_tree_folder_replaced_meanwhile_is_not_served(tmp_path: Path) -> None:
    engine = FakeEngine()
    head = _head(tmp_path, engine)
    head._done.wait(5)
    worktrees = tmp_path / "trees" / "worktrees"
    worktrees.rename(tmp_path / "trees" / "old")
    worktrees.mkdir()  # the sidecar made ahead has the old one mounted
    assert head.sidecar_for(_run_spec(_template(tmp_path))) is None
    assert ("DELETE /containers/c0ffee", {"force": "1", "v": "1"}) in engine.calls


def test_an_image_that_needs_a_build_gets_no_head_start(tmp_path: Path) -> None:
    engine = FakeEngine()
    head = _head(tmp_path, engine, image_of=lambda status_of: None)
    assert head.sidecar_for(_run_spec(_template(tmp_path))) is None
    assert [call for call, _ in engine.calls if not call.startswith("GET")] == []
    assert list((tmp_path / "state").iterdir()) == []


def test_a_refused_run_removes_it_once_it_is_made(tmp_path: Path) -> None:
    """discard waits for a start still going on, then removes; twice is harmless."""
    gate = threading.Event()
    engine = FakeEngine(started=gate)
    head = _head(tmp_path, engine)
    threading.Timer(0.2, gate.set).start()
    head.discard()
    head.discard()
    deletes = [call for call, _ in engine.calls if call.startswith("DELETE")]
    assert deletes == ["DELETE /containers/c0ffee"]
    assert list((tmp_path / "state").iterdir()) == []


def test_a_sidecar_that_did_not_start_fails_the_claim_with_the_engines_words(
        tmp_path: Path) -> None:
    gate = threading.Event()
    head = _head(tmp_path, FakeEngine(fail="/start", started=gate))
    spec = _run_spec(_template(tmp_path))
    assert head.sidecar_for(spec) == "c0ffee"  # made; its start is awaited by the claim
    gate.set()
    with pytest.raises(OperationFailed, match="could not start the network sidecar of "
                                              "iterare-r-1: /start refused"):
        head.claim(spec, lambda: ("", ""))


def test_a_start_that_failed_before_the_launch_looked_leaves_it_to_start_its_own(
        tmp_path: Path) -> None:
    engine = FakeEngine(fail="/start")
    head = _head(tmp_path, engine)
    head._done.wait(5)
    assert head.sidecar_for(_run_spec(_template(tmp_path))) is None
    assert ("DELETE /containers/c0ffee", {"force": "1", "v": "1"}) in engine.calls


def test_cleanup_leaves_it_to_its_run_while_the_run_is_launched(tmp_path: Path) -> None:
    engine = FakeEngine()
    head = _head(tmp_path, engine)
    spec = _run_spec(_template(tmp_path))
    spec.out_dir.mkdir(parents=True)
    assert head.sidecar_for(spec) == "c0ffee"
    head._done.wait(5)
    assert head.folder is not None and spare.held(head.folder)
    assert spare.remove_all(tmp_path / "state", "/nowhere") == 0
    assert head.folder.is_dir()
    head.claim(spec, lambda: ("", ""))  # still its run's
    assert ("POST /containers/c0ffee/rename", {"name": "iterare-r-1-net"}) in engine.calls


def test_one_whose_process_died_is_not_held_and_cleanup_removes_it(tmp_path: Path) -> None:
    head = _head(tmp_path, FakeEngine())
    head._done.wait(5)
    assert head.folder is not None
    head._let_go()  # as the kernel does when the process dies
    assert not spare.held(head.folder)
    spare.remove_all(tmp_path / "state", "/nowhere")  # (no engine: the folder only)
    assert not head.folder.exists()


def test_one_removed_before_its_claim_fails_the_launch_with_one_line(tmp_path: Path) -> None:
    head = _head(tmp_path, FakeEngine())
    spec = _run_spec(_template(tmp_path))
    spec.out_dir.mkdir(parents=True)
    assert head.sidecar_for(spec) == "c0ffee"
    head._done.wait(5)
    assert head.folder is not None
    spare.take(head.folder, "sweep-x")  # by hand, say
    with pytest.raises(OperationFailed, match="was removed meanwhile"):
        head.claim(spec, lambda: ("", ""))


def test_a_launch_that_got_there_late_starts_its_own(tmp_path: Path) -> None:
    """After a long project image build the sidecar ahead is about to give up waiting."""
    engine = FakeEngine()
    head = _head(tmp_path, engine)
    head._done.wait(5)
    head._until = 0.0  # its wait is as good as over
    assert head.sidecar_for(_run_spec(_template(tmp_path))) is None
    assert ("DELETE /containers/c0ffee", {"force": "1", "v": "1"}) in engine.calls


def test_where_no_sidecar_is_started_ahead(tmp_path: Path) -> None:
    template = _template(tmp_path)

    def start(spec: SandboxSpec = template, url: str = SOCKET, version: object = "1.41",
              **kwargs: Any) -> object:
        return headstart.start(spec, url, version, _own, **kwargs)

    assert start(url="tcp://box:2376") is None  # no local socket
    assert start(url="ssh://box") is None
    assert start(_template(tmp_path, network="mine")) is None  # the user's network
    assert start(_template(tmp_path, networks=("extra",))) is None
    assert start(_template(tmp_path, owned=(tmp_path / "no" / "ahead",))) is None
    waiting = tmp_path / "state" / "spare-aaaa"
    waiting.mkdir()
    (waiting / "spare.json").write_text(json.dumps({
        "v": spare.SPARE_FORMAT, "container": "c1", "fingerprint": "x",
        "expires": 4e9}))
    assert start() is None  # a spare waits: the run claims that one
    made = start(spares=False)  # spares off: that one is not for this run
    assert isinstance(made, headstart.HeadStart)
    made.discard()


class VersionEngine(FakeEngine):
    def __init__(self, version: str) -> None:
        super().__init__()
        self.api_version, self.version = None, version

    def request(self, method: str, path: str, body: Any = None,
                query: dict[str, str] | None = None, *, versioned: bool = True) -> Any:
        if path == "/version":
            self.calls.append(("GET /version", None))
            return {"ApiVersion": self.version}
        self._version()
        return super().request(method, path, body, query)


def test_an_engine_whose_api_version_is_not_known_yet_is_asked_once(tmp_path: Path) -> None:
    engine = VersionEngine("1.43")
    head = _head(tmp_path, engine)
    assert head.sidecar_for(_run_spec(_template(tmp_path))) == "c0ffee"
    head.discard()
    assert [call for call, _ in engine.calls].count("GET /version") == 1
    assert engine.api_version == "1.43"


def test_an_engine_older_than_the_mounts_api_gets_no_head_start(tmp_path: Path) -> None:
    engine = VersionEngine("1.29")
    head = _head(tmp_path, engine)
    assert head.sidecar_for(_run_spec(_template(tmp_path))) is None
    assert isinstance(head.error, OSError) and "older than 1.30" in str(head.error)
    assert [call for call, _ in engine.calls] == ["GET /version"]


def test_socket_paths() -> None:
    assert socket_path("unix:///var/run/docker.sock") == "/var/run/docker.sock"
    assert socket_path("unix://relative.sock") is None
    assert socket_path("tcp://127.0.0.1:2375") is None


def test_the_image_is_looked_up_as_ensure_image_does(tmp_path: Path) -> None:
    """Through the engine's inspect answer: id and labels."""
    head = _head(tmp_path, FakeEngine())
    found = head._status("git-iterare:latest")
    assert found == ImageStatus("git-iterare:latest", True, "sha256:own", "",
                                {"dev.iterare.image": "own"})
    head.discard()


def test_one_whose_folder_was_taken_before_it_was_held_is_not_used(tmp_path: Path) -> None:
    """cleanup may take the folder between its making and its lock: the run starts its own
    sidecar instead of failing at the claim."""
    engine = FakeEngine()
    head = _head(tmp_path, engine)
    head._done.wait(5)
    assert head.folder is not None
    spare.take(head.folder, "sweep-x")
    assert head.sidecar_for(_run_spec(_template(tmp_path))) is None
    assert ("DELETE /containers/c0ffee", {"force": "1", "v": "1"}) in engine.calls
