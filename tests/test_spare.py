"""Spare network sidecars (git_iterare.sandbox.warm.spare) without an engine: which spare a
run may take, that only one run gets it, that its trees become the run's, what the claim
hands over, and when a run leaves one. The engine's side (a real spare claimed, its policy
enforced, its end) is in test_spare_e2e.py."""

from __future__ import annotations

import json
import os
import shutil
import threading
import time
from pathlib import Path

import pytest

from git_iterare.sandbox import EgressPolicy, SandboxSpec, VolumeTrees
from git_iterare.sandbox.hostnet import with_dns
from git_iterare.sandbox.sidecar import policy_lines
from git_iterare.sandbox.warm import spare
from tests.conftest import iterare


def _spec(root: Path, run_id: str = "r-1", **changes: object) -> SandboxSpec:
    iterare = root.parent  # as <git common dir>/iterare: state/, live/, gitdirs/
    fields: dict = dict(image="agent:1", sidecar_image="sha256:abc", name=f"iterare-{run_id}",
                        command=("true",), policy=EgressPolicy(), run_id=run_id,
                        out_dir=root / run_id / "out", repo_path="/repo",
                        owned=(iterare / "live" / run_id, iterare / "gitdirs" / run_id))
    fields.update(changes)
    return SandboxSpec(**fields)


def claim(spec: SandboxSpec, rename: object = None) -> str | None:
    """Take a spare for ``spec``'s run and give it the run, as a launch does; its
    container, or None."""
    taken = spare.take(spec)
    if taken is None:
        return None
    spare.give(spec, taken, rename if callable(rename) else lambda container: None)
    return taken.container


def _waiting(root: Path, spec: SandboxSpec, token: str = "aaaa", container: str = "c1",
             left: float = 600.0) -> Path:
    """A spare folder as :func:`spare.make` leaves it, for sandboxes like ``spec``."""
    folder = root / f"spare-{token}"
    (folder / "out").mkdir(parents=True)
    (folder / "signal").mkdir()
    for tree in spare.placeholders(spec, token):  # its own trees, which it mounts
        tree.parent.mkdir(parents=True, exist_ok=True)
        tree.mkdir(exist_ok=True)
    (folder / "spare.json").write_text(json.dumps({
        "v": spare.SPARE_FORMAT, "container": container,
        "fingerprint": spare.fingerprint(spec), "expires": time.time() + left}))
    return folder


def _recorder(removed: list[str]) -> object:
    """A fake ``_remove_spare_container`` that notes the tokens asked for, each of a state
    folder named ``state`` (every one here is)."""
    def remove(token: str, root: Path) -> bool:
        assert root.name == "state"
        removed.append(token)
        return True
    return remove


