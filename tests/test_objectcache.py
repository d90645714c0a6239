"""The host's object cache of a repository (git_iterare.runner.placement.objectcache): a
run's view holds its base's history and nothing else, packed once, by any number of runs
at once; real git in temporary repositories, no Docker."""

from __future__ import annotations

import multiprocessing
import subprocess
from pathlib import Path

import pytest

from git_iterare.errors import OperationFailed
from git_iterare.git import repo as repo_mod
from git_iterare.runner.placement import objectcache
from tests.conftest import git


def commit(repo: Path, name: str, text: str, branch: str | None = None) -> str:
    """Commit ``name`` holding ``text`` (on ``branch``, made from HEAD when new); return
    the commit."""
    if branch is not None:
        git("checkout", "-q", "-B" if branch == "main" else "-b", branch, cwd=repo,
            check=False)
        git("checkout", "-q", branch, cwd=repo)
    (repo / name).write_text(text)
    git("add", name, cwd=repo)
    git("commit", "-qm", f"{name}: {text.strip()}", cwd=repo)
    return head(repo)


def head(repo: Path, rev: str = "HEAD") -> str:
    return git("rev-parse", rev, cwd=repo).stdout.strip()


def reachable(repo: Path, *revs: str) -> set[str]:
    out = git("rev-list", "--objects", *revs, cwd=repo).stdout
    return {line.split()[0] for line in out.splitlines()}


def ids_in(folder: Path) -> set[str]:
    """Ids the pack indexes in ``folder`` list."""
    ids: set[str] = set()
    for index in folder.glob("*.idx"):
        with index.open("rb") as handle:
            out = subprocess.run(["git", "show-index"], stdin=handle, capture_output=True,
                                 text=True, check=True).stdout
        ids |= {line.split()[1] for line in out.splitlines()}
    return ids


def give(repo: Path, base: str, name: str) -> tuple[objectcache.Cached, set[str]]:
    """Give ``base`` to a new view ``name``; return what was done and the view's ids."""
    view = repo / ".git" / "iterare" / "gitdirs" / name
    view.mkdir(parents=True)
    done = objectcache.give(repo_mod.discover(repo), head(repo, base), view)
    assert {p.suffix for p in (view / "pack").iterdir()} <= {".idx", ".pack"}
    return done, ids_in(view / "pack")


def test_a_view_holds_the_bases_history_and_no_other_object(repo: Path) -> None:
    base = commit(repo, "a.txt", "a\n")
    commit(repo, "private.txt", "private\n", branch="private")
    git("checkout", "-q", "main", cwd=repo)
    git("tag", "-a", "-m", "tag message", "v1", "private", cwd=repo)
    (repo / "README.md").write_text("stashed\n")
    git("stash", "-q", cwd=repo)
    git("hash-object", "-w", "--stdin", cwd=repo, input="dangling\n")
    commit(repo, "gone.txt", "gone\n")
    git("reset", "-q", "--hard", "HEAD~1", cwd=repo)
    done, ids = give(repo, "main", "one")
    assert head(repo) == base
    assert ids == reachable(repo, base)
    assert (done.objects, done.packs) == (len(ids), 1)
    assert done.pack_bytes == sum(
        p.stat().st_size for p in (repo / ".git/iterare/object-cache/packs").iterdir())
    # git reads it as the run gitdir does (through alternates): the history complete.
    probe = repo.parent / "probe.git"
    git("init", "-q", "--bare", str(probe), cwd=repo.parent)
    (probe / "objects" / "info" / "alternates").write_text(
        f"{repo}/.git/iterare/gitdirs/one\n")
    listed = git("--git-dir", str(probe), "rev-list", "--objects", base, cwd=repo.parent)
    assert {line.split()[0] for line in listed.stdout.splitlines()} == ids


def test_the_next_base_packs_only_what_is_new_and_the_same_base_nothing(repo: Path) -> None:
    first = head(repo)
    give(repo, first, "one")
    second = commit(repo, "b.txt", "b\n")
    done, ids = give(repo, second, "two")
    assert done.objects == len(reachable(repo, second, f"^{first}")) == 3
    assert (done.packs, ids) == (2, reachable(repo, second))
    again, ids = give(repo, second, "three")
    assert (again.objects, again.pack_bytes, again.packs) == (0, 0, 2)
    assert ids == reachable(repo, second)


