"""Shipping a run to an engine that shares no filesystem with the client (the DinD engine
of tests/engines.py over tcp+TLS), called directly: one archive fills the object cache,
the run gitdir and the worktree, and a porter from git-iterare's own image checks the
base out there, as the agent's uid, while the sandbox would be launched; the agent's
container then finds the checkout done."""

from __future__ import annotations

import contextlib
import io
import json
import os
import tarfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import pytest

from git_iterare.git import repo as repo_mod
from git_iterare.runner.placement import remote as remote_placement
from git_iterare.runner.placement import ship as shipping
from git_iterare.runner.placement import spares
from git_iterare.runner.workspace import run_gitdir_config
from git_iterare.runs.record import RunRecord
from git_iterare.sandbox import agent_ids
from git_iterare.sandbox import volumes as remote
from git_iterare.sandbox.accounts import container_file
from git_iterare.sandbox.engine import TLS, Engine, using
from git_iterare.sandbox.spec import CACHE_PATH, GITDIR_PATH, WORK_PATH, VolumeTrees
from tests.conftest import git
from tests.engines import DindEngine, remove_leftovers

pytestmark = pytest.mark.docker


class Trees(NamedTuple):
    """A run's volumes, and whether they are a spare worktree it took over."""

    work: str
    git: str
    cache: str
    spare: bool


def _remote_trees(r: repo_mod.Repo, record: RunRecord) -> Trees:
    work, git_volume = spares.record_volumes(record)
    return Trees(work, git_volume, remote.cache_volume(shipping.cache_key(r)),
                 spares.recorded_spare(record) is not None)


def _volumes(trees: Trees) -> VolumeTrees:
    return VolumeTrees(trees.work, trees.git, trees.cache)


def _make_volumes(r: repo_mod.Repo, trees: Trees, labels: dict[str, str]) -> None:
    remote_placement.make_volumes(r, _volumes(trees), labels, spare=trees.spare)


def _ship(r: repo_mod.Repo, run_id: str, base: str, trees: Trees, image: str,
          labels: dict[str, str], agent: tuple[int, int]) -> shipping.Shipped:
    return shipping.ship(r, run_id, base, _volumes(trees), image, labels, agent,
                         spare=trees.spare)


@pytest.fixture(scope="module")
def remote_image(dind_engine: DindEngine, sandbox_image: str) -> str:
    """The sandbox image, built here and copied into the DinD engine."""
    dind_engine.load_image(sandbox_image)
    return sandbox_image


@pytest.fixture
def engine(dind_engine: DindEngine) -> Iterator[Engine]:
    certs = dind_engine.cert_path
    tls = TLS(True, str(certs / "ca.pem"), str(certs / "cert.pem"), str(certs / "key.pem"))
    with using(Engine("dind-test", dind_engine.tcp_url, tls)) as chosen:
        yield chosen


def _files(chunks: Iterator[bytes]) -> dict[str, tarfile.TarInfo | bytes]:
    """name (first component dropped) -> content of regular files, TarInfo of others."""
    data = b"".join(chunks)
    found: dict[str, tarfile.TarInfo | bytes] = {}
    if not data:
        return found
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        for member in tar:
            name = member.name.partition("/")[2]
            handle = tar.extractfile(member) if member.isfile() else None
            found[name] = handle.read() if handle is not None else member
            if handle is not None:
                found["@owner:" + name] = member
    return found


def _wait_gone(reader: remote.Porter, path: str) -> None:
    deadline = time.monotonic() + 60
    while _files(reader.get(path)):
        assert time.monotonic() < deadline, f"{path} did not go"
        time.sleep(0.2)