@pytest.fixture
def running(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every spare container counts as running; the ids asked about are kept."""
    asked: list[str] = []

    def check(container_id: str, token: str, root: Path) -> bool:
        asked.append(container_id)
        return True

    monkeypatch.setattr(spare, "_running_spare", check)
    return asked


def test_a_claim_hands_over_policy_trees_and_ids_and_the_folders(tmp_path: Path,
                                                                 running: list[str]) -> None:
    root = tmp_path / "state"
    spec = _spec(root)
    folder = _waiting(root, spec)
    (folder / "out" / "from-the-spare").write_text("x")
    spec.out_dir.mkdir(parents=True)  # the launch makes it, empty, before the claim

    mounted = spare.placeholders(spec, "aaaa")
    inodes = [os.stat(p).st_ino for p in mounted]

    assert claim(spec) == "c1"

    assert running == ["c1"]
    assert not folder.exists() and not list(root.glob("claim-*"))
    # The run's trees are the folders the spare mounts (the same inodes), renamed.
    assert [os.stat(t).st_ino for t in spec.owned] == inodes
    assert not any(p.exists() for p in mounted)
    assert (spec.out_dir / "from-the-spare").read_text() == "x"  # the sidecar's own out/
    handed = spec.out_dir.with_name("signal") / "claim"
    assert (handed / "policy").read_text() == policy_lines(with_dns(spec))
    assert (handed / "trees").read_text() == "0/.spare-aaaa 1/.spare-aaaa"
    assert (handed / "agent").read_text() == f"{spec.agent_uid} {spec.agent_gid}\n"
    assert not handed.with_name("claim.new").exists()


def test_a_spare_mounts_its_own_trees_and_nothing_beside_them(tmp_path: Path) -> None:
    from git_iterare.sandbox.sidecar import sidecar_config

    root = tmp_path / "state"
    spec = _spec(root)
    for tree in spec.owned:
        tree.mkdir(parents=True)
    token, _folder, spare_spec = spare.new_folder(spec)
    config = sidecar_config(spare_spec, spare.environment(60), labels={})
    trees = [m["Source"] for m in config["HostConfig"]["Mounts"]
             if m["Target"].startswith("/trees/")]
    assert trees == [str(p.resolve()) for p in spare.placeholders(spec, token)]
    assert all(p.is_dir() for p in spare.placeholders(spec, token))


@pytest.mark.parametrize("change", [
    {"sidecar_image": "sha256:def"},  # git-iterare's image was rebuilt
    {"network": "other"},  # docker.network: no spares at all
    {"repo_path": "/elsewhere"},
    # The trees live elsewhere: the spare has the wrong folders mounted.
    {"owned": (Path("/x/worktrees/r-1"), Path("/x/gitdirs/r-1"))},
])
def test_a_spare_made_for_other_settings_is_not_claimed(tmp_path: Path, running: list[str],
                                                        change: dict) -> None:
    root = tmp_path / "state"
    folder = _waiting(root, _spec(root))
    assert claim(_spec(root, **change)) is None
    assert folder.exists() and running == []


def test_the_trees_order_is_part_of_the_fingerprint(tmp_path: Path) -> None:
    root = tmp_path / "state"
    spec = _spec(root)
    swapped = _spec(root, owned=tuple(reversed(spec.owned)))
    assert spare.fingerprint(spec) != spare.fingerprint(swapped)  # /trees/0 is the first


def test_no_spare_serves_a_remote_engine_or_extra_networks(tmp_path: Path,
                                                           running: list[str]) -> None:
    root = tmp_path / "state"
    spec = _spec(root)
    _waiting(root, spec)
    assert claim(_spec(root, networks=("db",))) is None
    assert claim(_spec(root, volumes=VolumeTrees("w", "g", "c"))) is None
    assert running == []


def test_a_spare_about_to_give_up_is_not_claimed(tmp_path: Path, running: list[str]) -> None:
    root = tmp_path / "state"
    spec = _spec(root)
    _waiting(root, spec, left=spare.CLAIM_MARGIN - 1)
    assert claim(spec) is None and running == []


@pytest.mark.parametrize("content", [b"", b"{", b"[]", b'{"v": 99}', b" " * 5000])
def test_a_bad_spare_json_is_skipped(tmp_path: Path, running: list[str],
                                     content: bytes) -> None:
    root = tmp_path / "state"
    spec = _spec(root)
    folder = _waiting(root, spec)
    (folder / "spare.json").write_bytes(content)
    assert claim(spec) is None and running == []


def test_a_spare_whose_container_is_gone_is_dropped_and_the_next_claimed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "state"
    spec = _spec(root)
    _waiting(root, spec, token="aaaa", container="gone")
    _waiting(root, spec, token="bbbb", container="alive")
    monkeypatch.setattr(spare, "_running_spare", lambda cid, token, root: cid == "alive")
    assert claim(spec) == "alive"
    assert not list(root.glob("spare-*")) and not list(root.glob("claim-*"))


def test_a_run_folder_with_content_stops_the_claim(tmp_path: Path, running: list[str],
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "state"
    spec = _spec(root)
    _waiting(root, spec)
    spec.out_dir.mkdir(parents=True)
    (spec.out_dir / "status.json").write_text("{}")
    removed: list[str] = []
    monkeypatch.setattr(spare, "_remove_container", removed.append)
    taken = spare.take(spec)
    assert taken is not None
    with pytest.raises(OSError):
        spare.give(spec, taken, lambda container: None)
    spare.drop(taken)
    # Taken, unusable: not left waiting for nobody; by id, as it may bear the run's name.
    assert removed == ["c1"]
    assert (spec.out_dir / "status.json").read_text() == "{}"


def test_a_run_whose_trees_exist_takes_no_spare(tmp_path: Path, running: list[str]) -> None:
    root = tmp_path / "state"
    spec = _spec(root)
    folder = _waiting(root, spec)
    spec.owned[0].mkdir(parents=True)
    assert spare.take(spec) is None
    assert folder.exists() and running == []


def test_of_runs_claiming_at_once_one_gets_the_spare(tmp_path: Path,
                                                     running: list[str]) -> None:
    root = tmp_path / "state"
    _waiting(root, _spec(root))
    got: dict[str, str | None] = {}
    barrier = threading.Barrier(8)

    def claim(run_id: str) -> None:
        spec = _spec(root, run_id=run_id)
        barrier.wait()
        taken = spare.take(spec)
        got[run_id] = taken.container if taken is not None else None

    threads = [threading.Thread(target=claim, args=(f"r-{n}",)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(v or "" for v in got.values()) == ["", "", "", "", "", "", "", "c1"]


def test_a_spare_is_left_only_when_runs_follow_one_another(tmp_path: Path) -> None:
    root = tmp_path / "state"
    root.mkdir()
    spec = _spec(root)
    assert not spare.wanted(spec, 600, claimed=False)  # the first run in a while
    assert spare.wanted(spec, 600, claimed=False)  # the next one, soon after
    old = time.time() - 700
    os.utime(root / spare.LAST_LAUNCH, (old, old))
    assert not spare.wanted(spec, 600, claimed=False)
    assert spare.wanted(spec, 600, claimed=True)  # a run that used one leaves one
    assert not spare.wanted(spec, 0, claimed=True)  # docker.spare_seconds = 0: none
    assert not spare.wanted(_spec(root, networks=("db",)), 600, claimed=True)
    assert not spare.wanted(_spec(root, network="compose_default"), 600, claimed=True)


def test_cleanup_takes_waiting_spares_only(tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "state"
    spec = _spec(root)
    _waiting(root, spec, token="aaaa", container="c1")
    _waiting(root, spec, token="bbbb", container="c2")
    orphan = root / "spare-cccc"  # cut short before its spare.json: its container too
    orphan.mkdir()
    (root / "r-0" / "out").mkdir(parents=True)  # a run's folder: not a spare
    removed: list[str] = []

    def remove(token: str, root: Path) -> bool:
        removed.append(token)
        return token != "bbbb"  # that one had ended already

    monkeypatch.setattr(spare, "_remove_spare_container", remove)
    monkeypatch.setattr(spare, "_remove_orphans", lambda root, repo_path: 0)
    assert spare.remove_all(root, "/repo") == 2
    assert sorted(removed) == ["aaaa", "bbbb", "cccc"]
    assert sorted(p.name for p in root.iterdir()) == ["r-0"]


def test_a_new_spare_sweeps_those_nobody_will_claim(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "state"
    spec = _spec(root)
    for tree in spec.owned:
        tree.parent.mkdir(parents=True, exist_ok=True)
    _waiting(root, spec, token="gone", left=-spare.SWEEP_AFTER - 1)  # gave up long ago
    _waiting(root, _spec(root, sidecar_image="sha256:old"), token="old")  # other image
    cut = root / "spare-cut"  # never got its spare.json, a while ago
    cut.mkdir()
    os.utime(cut, (time.time() - 2 * spare.SWEEP_AFTER,) * 2)
    fresh = root / "spare-new"  # being made by another run right now
    fresh.mkdir()
    removed: list[str] = []
    monkeypatch.setattr(spare, "_remove_spare_container", _recorder(removed))
    monkeypatch.setattr(spare, "_sweep_unstarted", lambda root: None)

    def refuse(*args: object, **kwargs: object) -> None:
        raise RuntimeError("the engine refused")

    monkeypatch.setattr("git_iterare.sandbox.sidecar.create_sidecar", refuse)
    with pytest.raises(RuntimeError):
        spare.make(spec, 600)
    assert sorted(removed) == ["cut", "gone", "old"]
    assert sorted(p.name for p in root.iterdir()) == ["spare-new"]  # its own went too


def test_a_folder_replaced_since_the_spare_was_made_is_not_what_it_serves(
        tmp_path: Path) -> None:
    root = tmp_path / "state"
    spec = _spec(root)
    for tree in spec.owned:
        tree.parent.mkdir(parents=True, exist_ok=True)
    before = spare.fingerprint(spec)
    parent = spec.owned[0].parent
    parent.rename(parent.with_name("moved"))
    parent.mkdir()
    assert spare.fingerprint(spec) != before


@pytest.mark.parametrize(("seconds", "message"), [
    ("-1", "config.toml: docker.spare_seconds must be a non-negative integer, got -1"),
    ("3601", "docker.spare_seconds must be 0 (none) or 10 to 3600 seconds, not 3601"),
    ("5", "docker.spare_seconds must be 0 (none) or 10 to 3600 seconds, not 5"),
])
def test_spare_seconds_out_of_range_is_refused_before_anything_exists(
        repo: Path, seconds: str, message: str) -> None:
    (repo / ".iterare" / "prompts").mkdir(parents=True)
    (repo / ".iterare" / "prompts" / "p.md").write_text("---\nagent: shell\n---\ntrue\n")
    config = Path(os.environ["XDG_CONFIG_HOME"]) / "iterare" / "config.toml"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(f"[docker]\nspare_seconds = {seconds}\n")
    done = iterare("execute", "p", cwd=repo)
    assert done.returncode == 2, done.stderr
    assert len(done.stderr.splitlines()) == 1 and message in done.stderr
    assert not (repo / ".git" / "iterare" / "state").exists()


def test_a_claim_cut_short_by_ctrl_c_removes_the_spare(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "state"
    spec = _spec(root)
    _waiting(root, spec)

    def interrupted(container_id: str, token: str, root: Path) -> bool:
        raise KeyboardInterrupt

    removed: list[str] = []
    monkeypatch.setattr(spare, "_running_spare", interrupted)
    monkeypatch.setattr(spare, "_remove_spare_container", _recorder(removed))
    with pytest.raises(KeyboardInterrupt):
        spare.take(spec)
    assert removed == ["aaaa"]  # the run never learnt its id: nothing would remove it
    assert list(root.iterdir()) == []


def test_what_a_killed_claim_or_sweep_left_is_removed(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """By age of the folder's last change (ctime: the rename that took it sets it, while
    its mtime is that of the spare, which may have waited long)."""
    root = tmp_path / "state"
    old = time.time() - 2 * spare.LEFTOVER_AGE
    for name in ("claim-spare-x-1-spare-dddd", "sweep-spare-eeee"):
        (root / name / "out").mkdir(parents=True)
        os.utime(root / name, (old, old))  # a spare that waited before it was taken
    removed: list[str] = []
    monkeypatch.setattr(spare, "_remove_spare_container", _recorder(removed))
    monkeypatch.setattr(spare, "_remove_orphans", lambda root, repo_path: 0)
    spare.remove_all(root, "/repo")
    assert removed == []  # taken just now: those claims are going on
    later = time.time() + 2 * spare.LEFTOVER_AGE
    monkeypatch.setattr("time.time", lambda: later)
    spare.remove_all(root, "/repo")
    assert sorted(removed) == ["dddd", "eeee"]
    assert list(root.iterdir()) == []


def test_a_claimed_spare_is_renamed_while_its_claim_folder_still_says_so(
        tmp_path: Path, running: list[str]) -> None:
    """A sweep (cleanup's) takes a spare container whose folder is gone for an orphan; until
    it has the run's name, its claim-* folder stands for it."""
    root = tmp_path / "state"
    spec = _spec(root)
    _waiting(root, spec)
    seen: list[tuple[str, list[str]]] = []

    def rename(container_id: str) -> None:
        seen.append((container_id, sorted(p.name for p in root.glob("claim-*"))))

    assert claim(spec, rename) == "c1"
    assert seen == [("c1", ["claim-r-1-spare-aaaa"])]
    assert list(root.glob("claim-*")) == []


def test_cleanup_in_a_copy_leaves_the_originals_placeholders(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A copy of a repository's ``.git`` names the original's placeholder trees in its
    spare folders, and holds copies of them: only the copies are removed."""
    original, copy = tmp_path / "a" / "state", tmp_path / "b" / "state"
    _waiting(original, _spec(original))
    _waiting(copy, _spec(copy))
    theirs = spare.placeholders(_spec(original), "aaaa")
    mine = spare.placeholders(_spec(copy), "aaaa")
    (copy / "spare-aaaa" / "trees").write_text("".join(f"{p}\n" for p in theirs))  # copied
    assert all(p.is_dir() for p in theirs + mine)
    monkeypatch.setattr(spare, "_remove_spare_container", _recorder([]))
    monkeypatch.setattr(spare, "_remove_orphans", lambda root, repo_path: 0)
    spare.remove_all(copy, "/repo")
    assert all(p.is_dir() for p in theirs)
    assert not any(p.exists() for p in mine)


def test_a_spare_is_ones_own_by_its_token_and_its_state_folder(tmp_path: Path) -> None:
    """Not by the work tree's path alone, which anyone may name (``GIT_WORK_TREE``)."""
    root = tmp_path / "state"
    labels = spare.labels(_spec(root), "aaaa")
    assert spare._ours(labels, "aaaa", root)
    assert not spare._ours(labels, "aaaa", tmp_path / "copy" / "state")
    assert not spare._ours(labels, "bbbb", root)
    assert not spare._ours({**labels, spare.LABEL_SPARE_HOME: ""}, "aaaa", root)
    assert not spare._ours({**labels, spare.LABEL_SPARE: ""}, "", root)


def test_placeholders_behind_a_symlinked_folder_are_left(tmp_path: Path) -> None:
    original, copy = tmp_path / "a" / "state", tmp_path / "b" / "state"
    _waiting(original, _spec(original))
    copy.mkdir(parents=True)
    (copy.parent / "live").symlink_to(original.parent / "live")
    (copy / "spare-aaaa").mkdir()
    (copy / "spare-aaaa" / "trees").write_text(f"{copy.parent / 'live' / '.spare-aaaa'}\n")
    spare._remove_placeholders(copy / "spare-aaaa")
    assert (original.parent / "live" / ".spare-aaaa").is_dir()


def test_cleanup_leaves_the_spares_of_a_state_folder_of_another_user(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Another user's repository reached through ``GIT_DIR`` or ``GIT_COMMON_DIR``: its
    spares are its owner's, whatever their labels say."""
    root = tmp_path / "state"
    folder = _waiting(root, _spec(root))
    removed: list[str] = []
    monkeypatch.setattr(spare, "_remove_spare_container", _recorder(removed))
    monkeypatch.setattr(spare, "_remove_orphans", lambda root, repo_path: removed.append("o"))
    monkeypatch.setattr(os, "getuid", lambda: os.stat(root).st_uid + 1)
    assert spare.remove_all(root, "/repo") == 0
    assert removed == [] and (folder / "spare.json").is_file()


def test_cleanup_removes_placeholders_whose_spare_folder_is_gone(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "state"
    spec = _spec(root)
    gone = _waiting(root, spec, token="aaaa")
    _waiting(root, spec, token="bbbb")
    claimed = _waiting(root, spec, token="cccc")
    claimed.rename(root / "claim-r-2-spare-cccc")  # being claimed right now
    shutil.rmtree(gone)  # by hand, or by a process killed meanwhile
    (tmp_path / "gitdirs" / ".spare-aaaa.gitfile").touch()
    (tmp_path / "live" / ".spare-dddd").mkdir()
    (tmp_path / "live" / ".spare-dddd" / "work").touch()  # not empty: kept
    monkeypatch.setattr(spare, "_remove_spare_container", _recorder([]))
    monkeypatch.setattr(spare, "_remove_orphans", lambda root, repo_path: 0)
    monkeypatch.setattr(spare, "_sweep_leftovers", lambda root: None)

    def left() -> list[str]:
        return sorted(p.name for p in (*(tmp_path / "live").iterdir(),
                                       *(tmp_path / "gitdirs").iterdir()))

    # Made just now, they might be a new spare's: left. (bbbb's folder, which names no
    # trees here, is swept: its placeholders are strays from now on.)
    spare.remove_all(root, "/repo")
    assert left() == [".spare-aaaa", ".spare-aaaa", ".spare-aaaa.gitfile", ".spare-bbbb",
                      ".spare-bbbb", ".spare-cccc", ".spare-cccc", ".spare-dddd"]
    later = time.time() + 2 * spare.SWEEP_AFTER
    monkeypatch.setattr("time.time", lambda: later)
    spare.remove_all(root, "/repo")
    assert left() == [".spare-cccc", ".spare-cccc", ".spare-dddd"]