def test_a_branch_off_older_history_reuses_the_cached_layers(repo: Path) -> None:
    """A first run from a long history leaves tips along its first parents: a later
    base that forked from that history packs little of it again, and sees nothing of
    the first branch's own commits."""
    for n in range(100):
        commit(repo, f"f{n % 5}.txt", f"{n}\n")
    fork = head(repo, "HEAD~20")
    feature = commit(repo, "feature.txt", "feature\n", branch="feature")
    first, ids = give(repo, "feature", "one")
    assert ids == reachable(repo, feature)
    assert first.packs == 4  # tips at depths 63, 31 and 15, then the base
    git("checkout", "-q", "-b", "other", fork, cwd=repo)
    other = commit(repo, "other.txt", "other\n")
    done, ids = give(repo, "other", "two")
    assert ids == reachable(repo, other)
    assert feature not in ids
    # Only the commits between the tip at depth 31 and the fork are packed again.
    assert done.objects == len(reachable(repo, other, f"^{head(repo, 'feature~31')}"))
    assert done.objects < len(ids) // 4


def test_many_packs_make_a_new_chain(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(objectcache, "MAX_CHAIN", 3)
    for n in range(3):
        give(repo, commit(repo, "a.txt", f"{n}\n"), f"v{n}")
    base = commit(repo, "a.txt", "last\n")
    done, ids = give(repo, base, "last")
    assert ids == reachable(repo, base)
    assert (done.objects, done.packs) == (len(ids), 1)


def test_tips_beyond_the_most_recent_go_with_their_packs(repo: Path,
                                                         monkeypatch: pytest.MonkeyPatch
                                                         ) -> None:
    monkeypatch.setattr(objectcache, "MAX_TIPS", 1)
    monkeypatch.setattr(objectcache, "MAX_CHAIN", 1)  # every base packed whole
    old = head(repo)
    give(repo, old, "old")
    new = commit(repo, "b.txt", "b\n")
    give(repo, new, "new")
    cache = repo / ".git" / "iterare" / "object-cache"
    assert [p.name for p in (cache / "tips").iterdir()] == [new]
    assert ids_in(cache / "packs") == reachable(repo, new)
    # The old view keeps its packs (hard links); the cache packs the old base again.
    assert ids_in(cache.parent / "gitdirs" / "old" / "pack") == reachable(repo, old)
    done, _ = give(repo, old, "old-again")
    assert done.objects == len(reachable(repo, old))


def test_a_tip_whose_pack_is_gone_is_packed_again(repo: Path) -> None:
    base = head(repo)
    give(repo, base, "one")
    packs = repo / ".git" / "iterare" / "object-cache" / "packs"
    next(packs.glob("*.idx")).unlink()
    done, ids = give(repo, base, "two")
    assert (done.objects, ids) == (len(reachable(repo, base)), reachable(repo, base))
    assert len(list(packs.iterdir())) == 2  # the broken one removed


def _give_in_process(args: tuple[str, str, str]) -> tuple[int, int] | str:
    """:func:`objectcache.give` in a process of its own: what it did, or what it raised
    (as text: not every error of ours survives pickling back)."""
    path, base, name = args
    view = Path(path) / ".git" / "iterare" / "gitdirs" / name
    view.mkdir(parents=True)
    try:
        done = objectcache.give(repo_mod.discover(Path(path)), base, view)
    except Exception as exc:  # the test shows it
        return f"{type(exc).__name__}: {exc}"
    return done.objects, done.packs


def test_runs_filling_the_cache_at_once_pack_the_base_once(repo: Path) -> None:
    for n in range(20):
        commit(repo, f"f{n}.txt", f"{n}\n" * 1000)
    base = head(repo)
    with multiprocessing.get_context("fork").Pool(6) as pool:
        results = pool.map(_give_in_process, [(str(repo), base, f"v{n}") for n in range(6)])
    assert [r for r in results if isinstance(r, str)] == []
    packed = [r[0] for r in results if not isinstance(r, str) and r[0]]
    assert packed == [len(reachable(repo, base))]  # one process packed, the others waited
    packs = repo / ".git" / "iterare" / "object-cache" / "packs"
    assert len(list(packs.glob("*.idx"))) == 2
    assert {r[1] for r in results if not isinstance(r, str)} == {2}
    for n in range(6):
        assert ids_in(packs.parent.parent / "gitdirs" / f"v{n}" / "pack") == \
            reachable(repo, base)
    assert [p.name for p in packs.parent.iterdir() if p.name.startswith("tmp-")] == []


def test_a_base_with_a_submodule_packs_its_own_objects(repo: Path, tmp_path: Path) -> None:
    sub = tmp_path / "sub"
    git("init", "-q", "-b", "main", str(sub), cwd=tmp_path)
    commit(sub, "lib.txt", "lib\n")
    git("-c", "protocol.file.allow=always", "submodule", "add", "-q", str(sub), "lib",
        cwd=repo)
    git("commit", "-qm", "add lib", cwd=repo)
    base = head(repo)
    _, ids = give(repo, base, "one")
    assert ids == reachable(repo, base)
    assert head(sub) not in ids  # the gitlink's commit lives in the submodule


def test_remove_takes_the_cache_and_leaves_views(repo: Path) -> None:
    base = head(repo)
    give(repo, base, "one")
    r = repo_mod.discover(repo)
    assert objectcache.remove(r) is True
    assert not (repo / ".git" / "iterare" / "object-cache").exists()
    assert ids_in(repo / ".git" / "iterare" / "gitdirs" / "one" / "pack") == \
        reachable(repo, base)
    assert objectcache.remove(r) is False
    done, _ = give(repo, base, "two")
    assert done.objects == len(reachable(repo, base))


def test_a_cache_that_cannot_be_written_is_one_line(repo: Path) -> None:
    view = repo / ".git" / "iterare" / "gitdirs" / "one"
    view.parent.mkdir(parents=True)
    view.write_text("not a folder\n")
    with pytest.raises(OperationFailed, match=r"^cannot give the run the objects of its base: "
                       rf"{view}/pack: Not a directory$"):
        objectcache.give(repo_mod.discover(repo), head(repo), view)


def test_a_clone_borrowing_objects_gives_the_borrowed_ones_too(repo: Path, tmp_path: Path
                                                                ) -> None:
    """A repository that reads objects from another (``git clone --shared``, alternates):
    its runs' views hold them, where mounting its own object store gave the agent none."""
    clone = tmp_path / "clone"
    git("clone", "-q", "--shared", str(repo), str(clone), cwd=tmp_path)
    assert list((clone / ".git" / "objects" / "pack").iterdir()) == []
    base = commit(clone, "mine.txt", "mine\n")
    _, ids = give(clone, base, "one")
    assert ids == reachable(clone, base)
    assert head(repo) in ids


def test_a_partial_clone_gives_what_it_has_and_fetches_nothing(repo: Path, tmp_path: Path
                                                               ) -> None:
    """A ``--filter=blob:none`` clone lacks its history's old blobs: the view lacks them
    too, rather than the run fetching every one of them from the promisor remote."""
    old = commit(repo, "f.txt", "one\n")
    commit(repo, "f.txt", "two\n")
    git("config", "uploadpack.allowFilter", "true", cwd=repo)
    clone = tmp_path / "partial"
    git("clone", "-q", "--no-local", "--filter=blob:none", f"file://{repo}", str(clone),
        cwd=tmp_path)
    missing = git("rev-parse", f"{old}:f.txt", cwd=repo).stdout.strip()
    before = git("count-objects", "-v", cwd=clone).stdout
    _, ids = give(clone, head(clone), "one")
    assert missing not in ids
    assert head(clone) in ids and git("rev-parse", "HEAD:f.txt", cwd=clone).stdout.strip() in ids
    assert git("count-objects", "-v", cwd=clone).stdout == before  # nothing fetched