def test_ship_fills_the_volumes_and_the_porter_checks_out_as_the_agent(
        repo: Path, hermetic_env: Path, engine: Engine, remote_image: str,
        dind_engine: DindEngine) -> None:
    (repo / "tool.sh").write_text("#!/bin/sh\necho tool\n")
    os.chmod(repo / "tool.sh", 0o755)
    os.symlink("README.md", repo / "link")
    (repo / "notes.env").write_text("TOKEN=local\n")  # untracked, included
    (repo / ".iterare").mkdir()
    (repo / ".iterare" / "include").write_text("notes.env\n")
    git("add", "tool.sh", "link", ".iterare/include", cwd=repo)
    git("commit", "-qm", "files", cwd=repo)
    r = repo_mod.discover(repo)
    base = git("rev-parse", "HEAD", cwd=repo).stdout.strip()
    run_id = f"ship-{uuid.uuid4().hex[:8]}"
    uid, gid = agent_ids()
    trees = _remote_trees(r, RunRecord(run_id, "ship"))
    labels = {"dev.iterare.repo": str(repo), "dev.iterare.run": run_id}
    inner = dind_engine.client()
    try:
        _make_volumes(r, trees, labels)
        first = _ship(r, run_id, base, trees, remote_image, labels, (uid, gid))
        assert first.objects > 0 and first.pack_bytes > 0
        volumes = {trees.work: ("/w", True), trees.git: ("/g", True)}
        with remote.Porter(remote_image, volumes, labels) as reader:
            work, gitdir = _checked_out(reader)
        # The base is checked out, the include file copied over it, all the agent's.
        assert work["README.md"] == b"hello\n"
        assert work["tool.sh"] == b"#!/bin/sh\necho tool\n"
        assert work["notes.env"] == b"TOKEN=local\n"
        tool = work["@owner:tool.sh"]
        assert isinstance(tool, tarfile.TarInfo)
        assert (tool.uid, tool.gid, tool.mode & 0o111) == (uid, gid, 0o111)
        link = work["link"]
        assert isinstance(link, tarfile.TarInfo) and link.issym() and link.linkname == "README.md"
        index = gitdir["@owner:index"]
        assert isinstance(index, tarfile.TarInfo) and index.uid == uid
        assert "iterare-include/notes.env" not in gitdir
        # The porter removed itself once done.
        deadline = time.monotonic() + 30
        while inner.containers.list(all=True, filters={"label": f"dev.iterare.run={run_id}"}):
            assert time.monotonic() < deadline, "the porter was left behind"
            time.sleep(0.2)
        # The same base again: nothing new for the cache.
        trees2 = _remote_trees(r, RunRecord(run_id + "x", "ship"))
        _make_volumes(r, trees2, labels)
        again = _ship(r, run_id + "x", base, trees2, remote_image, labels, (uid, gid))
        assert (again.objects, again.pack_bytes) == (0, 0)
    finally:
        remove_leftovers(inner, repo)


def _checked_out(reader: remote.Porter) -> tuple[dict[str, tarfile.TarInfo | bytes],
                                                 dict[str, tarfile.TarInfo | bytes]]:
    """The worktree and gitdir (at /w and /g in ``reader``) once the checkout is done."""
    _wait_gone(reader, f"/g/{shipping.PENDING}")
    return _files(reader.get("/w")), _files(reader.get("/g"))


def _agent_checkout(image: str, trees: Trees, agent: tuple[int, int],
                    labels: dict[str, str]) -> None:
    """Run what the agent's container runs before the agent (``engine-checkout agent``),
    as the agent, in /workspace, over ``trees``; return once it is done."""
    volumes = {trees.cache: (CACHE_PATH, True), trees.work: (WORK_PATH, False),
               trees.git: (GITDIR_PATH, False)}
    with remote.Porter(image, volumes, labels, user=f"{agent[0]}:{agent[1]}",
                       command=["/bin/sh", "-c", 'cd /workspace && exec /bin/sh -c "$0" '
                                'engine-checkout agent true',
                                container_file("engine-checkout").decode()]) as porter:
        porter.start()
    with remote.Porter(image, {trees.git: ("/g", True)}, labels) as reader:
        deadline = time.monotonic() + 60
        while shipping.DONE not in _files(reader.get("/g")):
            assert time.monotonic() < deadline, "the agent's checkout did not end"
            time.sleep(0.2)


def _tracked(work: dict[str, tarfile.TarInfo | bytes]) -> set[str]:
    return {name for name in work if not name.startswith("@") and name != ".git"
            and not isinstance(work[name], tarfile.TarInfo)}


