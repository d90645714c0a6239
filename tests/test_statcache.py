"""The finish's stat cache (git_iterare.git.statcache): a file the agent did not touch is
not read again, and what the commit records is exactly what hashing every file gives, on
trees changed in every way an agent can (same size and mtime, chmod, symlink swaps,
renames, hard links, a file turned folder, writes in the tick after the hand-over)."""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from git_iterare.git import checkout, statcache
from git_iterare.git.checkout import Entry, raw_id

OLD = 1_600_000_000_000_000_000  # the mtime every file gets at checkout (ns)


def blob_id(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def make_tree(top: Path, count: int = 40) -> list[Entry]:
    """``count`` files of 100 bytes, a script and two symlinks, as a checkout writes them."""
    entries = []
    for i in range(count):
        path = f"d{i % 4}/f{i:03}"
        data = (f"file {i:03} ".encode() * 20)[:100]
        (top / path).parent.mkdir(parents=True, exist_ok=True)
        (top / path).write_bytes(data)
        os.utime(top / path, ns=(OLD, OLD))
        entries.append(Entry("100644", blob_id(data), blob_id(data), path))
    (top / "run.sh").write_bytes(b"#!/bin/sh\necho hi\n")
    (top / "run.sh").chmod(0o755)
    entries.append(Entry("100755", blob_id(b"#!/bin/sh\necho hi\n"),
                         blob_id(b"#!/bin/sh\necho hi\n"), "run.sh"))
    for name, target in (("la", "d0/f000"), ("lb", "d1/f001")):
        os.symlink(target, top / name)
        entries.append(Entry("120000", blob_id(target.encode()), blob_id(target.encode()),
                             name))
    return entries


def hand_over(top: Path, out: Path) -> Path:
    """What the sidecar does before the agent starts: every file chowned (its ctime
    moves), then the stamp, then a wait until the clock has moved past it."""
    for folder, dirs, files in os.walk(top):
        for name in (*dirs, *files):
            os.chown(os.path.join(folder, name), os.getuid(), os.getgid(),
                     follow_symlinks=False)
    out.mkdir(exist_ok=True)
    stamp = out / statcache.STAMP
    stamp.write_bytes(b"")
    tick = out / "tick"
    while True:
        tick.touch()
        if tick.stat().st_mtime_ns > stamp.stat().st_mtime_ns:
            break
        time.sleep(0.001)
    tick.unlink()
    return stamp


def same_size_same_mtime(top: Path) -> list[str]:
    path = top / "d0/f004"
    data = path.read_bytes()
    path.write_bytes(data[:-1] + b"!")
    os.utime(path, ns=(OLD, OLD))
    return ["d0/f004"]


def chmod_x(top: Path) -> list[str]:
    (top / "d1/f005").chmod(0o755)
    return ["d1/f005"]


def chmod_and_back(top: Path) -> list[str]:
    (top / "d1/f009").chmod(0o600)
    (top / "d1/f009").chmod(0o644)
    return []  # the same file, same bytes: unchanged both ways


def script_loses_x(top: Path) -> list[str]:
    (top / "run.sh").chmod(0o644)
    return ["run.sh"]


def symlink_swap(top: Path) -> list[str]:
    # Same length targets: only what the link says differs.
    (top / "la").unlink()
    os.symlink("d1/f001", top / "la")
    (top / "lb").unlink()
    os.symlink("d0/f000", top / "lb")
    for name in ("la", "lb"):
        os.utime(top / name, ns=(OLD, OLD), follow_symlinks=False)
    return ["la", "lb"]


def rename_swap(top: Path) -> list[str]:
    a, b, tmp = top / "d2/f002", top / "d2/f006", top / "d2/tmp"
    os.rename(a, tmp)
    os.rename(b, a)
    os.rename(tmp, b)
    return ["d2/f002", "d2/f006"]


def rename_away_and_back(top: Path) -> list[str]:
    os.rename(top / "d2/f010", top / "d2/elsewhere")
    os.rename(top / "d2/elsewhere", top / "d2/f010")
    return []


def hard_link_over(top: Path) -> list[str]:
    (top / "d3/f007").unlink()
    os.link(top / "d3/f003", top / "d3/f007")
    return ["d3/f007"]


def hard_link_then_write(top: Path) -> list[str]:
    os.link(top / "d3/f011", top / "outside-link")
    data = (top / "outside-link").read_bytes()
    with open(top / "outside-link", "r+b") as f:  # the same inode as d3/f011
        f.write(b"X" + data[1:])
    os.utime(top / "d3/f011", ns=(OLD, OLD))
    (top / "outside-link").unlink()
    return ["d3/f011"]


def file_to_dir(top: Path) -> list[str]:
    (top / "d0/f008").unlink()
    (top / "d0/f008").mkdir()
    (top / "d0/f008/inner").write_bytes(b"x")
    return ["d0/f008"]


def replaced_same_bytes_and_mtime(top: Path) -> list[str]:
    # A new inode with the very bytes: unchanged either way (hashed, not trusted).
    path = top / "d1/f013"
    data = path.read_bytes()
    path.unlink()
    path.write_bytes(data)
    os.utime(path, ns=(OLD, OLD))
    return []


def replaced_other_bytes_reused_inode(top: Path) -> list[str]:
    # Freed inode numbers are often given to the next file: inode and size as recorded.
    path = top / "d2/f014"
    data = path.read_bytes()
    path.unlink()
    path.write_bytes(data[:-1] + b"?")
    os.utime(path, ns=(OLD, OLD))
    return ["d2/f014"]


def deleted(top: Path) -> list[str]:
    (top / "d3/f015").unlink()
    return ["d3/f015"]


def racy_write(top: Path) -> list[str]:
    # Right after the hand-over, in the first tick the agent can have.
    path = top / "d0/f016"
    with open(path, "r+b") as f:
        f.write(b"R")
    os.utime(path, ns=(OLD, OLD))
    return ["d0/f016"]


CHANGES: list[Callable[[Path], list[str]]] = [
    racy_write, same_size_same_mtime, chmod_x, chmod_and_back, script_loses_x, symlink_swap,
    rename_swap, rename_away_and_back, hard_link_over, hard_link_then_write, file_to_dir,
    replaced_same_bytes_and_mtime, replaced_other_bytes_reused_inode, deleted]


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The paths checkout hashes, in order."""
    seen: list[str] = []

    def spy(path: Path) -> str | None:
        seen.append(str(path))
        return raw_id(path)

    monkeypatch.setattr(checkout, "raw_id", spy)
    return seen


def test_every_kind_of_change_gives_what_a_full_rehash_gives(tmp_path: Path,
                                                              counted: list[str]) -> None:
    top = tmp_path / "tree"
    top.mkdir()
    entries = make_tree(top)
    recorded, kept = tmp_path / "rec.stat", tmp_path / "rec.untouched"
    statcache.record(top, (e.path for e in entries), recorded)
    stamp = hand_over(top, tmp_path / "out")
    changed = [path for change in CHANGES for path in change(top)]
    statcache.untouched(top, recorded, stamp, kept)
    fast = checkout.unchanged_entries(top, entries, untouched=statcache.load(kept))
    hashed_fast = len(counted)
    full = checkout.unchanged_entries(top, entries)
    assert fast == full
    assert {p for _, _, p in full}.isdisjoint(changed)
    # Every changed path is looked at; the untouched ones are not read at all.
    assert hashed_fast <= len(CHANGES) + 4
    assert len(full) > len(entries) - len(CHANGES) - 4


def test_each_change_alone(tmp_path: Path) -> None:
    for n, change in enumerate(CHANGES):
        top = tmp_path / f"tree{n}"
        top.mkdir()
        entries = make_tree(top)
        recorded, kept = tmp_path / f"{n}.stat", tmp_path / f"{n}.untouched"
        statcache.record(top, (e.path for e in entries), recorded)
        stamp = hand_over(top, tmp_path / f"out{n}")
        changed = change(top)
        statcache.untouched(top, recorded, stamp, kept)
        fast = checkout.unchanged_entries(top, entries, untouched=statcache.load(kept))
        assert fast == checkout.unchanged_entries(top, entries), change.__name__
        assert not {p for _, _, p in fast} & set(changed), change.__name__


@pytest.mark.parametrize("why", ["no stamp", "stamp not a file", "no record"])
def test_nothing_is_trusted_without_a_stamp_or_a_record(tmp_path: Path, why: str) -> None:
    top = tmp_path / "tree"
    top.mkdir()
    entries = make_tree(top, 4)
    recorded, kept = tmp_path / "rec.stat", tmp_path / "rec.untouched"
    if why != "no record":
        statcache.record(top, (e.path for e in entries), recorded)
    stamp = hand_over(top, tmp_path / "out")
    if why == "no stamp":
        stamp.unlink()
    elif why == "stamp not a file":
        stamp.unlink()
        stamp.mkdir()
    assert statcache.untouched(top, recorded, stamp, kept) == 0
    assert statcache.load(kept) == {}


def test_untouched_files_are_trusted(tmp_path: Path) -> None:
    """The cache does its job: nothing changed, nothing read."""
    top = tmp_path / "tree"
    top.mkdir()
    entries = make_tree(top, 10)
    recorded, kept = tmp_path / "rec.stat", tmp_path / "rec.untouched"
    statcache.record(top, (e.path for e in entries), recorded)
    stamp = hand_over(top, tmp_path / "out")
    assert statcache.untouched(top, recorded, stamp, kept) == len(entries)
    loaded = statcache.load(kept)
    assert set(loaded) == {e.path for e in entries}


def test_files_given_back_after_the_check_are_still_trusted(tmp_path: Path,
                                                            counted: list[str]) -> None:
    """The trees are chowned back (every ctime moves) after :func:`untouched` looked: the
    commit still takes the untouched files without reading them, and a path changed
    before the look is still hashed."""
    top = tmp_path / "tree"
    top.mkdir()
    entries = make_tree(top, 20)
    recorded, kept = tmp_path / "rec.stat", tmp_path / "rec.untouched"
    statcache.record(top, (e.path for e in entries), recorded)
    stamp = hand_over(top, tmp_path / "out")
    changed = replaced_other_bytes_reused_inode(top)
    statcache.untouched(top, recorded, stamp, kept)
    hand_over(top, tmp_path / "back")  # the chown back
    fast = checkout.unchanged_entries(top, entries, untouched=statcache.load(kept))
    assert [Path(p).relative_to(top).as_posix() for p in counted] == changed
    assert fast == checkout.unchanged_entries(top, entries)
    assert len(fast) == len(entries) - 1


def test_untouched_files_are_not_looked_at_again(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """Once :func:`statcache.untouched` kept a file, neither the commit's check of the
    checked-out files nor the walk for what git must not take looks at it again (no
    ``lstat``); the changed file and the new one still are."""
    from git_iterare.git import safegit

    top = tmp_path / "tree"
    top.mkdir()
    entries = make_tree(top, 12)
    recorded, kept = tmp_path / "rec.stat", tmp_path / "rec.untouched"
    statcache.record(top, (e.path for e in entries), recorded)
    stamp = hand_over(top, tmp_path / "out")
    changed = same_size_same_mtime(top)
    (top / "d0/new").write_bytes(b"new\n")
    statcache.untouched(top, recorded, stamp, kept)
    keys = statcache.load(kept)
    assert changed[0] not in keys and len(keys) == len(entries) - 1
    looked: list[str] = []
    real_lstat = os.lstat

    def spy(path: str | os.PathLike[str], *args: object, **kwargs: object
            ) -> os.stat_result:
        looked.append(os.fspath(path))
        return real_lstat(path)

    monkeypatch.setattr(os, "lstat", spy)
    fast = checkout.unchanged_entries(top, entries, untouched=keys)
    assert set(looked) == {f"{top}/{changed[0]}"}  # (hashing it looks again)
    monkeypatch.setattr(os, "lstat", real_lstat)
    assert fast == checkout.unchanged_entries(top, entries)
    # The walk sizes only the regular files it has no key of: the changed one, the new
    # one. A key's size is what it goes by (here one over the limit, as a test of that).
    from git_iterare import limits

    monkeypatch.setattr(limits, "MAX_OBJECT_BYTES", 100)
    big = dict(keys)
    first = next(p for p in big if p.startswith("d1/"))
    big[first] = (*big[first][:2], 101, *big[first][3:])
    scan = safegit.scan_worktree(top, known=big)
    assert [s.path for s in scan.skipped] == [first]
    assert [s.path for s in safegit.scan_worktree(top).skipped] == []


def test_the_walk_for_nested_repositories_alone_sizes_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``sizes=False`` (the landing's walk): the nested repositories all the same, no
    file skipped for its size, and special files still named."""
    from git_iterare import limits
    from git_iterare.git import safegit

    top = tmp_path / "tree"
    (top / "a" / "inner" / ".git").mkdir(parents=True)
    (top / "a" / "big").write_bytes(b"x" * 200)
    (top / "b" / ".git.disabled-by-iterare").mkdir(parents=True)
    os.mkfifo(top / "fifo")
    monkeypatch.setattr(limits, "MAX_OBJECT_BYTES", 100)
    whole = safegit.scan_worktree(top)
    alone = safegit.scan_worktree(top, sizes=False)
    assert whole.nested == alone.nested == ("a/inner", "b")
    assert [s.path for s in whole.skipped] == ["a/big", "fifo"]
    assert [(s.path, s.reason) for s in alone.skipped] == [("fifo", "a FIFO")]
    assert safegit.find_nested_repos(top) == ["a/inner", "b"]
