"""The object cache on a remote engine (the DinD engine of tests/engines.py over tcp+TLS)
is repacked once it holds more packs than ``gc.autoPackLimit``: into one pack that keeps
every object, by the run being shipped, before its checkout; never while another run
reads the cache or is being shipped."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from git_iterare.git import repo as repo_mod
from git_iterare.runner.placement import remote as remote_placement
from git_iterare.runner.placement import repack
from git_iterare.runner.placement import ship as shipping
from git_iterare.runner.placement.tarball import members
from git_iterare.sandbox import agent_ids
from git_iterare.sandbox import volumes as remote
from git_iterare.sandbox.engine import TLS, Engine, using
from git_iterare.sandbox.spec import CACHE_PATH, VolumeTrees
from tests.conftest import git
from tests.engines import DindEngine, remove_leftovers
from tests.test_remote_ship import _files, _wait_gone


def test_packs_are_counted_from_the_listing_and_the_limit_is_the_users(repo: Path) -> None:
    r = repo_mod.discover(repo)
    assert repack.packs_held(7, None) == 7
    assert repack.packs_held(7, 5) == 3  # the repack's pack and one a commit since
    assert repack.packs_held(3, 9) == 3  # a marker that cannot be: not believed
    assert repack.pack_limit(r) == repack.PACK_LIMIT == 50
    assert not repack.due(r, 50, None) and repack.due(r, 51, None)
    git("config", "gc.autoPackLimit", "3", cwd=repo)
    assert repack.pack_limit(r) == 3
    assert not repack.due(r, 3, None) and repack.due(r, 4, None)
    assert not repack.due(r, 6, 4)  # 3 packs
    git("config", "gc.autoPackLimit", "0", cwd=repo)  # as git: never
    assert not repack.due(r, 500, None)


def test_the_lock_is_exclusive_only_when_nobody_else_reads(repo: Path) -> None:
    r = repo_mod.discover(repo)
    with repack.reading(r) as lock:
        with lock.alone() as alone:
            assert alone
        with repack.reading(r), lock.alone() as alone:  # another run is starting
            assert not alone
        with lock.alone() as alone:  # and it is shared again afterwards
            assert alone


@pytest.fixture(scope="module")
def remote_image(dind_engine: DindEngine, sandbox_image: str) -> str:
    dind_engine.load_image(sandbox_image)
    return sandbox_image


@pytest.fixture
def engine(dind_engine: DindEngine) -> Iterator[Engine]:
    certs = dind_engine.cert_path
    tls = TLS(True, str(certs / "ca.pem"), str(certs / "cert.pem"), str(certs / "key.pem"))
    with using(Engine("dind-test", dind_engine.tcp_url, tls)) as chosen:
        yield chosen


def _commit(repo: Path, n: int) -> str:
    (repo / f"file{n}.txt").write_text(f"content {n}\n" * 50)
    git("add", ".", cwd=repo)
    git("commit", "-qm", f"commit {n}", cwd=repo)
    return git("rev-parse", "HEAD", cwd=repo).stdout.strip()


def _ship(r: repo_mod.Repo, repo: Path, base: str, image: str) -> shipping.Shipped:
    """Ship a run of ``base`` (its porter checks it out), waiting for its checkout."""
    run_id = f"repack-{uuid.uuid4().hex[:8]}"
    work, gitdir = remote.run_volumes(run_id)
    trees = VolumeTrees(work, gitdir, remote.cache_volume(shipping.cache_key(r)))
    labels = {"dev.iterare.repo": str(repo), "dev.iterare.run": run_id}
    remote_placement.make_volumes(r, trees, labels)
    shipped = shipping.ship(r, run_id, base, trees, image, labels, agent_ids())
    with remote.Porter(image, {gitdir: ("/g", True), work: ("/w", True)}, labels) as reader:
        _wait_gone(reader, f"/g/{shipping.PENDING}")
        assert shipping.DONE in _files(reader.get("/g")), "the checkout failed"
    return shipped


def _cache(image: str, cache: str, script: str) -> str:
    """The output of ``script`` (sh) in a porter over the cache at /git/cache."""
    with remote.Porter(image, {cache: (CACHE_PATH, True)}, {"dev.iterare.repo": "x"},
                       command=["/bin/sh", "-c", f"{{ {script}; }} > /tmp/out 2>&1"],
                       keep=True) as porter:
        porter.start()
        assert porter.wait(120) == 0
        for member, tar in members(porter.get("/tmp/out")):
            handle = tar.extractfile(member)
            assert handle is not None
            return handle.read().decode()
    raise AssertionError("the porter wrote nothing")


def _packs(image: str, cache: str) -> int:
    return int(_cache(image, cache, f"ls {CACHE_PATH}/objects/pack | grep -c '\\.pack$'"))


def test_the_cache_is_repacked_past_the_limit_keeping_every_object(
        repo: Path, hermetic_env: Path, engine: Engine, remote_image: str,
        dind_engine: DindEngine) -> None:
    git("config", "gc.autoPackLimit", "3", cwd=repo)
    r = repo_mod.discover(repo)
    cache = remote.cache_volume(shipping.cache_key(r))
    inner = dind_engine.client()
    try:
        bases = [_commit(repo, n) for n in range(4)]
        shipped = [_ship(r, repo, base, remote_image) for base in bases[:3]]
        assert not any(s.repacked for s in shipped)
        assert _packs(remote_image, cache) == 3  # at the limit: not over it
        fourth = _ship(r, repo, bases[3], remote_image)
        assert fourth.repacked and fourth.objects > 0
        assert _packs(remote_image, cache) == 1
        # Every object of every base is there, in a pack git reads, nothing loose.
        check = " && ".join(
            f"git --git-dir=/tmp/g rev-list --objects --missing=print {b} | grep -c ."
            for b in bases)
        counts = _cache(remote_image, cache,
                        f"git init -q --bare /tmp/g && export GIT_OBJECT_DIRECTORY="
                        f"{CACHE_PATH}/objects && {check} && git --git-dir=/tmp/g "
                        "count-objects -v | grep -E '^(count|packs):'")
        lines = counts.split()
        assert lines[:4] == [str(3 * n + 3) for n in range(1, 5)], counts  # full histories
        assert lines[4:] == ["count:", "0", "packs:", "1"], counts
        # The count goes on from the repack: two packs more, then the third repacks.
        more = [_commit(repo, n) for n in range(4, 7)]
        assert not _ship(r, repo, more[0], remote_image).repacked
        assert not _ship(r, repo, more[1], remote_image).repacked
        assert _packs(remote_image, cache) == 3
        assert _ship(r, repo, more[2], remote_image).repacked
        assert _packs(remote_image, cache) == 1
    finally:
        remove_leftovers(inner, repo)


def test_no_repack_while_another_run_reads_the_cache_or_is_starting(
        repo: Path, hermetic_env: Path, engine: Engine, remote_image: str,
        dind_engine: DindEngine) -> None:
    git("config", "gc.autoPackLimit", "1", cwd=repo)
    r = repo_mod.discover(repo)
    cache = remote.cache_volume(shipping.cache_key(r))
    inner = dind_engine.client()
    try:
        assert not _ship(r, repo, _commit(repo, 0), remote_image).repacked
        # Another run's container reads the cache (its sandbox, created or running).
        other = {"dev.iterare.repo": str(repo), "dev.iterare.run": "other-00000000"}
        with remote.Porter(remote_image, {cache: (CACHE_PATH, True)}, other):
            assert not _ship(r, repo, _commit(repo, 1), remote_image).repacked
            assert _packs(remote_image, cache) == 2
        # Another process of the repository is making a container that reads it.
        with repack.reading(r):
            assert not _ship(r, repo, _commit(repo, 2), remote_image).repacked
        assert _packs(remote_image, cache) == 3
        # Alone: the next run repacks.
        assert _ship(r, repo, _commit(repo, 3), remote_image).repacked
        assert _packs(remote_image, cache) == 1
    finally:
        remove_leftovers(inner, repo)