def _spare_made(r: repo_mod.Repo, base: str, image: str, labels: dict[str, str]
                ) -> tuple[dict[str, str], object, dict[str, tarfile.TarInfo | bytes]]:
    """Ship a run of ``base``, then make the next run's spare; return the spare's registry
    entry, its ready mark and worktree once its maker is done."""
    run = f"spare-{uuid.uuid4().hex[:8]}"
    trees = _remote_trees(r, RunRecord(run, "spare"))
    assert not trees.spare
    _make_volumes(r, trees, labels)
    _ship(r, run, base, trees, image, labels, agent_ids())
    spares.make_spare(r, base, image, agent_ids())
    made = json.loads(spares._spare_file(r).read_text())
    with remote.Porter(image, {made["work"]: ("/w", True), made["git"]: ("/g", True)},
                       labels) as reader:
        _wait_gone(reader, f"/g/{shipping.SPARE_MAKING}")
        return made, _files(reader.get("/g")).get(shipping.SPARE_READY), _files(reader.get("/w"))


def _spare_taken_over(r: repo_mod.Repo, base: str, image: str, labels: dict[str, str]
                      ) -> tuple[str, spares.Spare, dict[str, tarfile.TarInfo | bytes],
                                 dict[str, tarfile.TarInfo | bytes]]:
    """Claim the spare for a run of ``base``, ship it, run the agent's checkout; return the
    run's id, the spare, and its worktree and gitdir once checked out."""
    spare = spares.claim_spare(r)
    assert spare is not None
    assert spares.claim_spare(r) is None  # it is this run's alone
    run = f"spare-{uuid.uuid4().hex[:8]}"
    record = RunRecord(run, "spare", extra={"spare": spare.to_json()})
    trees = _remote_trees(r, record)
    assert trees.spare and (trees.work, trees.git) == (spare.work, spare.git)
    assert spares.record_volumes(record) == (spare.work, spare.git)
    _make_volumes(r, trees, labels)
    _ship(r, run, base, trees, image, labels, agent_ids())
    _agent_checkout(image, trees, agent_ids(), labels)  # no porter: the agent does it
    with remote.Porter(image, {trees.work: ("/w", True), trees.git: ("/g", True)},
                       labels) as reader:
        work, gitdir = _checked_out(reader)
    return run, spare, work, gitdir


def test_a_spare_worktree_is_taken_over_and_only_the_changes_are_written(
        repo: Path, hermetic_env: Path, engine: Engine, remote_image: str,
        dind_engine: DindEngine) -> None:
    for name in ("keep.txt", "change.txt", "gone.txt", "tool.sh"):
        (repo / name).write_text(f"{name} at the first base\n")
    (repo / "notes.env").write_text("TOKEN=local\n")  # untracked, included
    (repo / ".iterare").mkdir()
    (repo / ".iterare" / "include").write_text("notes.env\n")
    git("add", ".", ":!notes.env", cwd=repo)
    git("commit", "-qm", "first", cwd=repo)
    r = repo_mod.discover(repo)
    first = git("rev-parse", "HEAD", cwd=repo).stdout.strip()
    uid, gid = agent_ids()
    labels = {"dev.iterare.repo": str(repo)}
    inner = dind_engine.client()
    try:
        assert spares.claim_spare(r) is None  # none made yet
        made, ready, before = _spare_made(r, first, remote_image, labels)
        # The spare is checked out at the first base, as the agent's, in its own volumes.
        assert ready == f"{first}\n".encode()
        common = {"README.md", ".iterare/include"}
        assert _tracked(before) == {*common, "keep.txt", "change.txt", "gone.txt", "tool.sh"}
        keep = before["@owner:keep.txt"]
        assert isinstance(keep, tarfile.TarInfo) and keep.uid == uid
        spares.make_spare(r, first, remote_image, (uid, gid))  # one spare at a time
        assert spares._spare_file(r).read_text() == json.dumps(made)

        # The next base changes a file, deletes one, adds one and makes one executable.
        (repo / "change.txt").write_text("changed\n")
        (repo / "new.txt").write_text("new\n")
        os.chmod(repo / "tool.sh", 0o755)
        git("rm", "-q", "gone.txt", cwd=repo)
        git("add", ".", ":!notes.env", cwd=repo)
        git("commit", "-qm", "second", cwd=repo)
        second = git("rev-parse", "HEAD", cwd=repo).stdout.strip()
        run2, spare, work, gitdir = _spare_taken_over(r, second, remote_image, labels)
        assert (spare.work, spare.base) == (made["work"], first)
        assert _tracked(work) == {*common, "keep.txt", "change.txt", "new.txt", "tool.sh",
                                  "notes.env"}
        assert (work["change.txt"], work["new.txt"]) == (b"changed\n", b"new\n")
        assert work["notes.env"] == b"TOKEN=local\n"
        tool = work["@owner:tool.sh"]
        assert isinstance(tool, tarfile.TarInfo) and tool.mode & 0o111 == 0o111
        kept = work["@owner:keep.txt"]
        assert isinstance(kept, tarfile.TarInfo) and kept.mtime == keep.mtime  # not rewritten
        assert gitdir["HEAD"] == f"ref: refs/heads/iterare/{run2}\n".encode()
        assert gitdir[f"refs/heads/iterare/{run2}"] == f"{second}\n".encode()
        assert shipping.DONE in gitdir and "index" in gitdir
        assert not {shipping.NEXT, shipping.SPARE_READY, shipping.SPARE_MAKING} & {
            name.split("/")[0] for name in gitdir}
    finally:
        remove_leftovers(inner, repo)


