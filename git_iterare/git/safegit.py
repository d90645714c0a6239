"""Running git over a worktree the agent wrote, without executing anything it wrote.

A run's worktree is agent-controlled content: it may hold a ``.gitattributes`` naming a
filter, ``.git`` files or directories in subdirectories (nested repositories whose config
could set ``core.fsmonitor``), symlinks pointing outside. The run's own gitdir is agent
controlled too. So whenever the host needs git's view of such a worktree (to build the
run gitdir's index, to commit what the agent left uncommitted, to tell whether a worktree
is dirty) it uses a *scratch gitdir* made here, never the run gitdir and never discovery:

* ``GIT_DIR`` is a fresh directory under ``<common dir>/iterare/tmp`` holding only a
  minimal config of ours (``core.hooksPath=/dev/null``, ``core.fsmonitor=false``; the
  user's ``core.autocrlf``/``core.eol`` carried over; filter drivers only when the caller
  passes the user's, see :mod:`git_iterare.git.filters`), ``info/attributes`` that unsets
  ``filter`` for every path or, when the caller passes one, the text built from a trusted
  commit's attributes (``$GIT_DIR/info/attributes`` beats every ``.gitattributes`` in the
  tree), and ``info/exclude`` listing nested repositories.
  Line-ending and encoding attributes (``text``, ``eol``, ``working-tree-encoding``,
  ``ident``) stay in force: they run no program, and without them a CRLF checkout would
  be committed as a rewrite of every line;
* system and global config are not read (``GIT_CONFIG_NOSYSTEM``, ``GIT_CONFIG_GLOBAL=/dev/null``),
  nor ``git -c`` parameters;
* ``GIT_WORK_TREE``, ``GIT_INDEX_FILE`` and ``GIT_OBJECT_DIRECTORY`` (the main repository's
  object store: objects are inert data) are given explicitly, so a ``.git`` file or symlink
  in the worktree cannot redirect git, and git's ownership check (``safe.directory``),
  which applies to discovered repositories only, does not refuse a worktree chowned to the
  agent's uid;
* only plumbing runs (``read-tree``, ``add``, ``rm --cached``, ``write-tree``,
  ``update-index``): no hooks, no status recursion into nested repositories.

Nested repositories (a directory below the top holding a ``.git`` entry) are excluded:
their files stay in the worktree but are not committed; callers report them. Their
``.git`` is renamed (:func:`disable_nested_repos`), since git would otherwise read their
agent-written config when it meets them as submodules. Names git refuses to record (a
``.GIT`` directory, ``git~1``, a symlinked ``.gitmodules``: :mod:`~git_iterare.git.pathnames`)
are excluded the same way, since one of them fails the whole ``git add``.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from git_iterare import proc
from git_iterare.errors import OperationFailed
from git_iterare.git import statcache
from git_iterare.timings import phase

SCRATCH_CONFIG = """\
[core]
\trepositoryformatversion = 0
\tbare = false
\tfilemode = true
\tsymlinks = true
\tignorecase = false
\tautocrlf = false
\tsafecrlf = false
\thooksPath = /dev/null
\tfsmonitor = false
\tuntrackedCache = false
\tsplitIndex = false
\tsparseCheckout = false
\tprotectNTFS = true
\tattributesFile = /dev/null
\texcludesFile = /dev/null
[submodule]
\trecurse = false
[index]
\tthreads = 1
"""

#: Unset the one attribute that makes ``git add``/``read-tree`` run a program (clean and
#: smudge filters); diff and merge drivers are never used by the plumbing run here.
SCRATCH_ATTRIBUTES = "* -filter\n"

#: The user's settings copied into our configs, with the values git accepts.
LINE_ENDING_KEYS = {"core.autocrlf": ("true", "false", "input"),
                    "core.eol": ("lf", "crlf", "native")}


def line_ending_config(common_dir: Path) -> str:
    """A ``[core]`` section with the user's ``core.autocrlf`` and ``core.eol`` (when set).

    Read from the user's repository (all of git's config files), so text committed from
    the run worktree is converted as the user's own ``git add`` would convert it.
    """
    lines = []
    for key, allowed in LINE_ENDING_KEYS.items():
        result = proc.git("--git-dir", str(common_dir), "config", "--get", key,
                          scrub_git_env=True, check=False)
        value = result.stdout.strip().lower()
        if result.returncode == 0 and value in allowed:
            lines.append(f"\t{key.split('.')[1]} = {value}\n")
    return "[core]\n" + "".join(lines) if lines else ""


#: What a nested repository's ``.git`` is renamed to (see :func:`disable_nested_repos`).
DISABLED_GIT = ".git.disabled-by-iterare"

#: How a :class:`Skipped` reason for a name git refuses begins (the rule follows).
REFUSED_REASON = "a name git refuses to commit"


@dataclass(frozen=True)
class Skipped:
    """A path of the worktree the automatic commit leaves out.

    Attributes:
        path: relative to the worktree, ``/``-separated.
        reason: why, e.g. ``a FIFO``, ``larger than MAX_OBJECT_BYTES (104857600 bytes)``.
        excluded: it needs an ``info/exclude`` line (git would take it otherwise; git
            leaves untracked FIFOs, sockets and devices alone by itself).
    """

    path: str
    reason: str
    excluded: bool


@dataclass(frozen=True)
class TreeScan:
    """What :func:`scan_worktree` found.

    Attributes:
        nested: nested repositories (relative paths), sorted.
        skipped: paths left out of the commit, sorted by path.
    """

    nested: tuple[str, ...]
    skipped: tuple[Skipped, ...]


def _special_kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "not a regular file, symlink or directory"


def scan_worktree(worktree: Path, *, bounded: bool = True,
                  known: Mapping[str, statcache.Key] | None = None, sizes: bool = True
                  ) -> TreeScan:
    """Walk ``worktree`` (iteratively, symlinks not followed) for what git must not take.

    Finds nested repositories (a directory below the top holding ``.git`` or
    :data:`DISABLED_GIT`; not entered), names git refuses to commit (any case of ``.git``
    and its other aliases, see :mod:`git_iterare.git.pathnames`; directories not entered),
    FIFOs, sockets and devices, files larger than
    :data:`~git_iterare.limits.MAX_OBJECT_BYTES`, directories deeper than
    :data:`~git_iterare.limits.MAX_TREE_DEPTH` and paths longer than
    :data:`~git_iterare.limits.MAX_PATH_BYTES` (not entered). Nothing is opened or read;
    the kind of an entry comes from its directory (``d_type``), so only regular files
    are looked at, for their size.

    Args:
        worktree: the top of the tree.
        bounded: refuse a tree with too many excluded paths (see Raises).
        known: keys (:func:`git_iterare.git.statcache.key_of`) of files whose size is
            known and cannot have changed since, by relative path
            (:func:`git_iterare.git.statcache.untouched`): not looked at.
        sizes: False: no regular file is looked at and none is skipped for its size (for
            a caller that wants the nested repositories only).

    Raises:
        OperationFailed: more than :data:`~git_iterare.limits.MAX_EXCLUDED_PATHS` paths
            need excluding (unless not ``bounded``).
    """
    from git_iterare import limits as lim
    from git_iterare.git.pathnames import gitmodules_dir, refused_name

    nested: list[str] = []
    skipped: list[Skipped] = []
    excluded = 0
    known = known or {}

    def skip(rel: str, reason: str, exclude: bool) -> None:
        nonlocal excluded
        skipped.append(Skipped(rel, reason, exclude))
        excluded += exclude
        if bounded and excluded > lim.MAX_EXCLUDED_PATHS:
            _too_many_excluded(worktree)

    top = os.fspath(worktree)
    # Paths are opened from the top: the whole path must fit in PATH_MAX (4096).
    max_path = min(lim.MAX_PATH_BYTES, 4095 - len(os.fsencode(top)) - 1)
    # (path, relative path, depth, below a directory git refuses symlinks under)
    stack: list[tuple[str, str, int, bool]] = [(top, "", 0, False)]
    while stack:
        here, rel_here, depth, in_modules = stack.pop()
        try:
            with os.scandir(here) as it:
                entries = list(it)
        except OSError:
            continue
        names = {e.name for e in entries}
        if rel_here and (".git" in names or DISABLED_GIT in names):
            nested.append(rel_here)
            continue
        for entry in entries:
            if not rel_here and entry.name in (".git", DISABLED_GIT):
                continue
            rel = f"{rel_here}/{entry.name}" if rel_here else entry.name
            try:
                link = entry.is_symlink()
                folder = not link and entry.is_dir(follow_symlinks=False)
                regular = not link and not folder and entry.is_file(follow_symlinks=False)
            except OSError:
                continue
            refused = refused_name(os.fsencode(entry.name), symlink=link,
                                   below_gitmodules=in_modules)
            if refused:  # git add would fail as a whole
                skip(rel, f"{REFUSED_REASON}: {refused}", True)
            elif len(os.fsencode(rel)) > max_path:
                skip(rel, f"path longer than MAX_PATH_BYTES ({max_path} bytes)", True)
            elif folder:
                if depth + 1 > lim.MAX_TREE_DEPTH:
                    skip(rel, f"deeper than MAX_TREE_DEPTH ({lim.MAX_TREE_DEPTH})", True)
                else:
                    stack.append((entry.path, rel, depth + 1,
                                  in_modules or gitmodules_dir(os.fsencode(entry.name))))
            elif regular:
                if not sizes:
                    continue
                key = known.get(rel)
                try:
                    size = key[2] if key is not None else entry.stat(
                        follow_symlinks=False).st_size
                except OSError:
                    continue
                if size > lim.MAX_OBJECT_BYTES:
                    skip(rel, f"larger than MAX_OBJECT_BYTES ({lim.MAX_OBJECT_BYTES} bytes)",
                         True)
            elif not link:
                try:
                    mode = entry.stat(follow_symlinks=False).st_mode
                except OSError:
                    continue
                skip(rel, _special_kind(mode), False)
    return TreeScan(tuple(sorted(nested)), tuple(sorted(skipped, key=lambda s: s.path)))


def _too_many_excluded(worktree: Path) -> None:
    from git_iterare import limits as lim

    raise OperationFailed(
        f"the worktree {worktree} has more than {lim.MAX_EXCLUDED_PATHS} files or "
        "directories over the size, depth or path-length limits "
        "(MAX_EXCLUDED_PATHS); not committing it",
        hint="see LIMITS in `git iterare help execute`")


def check_bounds(worktree: Path, scan: TreeScan) -> None:
    """Refuse what :func:`scan_worktree` refuses when ``bounded``, for a ``scan`` of
    ``worktree`` made without.

    Raises:
        OperationFailed: more than :data:`~git_iterare.limits.MAX_EXCLUDED_PATHS` paths
            need excluding.
    """
    from git_iterare import limits as lim

    if sum(s.excluded for s in scan.skipped) > lim.MAX_EXCLUDED_PATHS:
        _too_many_excluded(worktree)


def find_nested_repos(worktree: Path) -> list[str]:
    """Return the directories below ``worktree`` that hold a ``.git`` entry (or one that
    :func:`disable_nested_repos` renamed); see :func:`scan_worktree`.

    Args:
        worktree: top of the worktree.

    Returns:
        Paths relative to ``worktree`` with ``/`` separators, sorted (all of them: files
        over the limits, which make the automatic commit refuse the worktree, do not
        stop the search).
    """
    return list(scan_worktree(worktree, bounded=False, sizes=False).nested)


def disable_nested_repos(worktree: Path, nested: Sequence[str]) -> list[str]:
    """Rename the ``.git`` of each nested repository to :data:`DISABLED_GIT`.

    git looks inside a nested repository whose directory the index records as a gitlink
    (a submodule), and in doing so reads that repository's config, which the agent wrote:
    ``core.fsmonitor`` there runs a program on the host, during our ``git add`` and during
    a user's ``git status`` in the run worktree alike. Without its ``.git`` the directory
    is plain files to git. The repository's history was never part of the run's result
    (nested repositories are not committed); its files stay.

    Returns:
        The paths disabled now (relative, ``/``-separated).
    """
    disabled = []
    for rel in nested:
        entry = worktree / rel / ".git"
        if entry.is_symlink() or entry.exists():
            os.rename(entry, worktree / rel / DISABLED_GIT)
            disabled.append(rel)
    return disabled


def _exclude_pattern(path: str) -> str:
    """An anchored info/exclude line matching exactly the directory ``path``."""
    return f"{_exclude_file(path)}/"


def _exclude_file(path: str) -> str:
    """An anchored info/exclude line matching exactly ``path`` (file or directory); a
    path holding a line break has none (see :func:`_one_line`)."""
    escaped = "".join("\\" + c if c in "*?[\\!# " else c for c in path)
    return f"/{escaped}"


def exclude_line(path: str) -> str | None:
    """An anchored ``info/exclude`` line matching exactly the file ``path`` (a relative,
    ``/``-separated path), or None when no line can (it holds CR or LF)."""
    return _exclude_file(path) if _one_line(path) else None


def _one_line(path: str) -> bool:
    """Whether an exclude line can name ``path``: a line cannot hold CR or LF (and ``?``
    in their place would match other paths too), so such paths are left out of ``git
    add`` by pathspec instead (:attr:`SafeGit.unlisted`)."""
    return "\r" not in path and "\n" not in path


@dataclass(frozen=True)
class SafeGit:
    """A hardened git view of one worktree with an index file of the caller's choosing.

    Attributes:
        scratch: the scratch gitdir (ours alone; removed when the context ends).
        worktree: the worktree git looks at.
        index_file: the index git reads and writes.
        objects: the object directory git reads and writes (the main repository's).
        nested_repos: nested repositories found and excluded, relative paths.
        skipped: other paths left out (FIFOs, sockets, devices, files and directories
            over the limits of :mod:`git_iterare.limits`).
        unlisted: those of the excluded paths that ``info/exclude`` cannot name (a line
            break in the name): :meth:`snapshot` leaves them out of ``git add``.
    """

    scratch: Path
    worktree: Path
    index_file: Path
    objects: Path
    nested_repos: tuple[str, ...]
    skipped: tuple[Skipped, ...] = ()
    unlisted: tuple[str, ...] = ()

    def env(self) -> dict[str, str]:
        """The environment for git: explicit locations, no system/global/``-c`` config."""
        return {
            "GIT_DIR": str(self.scratch),
            "GIT_WORK_TREE": str(self.worktree),
            "GIT_INDEX_FILE": str(self.index_file),
            "GIT_OBJECT_DIRECTORY": str(self.objects),
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_CONFIG_GLOBAL": "/dev/null",
            "GIT_CONFIG_PARAMETERS": "",
            "GIT_CONFIG_COUNT": "0",
            "GIT_ATTR_NOSYSTEM": "1",
            "GIT_NO_REPLACE_OBJECTS": "1",
            "GIT_TERMINAL_PROMPT": "0",
            "GIT_OPTIONAL_LOCKS": "0",
        }

    def git(self, *args: str, check: bool = True, **kwargs: Any
            ) -> subprocess.CompletedProcess[Any]:
        """Run ``git ARGS`` in this view (cwd is the scratch dir, never the worktree)."""
        return proc.git(*args, cwd=self.scratch, env=self.env(), scrub_git_env=True,
                        check=check, **kwargs)

    def _staged(self) -> dict[bytes, tuple[bytes, bytes]]:
        """The index's entries: path -> (mode, blob id), as ``ls-files -s`` spells them."""
        found: dict[bytes, tuple[bytes, bytes]] = {}
        for line in self.git("ls-files", "-s", "-z", text=False).stdout.split(b"\0"):
            info, _, path = line.partition(b"\t")
            if path:
                mode, sha, _ = info.split(b" ", 2)
                found[path] = (mode, sha)
        return found

    def snapshot(self, parent_tree: str, *, drop: Sequence[str] = (),
                 drop_blobs: Collection[str] = (),
                 unchanged: Sequence[tuple[str, str, str]] = (),
                 gitlinks: Sequence[tuple[str, str]] = ()) -> str:
        """Stage the whole worktree on top of ``parent_tree`` and return the tree id.

        Args:
            parent_tree: tree (or commit) the index starts from; paths the worktree no
                longer has are recorded as deleted, while tracked paths at or below one
                of :attr:`skipped` keep the entries they have there (the agent's change to
                them is not committed, whatever it was).
            drop: paths removed from the index afterwards unless ``parent_tree`` tracks
                them (files copied in by ``.iterare/include``), taken literally.
            drop_blobs: blob ids: a path ``parent_tree`` does not track that holds one
                leaves the index too (a copied-in file the agent moved or copied).
            unchanged: ``(mode, blob id, path)`` of files whose bytes are still those the
                host checked out from ``blob id``: recorded as that blob, never read
                again (no clean filter runs on them; see
                :func:`git_iterare.git.checkout.unchanged_entries`).
            gitlinks: ``(commit id, path)`` of submodules whose recorded commit changes.

        Returns:
            The hex id of the written tree (its objects are in :attr:`objects`).

        Raises:
            ExternalError: git failed.
        """
        self.git("read-tree", parent_tree)
        staged = self._staged()
        tracked = sorted(staged)
        # Those the parent holds as they are need no entry of their own (most of them, when
        # the agent made no commit: its base is the parent).
        differing = [(mode, sha, path) for mode, sha, path in unchanged
                     if staged.get(os.fsencode(path)) != (mode.encode(), sha.encode())]
        if differing:
            self.git("update-index", "-z", "--index-info", text=False, input=b"".join(
                f"{mode} {sha}\t".encode() + os.fsencode(path) + b"\0"
                for mode, sha, path in differing))
        # git add -A trusts entries marked assume-unchanged: the files still as checked
        # out, and the tracked paths at or below a skipped one, which so keep the parent's
        # version (left out of the commit means not changed by it, never deleted by it).
        paths = b"".join(os.fsencode(path) + b"\0" for _, _, path in unchanged)
        if self.skipped:
            paths += b"".join(path + b"\0" for path in _at_or_below(
                tracked, {os.fsencode(s.path) for s in self.skipped}))
        if paths:
            self.git("update-index", "-z", "--assume-unchanged", "--stdin", text=False,
                     input=paths)
        self.git("add", "-A", "--pathspec-from-file=-", "--pathspec-file-nul", text=False,
                 input=b".\0" + b"".join(b":(exclude,literal)" + os.fsencode(u) + b"\0"
                                          for u in self.unlisted))
        if paths:
            self.git("update-index", "-z", "--no-assume-unchanged", "--stdin", text=False,
                     input=paths)
        if gitlinks:
            self.git("update-index", "-z", "--index-info", text=False, input=b"".join(
                f"160000 {sha}\t".encode() + os.fsencode(path) + b"\0"
                for sha, path in gitlinks))
        # Only what the parent does not track: a tracked file is the commit's like any.
        dropped = {os.fsencode(d) for d in drop}
        if drop_blobs:
            blobs = {b.encode() for b in drop_blobs}
            for entry in self.git("ls-files", "-s", "-z", text=False).stdout.split(b"\0"):
                info, _, path = entry.partition(b"\t")
                if path and info.split(b" ")[1] in blobs:
                    dropped.add(path)
        dropped.difference_update(tracked)
        if dropped:
            self.git("rm", "-q", "--cached", "--ignore-unmatch", "--pathspec-from-file=-",
                     "--pathspec-file-nul", text=False,
                     input=b"".join(b":(literal)" + d + b"\0" for d in sorted(dropped)))
        return str(self.git("write-tree").stdout.strip())


def _at_or_below(paths: list[bytes], tops: set[bytes]) -> list[bytes]:
    """The paths of the sorted ``paths`` equal to one of ``tops`` or below one, each found
    by bisection (those below ``t`` sort from ``t/`` up to ``t0``)."""
    import bisect

    found: set[bytes] = set()
    for top in tops:
        at = bisect.bisect_left(paths, top)
        if at < len(paths) and paths[at] == top:
            found.add(top)
        first = bisect.bisect_left(paths, top + b"/")
        found.update(paths[first:bisect.bisect_left(paths, top + b"0", first)])
    return sorted(found)


@contextmanager
def safe_git(common_dir: Path, worktree: Path, index_file: Path | None = None, *,
             attributes: str | None = None, filters: str = "", objects: Path | None = None,
             skipped: Sequence[Skipped] = (), scan: TreeScan | None = None
             ) -> Iterator[SafeGit]:
    """Create a scratch gitdir for ``worktree`` and yield a :class:`SafeGit` over it.

    Args:
        common_dir: the main repository's common dir (objects are written there, the
            scratch dir is made under ``iterare/tmp``).
        worktree: the worktree to look at.
        index_file: the index to use; a fresh one inside the scratch dir when None.
        attributes: the scratch gitdir's ``info/attributes`` (it beats every
            ``.gitattributes`` in the worktree); None: :data:`SCRATCH_ATTRIBUTES`, no
            filter for any path. See :func:`git_iterare.git.filters.attributes_text`.
        filters: config text appended to the scratch config: the user's filter drivers
            (:func:`git_iterare.git.filters.filter_config`), never the agent's.
        objects: the object directory to read and write; ``common_dir/objects`` when
            None (a submodule's, under ``.git/modules``, for its files).
        skipped: more paths left out (files that never reached ``worktree``: a remote
            run's over the size limit), added to :attr:`SafeGit.skipped`; tracked ones
            keep their entries as :meth:`SafeGit.snapshot` keeps any skipped path's.
        scan: what :func:`scan_worktree` found in ``worktree`` (its bounds are checked
            here), when the caller walked it already and nothing changed it since
            (:attr:`git_iterare.git.checkout.FinishPlan.scan`); None: it is walked here.

    Raises:
        OperationFailed: see :func:`scan_worktree`.

    Yields:
        The view; the scratch dir is removed afterwards.
    """
    tmp_root = common_dir / "iterare" / "tmp"
    tmp_root.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="safegit-", dir=tmp_root))
    try:
        for sub in ("refs", "info"):
            (scratch / sub).mkdir()
        (scratch / "HEAD").write_text("ref: refs/heads/scratch\n")
        (scratch / "config").write_text(SCRATCH_CONFIG + line_ending_config(common_dir)
                                        + filters)
        (scratch / "info" / "attributes").write_text(
            SCRATCH_ATTRIBUTES if attributes is None else attributes)
        if scan is None:
            with phase("scan-worktree"):
                scan = scan_worktree(worktree)
        else:
            check_bounds(worktree, scan)
        nested = list(scan.nested)
        disable_nested_repos(worktree, nested)
        excluded = [*nested, *(s.path for s in scan.skipped if s.excluded)]
        (scratch / "info" / "exclude").write_bytes(os.fsencode(
            f"/{DISABLED_GIT}/\n"  # the top's own .git, when it was a nested repository
            + "".join(_exclude_pattern(p) + "\n" for p in nested if _one_line(p))
            + "".join(_exclude_file(s.path) + "\n" for s in scan.skipped
                      if s.excluded and _one_line(s.path))))
        yield SafeGit(scratch=scratch, worktree=worktree,
                      index_file=index_file or scratch / "index",
                      objects=objects or common_dir / "objects", nested_repos=tuple(nested),
                      skipped=tuple(sorted((*scan.skipped, *skipped), key=lambda s: s.path)),
                      unlisted=tuple(p for p in excluded if not _one_line(p)))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
