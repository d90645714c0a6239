"""Checking out a run's files on the host, and telling afterwards what the agent changed.

The run's worktree holds the *full* tree of its base commit, whatever the user's own
checkout looks like: sparse checkout (cone or not), ``skip-worktree`` and
``assume-unchanged`` bits belong to the user's worktree and index and are never looked
at. Files are checked out by the host through :mod:`git_iterare.git.safegit` with the
attributes and filter programs :mod:`git_iterare.git.filters` allows (the user's smudge
filters, Git LFS offline, ``ident``, ``text``/``eol``, ``core.autocrlf``).

Initialized submodules (a gitlink in the base whose ``.gitmodules`` name has a
repository under ``<common dir>/modules/<name>`` holding the recorded commit) are
checked out as plain folders at their recorded commits, from that object store; their
``.git`` is left out, so the agent's git sees them as not checked out. Uninitialized
ones stay empty folders, with a warning.

A *checkout map* (``<common dir>/iterare/gitdirs/<id>.checkout``, never mounted into the
sandbox) records for every file checked out: its mode, the blob it came from, and the
git blob id of the bytes written (``raw``; the blob's own when no attribute or
line-ending setting can convert any file, :func:`git_iterare.git.filters.may_convert`,
so a big checkout is not read back to be hashed). At finish a file whose bytes still hash to
``raw`` is unchanged: it is recorded as the blob it came from, byte for byte, with no
filter run on it (:func:`unchanged_entries`). Only files the agent changed are cleaned.
"""

from __future__ import annotations

import hashlib
import os
import re
import stat
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from git_iterare import proc
from git_iterare.git import filters, safegit, statcache
from git_iterare.timings import phase

MAP_VERSION = "iterare-checkout-v1"


@dataclass(frozen=True)
class Entry:
    """A file the host checked out.

    Attributes:
        mode: git mode, ``100644``, ``100755`` or ``120000``.
        blob: hex id of the blob it was checked out from.
        raw: hex git blob id of the bytes written to the worktree (after smudge and
            line-ending conversion), or ``-`` when it could not be read.
        path: relative to the run worktree, ``/``-separated (inside a submodule:
            ``<submodule path>/<path>``).
    """

    mode: str
    blob: str
    raw: str
    path: str


@dataclass(frozen=True)
class Submodule:
    """A gitlink of a commit.

    Attributes:
        path: where it is, relative.
        name: its name in ``.gitmodules`` (None when not named there or not valid).
        commit: the recorded commit, hex.
        gitdir: ``<common dir>/modules/<name>`` when it is initialized there and holds
            ``commit``; else None.
    """

    path: str
    name: str | None
    commit: str
    gitdir: Path | None


@dataclass(frozen=True)
class CheckoutMap:
    """What :func:`populate` checked out (read back by :func:`read_map`).

    Attributes:
        attributes_commit: the trusted commit whose attributes counted, or None.
        entries: the files.
        submodules: gitlinks of the base (initialized or not).
    """

    attributes_commit: str | None
    entries: tuple[Entry, ...]
    submodules: tuple[Submodule, ...]


def raw_id(path: Path) -> str | None:
    """The git blob id of a worktree file's bytes as they are (a symlink: its target);
    None when it is neither a regular file nor a symlink, or cannot be read."""
    try:
        st = os.lstat(path)
        if stat.S_ISLNK(st.st_mode):
            data = os.fsencode(os.readlink(path))
            return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
        if not stat.S_ISREG(st.st_mode):
            return None
        digest = hashlib.sha1(b"blob %d\0" % st.st_size)
        with open(path, "rb", buffering=0) as f:
            size = 0
            while chunk := f.read(1 << 20):
                digest.update(chunk)
                size += len(chunk)
        return digest.hexdigest() if size == st.st_size else None
    except OSError:
        return None