def test_a_spare_whose_maker_died_is_emptied_and_checked_out_in_full(
        repo: Path, hermetic_env: Path, engine: Engine, remote_image: str,
        dind_engine: DindEngine) -> None:
    r = repo_mod.discover(repo)
    base = git("rev-parse", "HEAD", cwd=repo).stdout.strip()
    uid, gid = agent_ids()
    labels = {"dev.iterare.repo": str(repo)}
    inner = dind_engine.client()
    key = shipping.cache_key(r)
    work, gitvol = remote.spare_volumes(key, uuid.uuid4().hex[:8])
    try:
        # Half a checkout: a stray file, and the maker's mark untouched for an hour.
        for name in (work, gitvol):
            remote.ensure_volume(name, labels)
        stale = io.BytesIO()
        with tarfile.open(fileobj=stale, mode="w") as tar:
            for path, when in (("w/stray.txt", time.time()), (f"g/{shipping.SPARE_MAKING}",
                                                              time.time() - 3600)):
                info = tarfile.TarInfo(path)
                info.size, info.mtime, info.uid, info.gid = 6, int(when), uid, gid
                tar.addfile(info, io.BytesIO(b"stray\n"))
        with remote.Porter(remote_image, {work: ("/w", False), gitvol: ("/g", False)},
                           labels) as writer:
            writer.put("/", stale.getvalue())
        spare = spares._spare_file(r)
        spare.parent.mkdir(parents=True, exist_ok=True)
        spare.write_text(json.dumps({"work": work, "git": gitvol, "base": base,
                                     "config": run_gitdir_config(r)}))
        claimed = spares.claim_spare(r)
        assert claimed is not None and claimed.work == work
        run_id = f"stale-{uuid.uuid4().hex[:8]}"
        trees = _remote_trees(r, RunRecord(run_id, "stale",
                                           extra={"spare": claimed.to_json()}))
        _make_volumes(r, trees, labels)
        started = time.monotonic()
        _ship(r, run_id, base, trees, remote_image, labels, (uid, gid))
        _agent_checkout(remote_image, trees, (uid, gid), labels)
        with remote.Porter(remote_image, {work: ("/w", True), gitvol: ("/g", True)},
                           labels) as reader:
            got, gitdir = _checked_out(reader)
        assert time.monotonic() - started < 30  # the dead maker was not waited for
        assert _tracked(got) == {"README.md"} and got["README.md"] == b"hello\n"
        assert shipping.DONE in gitdir and shipping.SPARE_MAKING not in gitdir
    finally:
        remove_leftovers(inner, repo)


def test_claim_spare_takes_a_named_spare_once_and_refuses_bad_files(repo: Path,
                                                                      hermetic_env: Path
                                                                      ) -> None:
    r = repo_mod.discover(repo)
    key = shipping.cache_key(r)
    work, gitvol = remote.spare_volumes(key, "0123abcd")
    base = git("rev-parse", "HEAD", cwd=repo).stdout.strip()
    path = spares._spare_file(r)
    path.parent.mkdir(parents=True)
    good = {"work": work, "git": gitvol, "base": base, "config": run_gitdir_config(r)}
    for bad in ({**good, "work": "iterare-cache-" + key}, {**good, "git": work},
                {**good, "base": "HEAD"}, {**good, "work": work.replace(key, "f" * 16),
                                           "git": gitvol.replace(key, "f" * 16)}):
        path.write_text(json.dumps(bad))
        assert spares.claim_spare(r) is None
        assert not path.exists()  # a bad file is dropped, not tried again
    path.write_text("not json")
    assert spares.claim_spare(r) is None
    path.write_text(json.dumps(good))
    assert spares.claim_spare(r) == spares.Spare(work, gitvol, base)
    assert spares.claim_spare(r) is None and list(path.parent.iterdir()) == []


def test_a_spare_is_checked_out_in_full_when_the_attributes_changed(
        repo: Path, hermetic_env: Path, engine: Engine, remote_image: str,
        dind_engine: DindEngine) -> None:
    # Same blobs, new attributes: read-tree -m would keep the spare's form of the files.
    (repo / "crlf.txt").write_text("one\ntwo\n")
    (repo / "sub").mkdir()
    (repo / "sub" / "id.txt").write_text("$Id$\n")
    git("add", ".", cwd=repo)
    git("commit", "-qm", "no attributes", cwd=repo)
    r = repo_mod.discover(repo)
    first = git("rev-parse", "HEAD", cwd=repo).stdout.strip()
    (repo / ".gitattributes").write_text("crlf.txt text eol=crlf\n")
    (repo / "sub" / ".gitattributes").write_text("id.txt ident\n")
    git("add", ".", cwd=repo)
    git("commit", "-qm", "attributes", cwd=repo)
    second = git("rev-parse", "HEAD", cwd=repo).stdout.strip()
    labels = {"dev.iterare.repo": str(repo)}
    inner = dind_engine.client()
    try:
        _, _, before = _spare_made(r, first, remote_image, labels)
        assert before["crlf.txt"] == b"one\ntwo\n"
        _, spare, work, _ = _spare_taken_over(r, second, remote_image, labels)
        assert spare.base == first
        # As a checkout of the second base in full would have them.
        assert work["crlf.txt"] == b"one\r\ntwo\r\n"
        blob = git("rev-parse", f"{second}:sub/id.txt", cwd=repo).stdout.strip()
        assert work["sub/id.txt"] == f"$Id: {blob} $\n".encode()
    finally:
        remove_leftovers(inner, repo)


def test_cleanup_cache_removes_spares_no_run_names_and_an_unlabelled_cache(
        repo: Path, hermetic_env: Path, engine: Engine, remote_image: str,
        dind_engine: DindEngine) -> None:
    from git_iterare.runs.store import RunStore

    r = repo_mod.discover(repo)
    base = git("rev-parse", "HEAD", cwd=repo).stdout.strip()
    key = shipping.cache_key(r)
    labels = {"dev.iterare.repo": str(repo)}
    inner = dind_engine.client()
    orphan = remote.spare_volumes(key, uuid.uuid4().hex[:8])  # made over another URL, say
    taken = remote.spare_volumes(key, uuid.uuid4().hex[:8])   # a run's work now
    try:
        for name in (*orphan, *taken):
            remote.ensure_volume(name, {remote.LABEL_SPARE: key, **labels})
        # As the engine makes it again when a porter names it after its removal.
        inner.volumes.create(remote.cache_volume(key))
        RunStore(r).create("took", prompt_name="p", prompt_path=None, prompt_text="",
                           base_commit=base, base_branch="main", agent="shell",
                           extra={"spare": {"work": taken[0], "git": taken[1], "base": base}})
        # make_spare sweeps only spares old enough that no process is still making them.
        spares.drop_stray_spares(r, key, spares.STRAY_SPARE_AGE)
        assert set(orphan) <= {v.name for v in inner.volumes.list()}
        removed = remote_placement.remove_cache(r)
        assert removed == [remote.cache_volume(key)]
        left = {v.name for v in inner.volumes.list()}
        assert not set(orphan) & left and set(taken) <= left
        assert remote_placement.remove_cache(r) == []
    finally:
        remove_leftovers(inner, repo)
        for name in (*taken, remote.cache_volume(key)):
            with contextlib.suppress(Exception):
                inner.volumes.get(name).remove(force=True)