def _git(git_dir: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[Any]:
    return proc.git("--git-dir", str(git_dir), *args, scrub_git_env=True, check=check)


_BAD_NAME = re.compile(r"(^|[/\\])\.\.([/\\]|$)")


def submodules(common_dir: Path, commit: str) -> list[Submodule]:
    """The gitlinks of ``commit``, with their names and where they are initialized.

    Names come from ``commit``'s ``.gitmodules``; a name that is empty, absolute or has a
    ``..`` component counts as none (git refuses such names too).
    """
    listing = _git(common_dir, "ls-tree", "-r", "-z", "--full-tree", commit).stdout
    links = []
    for item in filter(None, listing.split("\0")):
        meta, path = item.split("\t", 1)
        mode, _, sha = meta.split()
        if mode == "160000":
            links.append((path, sha))
    if not links:
        return []
    names: dict[str, str] = {}
    out = _git(common_dir, "config", "--blob", f"{commit}:.gitmodules", "-z",
               "--get-regexp", r"^submodule\..*\.path$", check=False).stdout
    for item in filter(None, out.split("\0")):
        key, _, value = item.partition("\n")
        name = key[len("submodule."):-len(".path")]
        if name and not name.startswith("/") and not _BAD_NAME.search(name):
            names.setdefault(value.strip("/"), name)
    found = []
    modules = common_dir / "modules"
    for path, sha in links:
        name = names.get(path)
        gitdir = None
        if name is not None:
            candidate = modules
            plain = True
            for part in name.split("/"):
                candidate = candidate / part
                plain = plain and not candidate.is_symlink()
            if plain and candidate.is_dir() and _git(
                    candidate, "cat-file", "-e", f"{sha}^{{commit}}",
                    check=False).returncode == 0:
                gitdir = candidate
        found.append(Submodule(path, name, sha, gitdir))
    return found


def _checkout(common_dir: Path, worktree: Path, commit: str, index_file: Path | None, *,
              attributes: str, filter_text: str, objects: Path | None = None,
              prefix: str = "") -> list[Entry]:
    """Check out ``commit`` into ``worktree`` through a hardened view; return its files."""
    with phase("start.checkout"), safegit.safe_git(
            common_dir, worktree, index_file, attributes=attributes, filters=filter_text,
            objects=objects) as view:
        view.git("read-tree", commit)
        view.git("checkout-index", "-a", "-f", "-u", "-q")
        if index_file is not None and "[filter " in filter_text and re.search(
                r"(^|\s)filter=", attributes, re.MULTILINE):
            # Files written in the second the index is written are "racily clean": git
            # would rehash them, and the agent's git (no filter programs in the sandbox,
            # whole-second stat checks) would see every filtered file as changed. So the
            # index is refreshed (through the same filters) once that second is over.
            # Without a filter on any path a rehash finds the same content: no need to
            # wait (the user's config often names Git LFS for every repository).
            time.sleep(1.01 - time.time() % 1)
            view.git("update-index", "-q", "--refresh", check=False)
            view.git("write-tree")  # back into the index: the cache-tree, as checkout has
        listing = view.git("ls-files", "-s", "-z").stdout
    # Without a conversion, every file holds its blob's bytes: nothing to hash.
    exact = not filters.may_convert(attributes, safegit.line_ending_config(common_dir))
    entries = []
    with phase("start.checkout-map"):
        for item in filter(None, listing.split("\0")):
            meta, path = item.split("\t", 1)
            mode, sha, _ = meta.split()
            if mode == "160000":
                continue
            raw = sha if exact else raw_id(worktree / path) or "-"
            entries.append(Entry(mode, sha, raw, prefix + path))
    return entries


def populate(common_dir: Path, worktree: Path, base: str, index_file: Path,
             warn: list[str]) -> CheckoutMap:
    """Check out ``base`` into the empty run worktree, submodules included.

    Args:
        common_dir: the user's repository.
        worktree: the run's worktree (made by ``git worktree add --no-checkout``).
        base: hex commit.
        index_file: the worktree's index (written with the stat data of what was
            checked out).
        warn: receives one line per uninitialized submodule.

    Returns:
        The checkout map (write it with :func:`write_map`).

    Raises:
        ExternalError: git (or a filter of the user's) failed.
    """
    trusted = filters.trusted_commit(common_dir, base)
    entries = _checkout(common_dir, worktree, base, index_file,
                        attributes=filters.attributes_text(common_dir, trusted, common_dir),
                        filter_text=filters.filter_config(common_dir))
    subs = submodules(common_dir, base)
    for sub in subs:
        target = worktree / sub.path
        target.mkdir(parents=True, exist_ok=True)
        if sub.gitdir is None:
            warn.append(f"submodule {sub.path} is not initialized in this repository; its "
                        "folder is empty in the sandbox (`git submodule update --init "
                        f"{sub.path}` first to give it to the agent)")
            continue
        entries.extend(_checkout(
            common_dir, target, sub.commit, None,
            attributes=filters.attributes_text(sub.gitdir, sub.commit, common_dir),
            filter_text=filters.filter_config(sub.gitdir), objects=sub.gitdir / "objects",
            prefix=sub.path + "/"))
    return CheckoutMap(trusted, tuple(entries), tuple(subs))


def engine_map(common_dir: Path, base: str) -> CheckoutMap:
    """The checkout map of ``base`` as git without filter programs writes it (a remote
    engine's checkout: :mod:`git_iterare.runner.placement.ship`): every file's ``raw`` is its blob
    id, so at finish a file still holding exactly its blob's bytes is recorded as that
    blob, and any other is cleaned as on a local run. Gitlinks are listed as submodules.

    Raises:
        ExternalError: git failed.
    """
    trusted = filters.trusted_commit(common_dir, base)
    listing = _git(common_dir, "ls-tree", "-r", "-z", "--full-tree", base).stdout
    entries = []
    for item in filter(None, listing.split("\0")):
        meta, path = item.split("\t", 1)
        mode, kind, sha = meta.split()
        if kind == "blob" and mode in ("100644", "100755", "120000"):
            entries.append(Entry(mode, sha, sha, path))
    return CheckoutMap(trusted, tuple(entries), tuple(submodules(common_dir, base)))


#: The attributes that may make a file's checked-out bytes differ from its blob's.
_CONVERTING = ("filter", "text", "eol", "ident", "working-tree-encoding", "crlf")


def converted(common_dir: Path, base: str, folder: Path, sub: Submodule | None = None
              ) -> list[Entry]:
    """The files of ``base`` whose checkout on the host (the user's filters, Git LFS
    offline, line endings: as :func:`populate` writes them) differs from their blob,
    written into the empty ``folder`` at their paths; none, with no git started for the
    tree, when nothing can convert (:func:`git_iterare.git.filters.may_convert`).
    With ``sub`` (initialized), those of that submodule at its commit instead (``base``
    is not read), their paths below its own.

    Returns:
        Their entries (``raw``: the git blob id of the bytes written; paths from the
        top of the run's worktree, a submodule's with its path before them).

    Raises:
        ExternalError: git (or a filter of the user's) failed.
    """
    if sub is None or sub.gitdir is None:
        attributes = filters.attributes_text(
            common_dir, filters.trusted_commit(common_dir, base), common_dir)
        filter_text, objects, prefix = filters.filter_config(common_dir), None, ""
    else:
        base = sub.commit
        attributes = filters.attributes_text(sub.gitdir, sub.commit, common_dir)
        filter_text, objects = filters.filter_config(sub.gitdir), sub.gitdir / "objects"
        prefix = sub.path + "/"
    line_endings = safegit.line_ending_config(common_dir)
    if not filters.may_convert(attributes, line_endings):
        return []
    every = "autocrlf" in line_endings and "autocrlf = false" not in line_endings
    with safegit.safe_git(common_dir, folder, attributes=attributes, filters=filter_text,
                          objects=objects) as view:
        view.git("read-tree", base)
        listing = view.git("ls-files", "-s", "-z").stdout
        blobs = {}
        for item in filter(None, listing.split("\0")):
            meta, path = item.split("\t", 1)
            mode, sha, _ = meta.split()
            if mode in ("100644", "100755"):
                blobs[path] = (mode, sha)
        if not blobs:
            return []
        wanted = list(blobs)
        if not every:
            told = view.git("check-attr", "-z", "--cached", "--stdin", *_CONVERTING,
                            input="".join(p + "\0" for p in wanted)).stdout.split("\0")
            wanted = list(dict.fromkeys(
                told[i] for i in range(0, len(told) - 2, 3)
                if told[i + 2] not in ("unspecified", "unset")))
        if not wanted:
            return []
        view.git("checkout-index", "-f", "-q", "-z", "--stdin",
                 input="".join(p + "\0" for p in wanted))
    entries = []
    for path in wanted:
        mode, sha = blobs[path]
        raw = raw_id(folder / path)
        if raw is not None and raw != sha:
            entries.append(Entry(mode, sha, raw, prefix + path))
        else:
            (folder / path).unlink(missing_ok=True)
    return entries


def write_map(path: Path, checkout_map: CheckoutMap) -> None:
    """Store ``checkout_map`` at ``path`` (NUL-separated records, written atomically)."""
    out = [f"{MAP_VERSION} {checkout_map.attributes_commit or '-'}".encode()]
    for sub in checkout_map.submodules:
        out.append(b"S " + f"{sub.commit} {sub.name or ''}".encode("utf-8", "surrogateescape")
                   + b"\t" + os.fsencode(sub.path))
    for e in checkout_map.entries:
        out.append(f"F {e.mode} {e.blob} {e.raw}\t".encode() + os.fsencode(e.path))
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(b"\0".join(out) + b"\0")
    os.replace(tmp, path)


def read_map(path: Path, common_dir: Path) -> CheckoutMap | None:
    """Read what :func:`write_map` stored; None when there is nothing (a run prepared by
    an older git-iterare) or it does not parse."""
    try:
        data = path.read_bytes()
    except OSError:
        return None
    records = data.split(b"\0")
    head = records[0].decode("ascii", "replace").split()
    if len(head) != 2 or head[0] != MAP_VERSION:
        return None
    entries, subs = [], []
    for rec in filter(None, records[1:]):
        meta, _, raw_path = rec.partition(b"\t")
        path_str = os.fsdecode(raw_path)
        kind, _, rest = meta.decode("utf-8", "surrogateescape").partition(" ")
        if kind == "F":
            mode, blob, raw = rest.split(" ")
            entries.append(Entry(mode, blob, raw, path_str))
        elif kind == "S":
            commit, _, name = rest.partition(" ")
            gitdir = common_dir / "modules" / name if name else None
            subs.append(Submodule(path_str, name or None, commit,
                                  gitdir if gitdir is not None and gitdir.is_dir() else None))
    return CheckoutMap(None if head[1] == "-" else head[1], tuple(entries), tuple(subs))


def unchanged_entries(worktree: Path, entries: Sequence[Entry], prefix: str = "",
                      untouched: Mapping[str, statcache.Key] | None = None
                      ) -> list[tuple[str, str, str]]:
    """``(mode, blob, path)`` of the entries under ``prefix`` whose file still holds the
    bytes checked out, with the same kind and executable bit (paths made relative to
    ``prefix``). A file ``untouched`` names (by its entry's path; see
    :func:`git_iterare.git.statcache.untouched`) is neither read nor looked at again: its
    kind and mode are the key's, taken once the agent had ended, and what came after (the
    trees given back) changes no file's bytes. Any other is hashed."""
    untouched = untouched or {}
    found = []
    top = os.fspath(worktree)
    for e in entries:
        if not e.path.startswith(prefix) or e.raw == "-":
            continue
        rel = e.path[len(prefix):]
        key = untouched.get(e.path)
        if key is not None:
            if _same_kind(e.mode, key[4]):
                found.append((e.mode, e.blob, rel))
            continue
        path = f"{top}/{rel}"
        try:
            st = os.lstat(path)
        except OSError:
            continue
        if _same_kind(e.mode, st.st_mode) and raw_id(Path(path)) == e.raw:
            found.append((e.mode, e.blob, rel))
    return found


def _same_kind(mode: str, st_mode: int) -> bool:
    """Whether a file of mode ``st_mode`` (``st_mode`` of ``lstat``) is what an index entry
    of ``mode`` (``100644``, ``100755``, ``120000``) checks out: a symlink, or a regular
    file with the entry's executable bit (the owner's)."""
    if mode == "120000":
        return stat.S_ISLNK(st_mode)
    return stat.S_ISREG(st_mode) and bool(st_mode & 0o100) == (mode == "100755")


@dataclass(frozen=True)
class FinishPlan:
    """How to snapshot a run's worktree faithfully (see :func:`plan_snapshot`).

    Attributes:
        attributes: ``info/attributes`` text for the superproject's view.
        filter_text: the user's filter drivers (config text).
        unchanged: ``(mode, blob, path)`` of files still as checked out.
        gitlinks: ``(commit, path)`` of submodules whose files the agent changed.
        skipped: paths not committed (files in uninitialized submodules).
        pending: work that is not on a branch yet (for cleanup's check).
        submodule_paths: paths of the base's gitlinks.
        scan: what the walk of the worktree found (its nested repositories disabled
            since): pass it to :func:`git_iterare.git.safegit.safe_git` for the snapshot,
            which then need not walk the worktree again.
    """

    attributes: str
    filter_text: str
    unchanged: tuple[tuple[str, str, str], ...]
    gitlinks: tuple[tuple[str, str], ...]
    skipped: tuple[safegit.Skipped, ...]
    pending: tuple[str, ...]
    submodule_paths: tuple[str, ...]
    scan: safegit.TreeScan


ZERO = "0" * 40


def _has_files(folder: Path) -> bool:
    try:
        return folder.is_dir() and not folder.is_symlink() and any(
            name not in (".git", safegit.DISABLED_GIT) for name in os.listdir(folder))
    except OSError:
        return False


def plan_snapshot(common_dir: Path, worktree: Path, base: str, map_path: Path, ref: str, *,
                  commit: bool, message: str = "", env: dict[str, str] | None = None,
                  untouched: Path | None = None) -> FinishPlan:
    """Work out what the automatic commit of a run's worktree records.

    With ``commit``, the agent's changes inside each initialized submodule are committed
    in that submodule's repository (``<common dir>/modules/<name>``), on ``ref``
    (``refs/heads/iterare/<id>``, created at the recorded commit; moved with its old
    value given), and the new commit is returned in :attr:`FinishPlan.gitlinks`. Without,
    nothing is written and such changes are listed in :attr:`FinishPlan.pending`.

    Args:
        common_dir: the user's repository.
        worktree: the run's worktree (the agent has stopped).
        base: the run's base commit (for a run prepared before checkout maps existed).
        map_path: the run's checkout map.
        ref: the run's branch ref name, also used in submodules.
        commit: write submodule commits.
        message: their message (with trailers).
        env: ``GIT_AUTHOR_*``/``GIT_COMMITTER_*`` for them.
        untouched: what :func:`git_iterare.git.statcache.untouched` wrote as the trees
            were given back: those files are not read again. Used once (removed here).

    Raises:
        ExternalError: git failed.
        OperationFailed: a submodule's run branch moved meanwhile.
    """
    checkout_map = read_map(map_path, common_dir)
    if checkout_map is None:  # prepared by an older version: git worktree add did it
        attributes_commit: str | None = base
        entries: tuple[Entry, ...] = ()
        subs: tuple[Submodule, ...] = tuple(submodules(common_dir, base))
    else:
        attributes_commit = checkout_map.attributes_commit
        entries, subs = checkout_map.entries, checkout_map.submodules
    kept: dict[str, statcache.Key] = {}
    if untouched is not None:
        kept = statcache.load(untouched) if checkout_map is not None else {}
        untouched.unlink(missing_ok=True)  # true of these ctimes only: never again
    # Nested repositories (a .git the agent made, in a submodule folder or elsewhere) are
    # disabled before any git looks below the top.
    with phase("scan-worktree"):
        scan = safegit.scan_worktree(worktree, bounded=False, known=kept)
    safegit.disable_nested_repos(worktree, scan.nested)
    gitlinks: list[tuple[str, str]] = []
    skipped: list[safegit.Skipped] = []
    pending: list[str] = []
    for sub in subs:
        folder = worktree / sub.path
        if sub.gitdir is None:
            if _has_files(folder):
                skipped.append(safegit.Skipped(
                    sub.path, "submodule not initialized here: its files are kept in the "
                    "run's worktree only", excluded=False))
                pending.append(f"files in submodule {sub.path}, which is not initialized "
                               "here, are not committed")
            continue
        if not folder.is_dir() or folder.is_symlink():
            continue
        head = _git(sub.gitdir, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}",
                    check=False).stdout.strip() or None
        parent = head or sub.commit
        with safegit.safe_git(common_dir, folder,
                              attributes=filters.attributes_text(sub.gitdir, sub.commit,
                                                                 common_dir),
                              filters=filters.filter_config(sub.gitdir),
                              objects=sub.gitdir / "objects") as view:
            tree = view.snapshot(parent, unchanged=unchanged_entries(
                folder, entries, sub.path + "/", kept))
            if tree == _git(sub.gitdir, "rev-parse", f"{parent}^{{tree}}").stdout.strip():
                if head is not None and head != sub.commit:
                    gitlinks.append((head, sub.path))
                continue
            if not commit:
                pending.append(f"submodule {sub.path} has uncommitted changes")
                continue
            new = proc.git("commit-tree", tree, "-p", parent, "-F", "-", cwd=view.scratch,
                           env={**view.env(), **(env or {})}, scrub_git_env=True,
                           input=message).stdout.strip()
        _git(sub.gitdir, "-c", "core.hooksPath=/dev/null", "update-ref", "-m",
             f"iterare: work of the run in submodule {sub.path}", ref, new, head or ZERO)
        gitlinks.append((new, sub.path))
    with phase("finish.unchanged"):
        unchanged = tuple(unchanged_entries(worktree, [
            e for e in entries if not any(e.path.startswith(s.path + "/") for s in subs)],
            untouched=kept))
    return FinishPlan(
        attributes=filters.attributes_text(common_dir, attributes_commit, common_dir),
        filter_text=filters.filter_config(common_dir), unchanged=unchanged,
        gitlinks=tuple(gitlinks), skipped=tuple(skipped), pending=tuple(pending),
        submodule_paths=tuple(s.path for s in subs), scan=scan)
