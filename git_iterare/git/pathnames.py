"""The path names git refuses to record, and finding them in a run's commits.

git refuses to put some paths in an index (``verify_path`` in git's ``read-cache.c``), so a
``git add`` or ``read-tree`` meeting one fails as a whole; ``git fsck`` (and a remote
checking what it receives) refuses trees holding them. They are the names through which a
checkout could write into a ``.git`` directory on some file system:

* ``.``, ``..`` and ``.git`` in any case (git outlaws ``.GIT`` everywhere);
* what NTFS takes for ``.git`` (``core.protectNTFS``, on by default since git 2.24): the
  name followed by any run of spaces and dots (NTFS drops them), an alternate data stream
  (``.git::$INDEX_ALLOCATION``), the short name ``git~1``; also after a backslash (a
  separator on Windows) that is not a name's first byte;
* what HFS+ takes for ``.git`` (``core.protectHFS``, on by default on macOS): the name with
  code points HFS+ ignores (``U+200C``-``U+200F``, ``U+202A``-``U+202E``, ``U+206A``-
  ``U+206F``, ``U+FEFF``) anywhere in it;
* for symbolic links, the same for ``.gitmodules`` (whose NTFS short names are
  ``gitmod~1``-``4`` and ``gi7eba~N``), and any symlink below a directory named
  ``.gitmodules`` (any case, or its HFS+ aliases).

Both protections count here whatever the platform: a run's branch is pushed and checked
out elsewhere, where git would refuse such a commit. A tree entry is also refused when its
name is empty or holds a ``/`` (fsck's ``emptyName`` and ``fullPathname``).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path

#: Code points HFS+ ignores in file names (git's ``next_hfs_char``, utf8.c).
HFS_IGNORED = frozenset("\u200c\u200d\u200e\u200f\u202a\u202b\u202c\u202d\u202e"
                        "\u206a\u206b\u206c\u206d\u206e\u206f\ufeff")

DOT = "a '.' or '..' entry"
DOTGIT = ".git in any case"
NTFS_DOTGIT = "what Windows reads as .git"
HFS_DOTGIT = "what macOS reads as .git"
GITMODULES_LINK = "a symlinked .gitmodules"
EMPTY = "an empty name"
SLASH = "a name holding '/'"


def _only_spaces_and_dots(rest: bytes, stops: bytes, *, at_end: bool = True) -> bool:
    """Whether ``rest`` is spaces and dots up to the first byte of ``stops`` (or up to its
    end: then ``at_end``)."""
    for byte in rest:
        if byte in stops:
            return True
        if byte not in b" .":
            return False
    return at_end


def _ntfs_dotgit(part: bytes) -> bool:
    """NTFS's ``.git``: ``.git`` or ``git~1`` (any case), then spaces and dots up to the
    end, a separator or an alternate data stream's ``:``."""
    low = part.lower()
    for stem in (b".git", b"git~1"):
        if low.startswith(stem):
            return _only_spaces_and_dots(low[len(stem):], b"/\\:")
    return False


def _ntfs_dotgitmodules(part: bytes, *, in_path: bool = False) -> bool:
    """NTFS's ``.gitmodules``: itself, its short name ``gitmod~1``-``4``, or a fall-back
    short name (up to six of ``gi7eba``, ``~``, digits: eight characters), then spaces
    and dots up to the end or a ``:`` (only a ``:`` when ``in_path``: a ``/`` follows)."""
    low = part.lower()
    if low.startswith(b".gitmodules"):
        return _only_spaces_and_dots(low[11:], b":", at_end=not in_path)
    if low[:6] == b"gitmod" and low[6:7] == b"~" and low[7:8] in (b"1", b"2", b"3", b"4"):
        return _only_spaces_and_dots(low[8:], b":", at_end=not in_path)
    head = low[:8]
    if len(head) < 8 or b"~" not in head:
        return False
    tilde = head.index(b"~")
    if tilde > 6 or head[:tilde] != b"gi7eba"[:tilde]:
        return False
    digits = head[tilde + 1:]
    if not digits.isdigit() or digits[:1] == b"0":
        return False
    return _only_spaces_and_dots(low[8:], b":", at_end=not in_path)


def _hfs_chars(name: bytes) -> Iterator[str]:
    """The characters of ``name`` as UTF-8, up to the first byte sequence that is not
    (git's ``pick_one_utf8_char``: no overlong forms, surrogates, U+FFFE or U+FFFF)."""
    at = 0
    while at < len(name):
        lead = name[at]
        size = (1 if lead < 0x80 else 2 if lead >> 5 == 6 else 3 if lead >> 4 == 14
                else 4 if lead >> 3 == 30 else 0)
        try:
            char = name[at:at + size].decode("utf-8") if size else ""
        except UnicodeDecodeError:
            return
        if len(char) != 1 or char in "\ufffe\uffff":
            return
        yield char
        at += size


def _hfs_is(name: bytes, needle: str) -> bool:
    """Whether HFS+ takes ``name`` for ``.<needle>``: the same, ASCII case folded, once the
    code points it ignores are dropped (what is not UTF-8 ends the name)."""
    chars = (c for c in _hfs_chars(name) if c not in HFS_IGNORED)
    for want in "." + needle:
        char = next(chars, None)
        if char is None or not char.isascii() or char.lower() != want:
            return False
    return next(chars, None) is None


def _ntfs_parts(name: bytes) -> Iterator[bytes]:
    """``name``, and what follows each backslash in it but a leading one (git's
    ``verify_path`` takes a backslash for a separator from a component's second byte)."""
    yield name
    at = name.find(b"\\", 1)
    while at != -1:
        yield name[at + 1:]
        at = name.find(b"\\", at + 1)


def _dotgitmodules(name: bytes) -> bool:
    return name.lower() == b".gitmodules" or _hfs_is(name, "gitmodules") or any(
        _ntfs_dotgitmodules(part) for part in _ntfs_parts(name))


def refused_name(name: bytes, *, symlink: bool = False, below_gitmodules: bool = False
                 ) -> str | None:
    """Why git refuses a path holding the component ``name``, or None when it takes it.

    Args:
        name: one component of a path (a tree entry's name, a directory entry's name).
        symlink: the path is a symbolic link (``name`` is its last component).
        below_gitmodules: a directory above it is one :func:`gitmodules_dir` names (a
            symbolic link there is refused).

    Returns:
        One of :data:`DOT`, :data:`DOTGIT`, :data:`NTFS_DOTGIT`, :data:`HFS_DOTGIT`,
        :data:`GITMODULES_LINK`, :data:`EMPTY`, :data:`SLASH`, or None.
    """
    if not name:
        return EMPTY
    if b"/" in name:
        return SLASH
    if name in (b".", b".."):
        return DOT
    if name.lower() == b".git":
        return DOTGIT
    if any(_ntfs_dotgit(part) for part in _ntfs_parts(name)):
        return NTFS_DOTGIT
    if _hfs_is(name, "git"):
        return HFS_DOTGIT
    if symlink and (below_gitmodules or _dotgitmodules(name)):
        return GITMODULES_LINK
    return None


def gitmodules_dir(name: bytes) -> bool:
    """Whether git refuses every symbolic link below a directory called ``name``
    (``.gitmodules`` in any case, an HFS+ alias of it, or an NTFS one that ends in an
    alternate data stream's ``:``)."""
    return name.lower() == b".gitmodules" or _hfs_is(name, "gitmodules") or any(
        _ntfs_dotgitmodules(part, in_path=True) for part in _ntfs_parts(name))


def shown(path: bytes) -> str:
    """``path`` for a message: quoted, undecodable bytes and control characters escaped."""
    return repr(path.decode("utf-8", "backslashreplace"))


def first_refused(objects: Path, commits: Iterable[str]) -> tuple[str, bytes, str] | None:
    """The first path git refuses in the trees of ``commits``, compared with their first
    parents (a parent outside ``commits`` is taken as git took it).

    Only what a commit changes is read: entries equal to the first parent's at the same
    place are skipped, and trees already checked are not read again.

    Args:
        objects: the object directory holding the commits and their trees.
        commits: hex ids, at most :data:`~git_iterare.limits.MAX_IMPORT_COMMITS` of them
            (the caller bounds them).

    Returns:
        ``(commit id, path, reason)`` for the first refused path found, or None.

    Raises:
        KeyError: an object is missing.
        OperationFailed: a tree is nested deeper than
            :data:`~git_iterare.limits.MAX_TREE_DEPTH`.
    """
    import stat

    from dulwich.object_store import DiskObjectStore
    from dulwich.objects import Commit, ObjectID, Tree

    from git_iterare import limits as lim
    from git_iterare.errors import OperationFailed

    store = DiskObjectStore(str(objects))
    checked: set[bytes] = set()

    def tree(sha: bytes | None) -> Tree | None:
        if sha is None:
            return None
        obj = store[ObjectID(sha)]
        return obj if isinstance(obj, Tree) else None

    for commit_id in commits:
        commit = store[ObjectID(commit_id.encode())]
        if not isinstance(commit, Commit):
            continue
        parent_tree = None
        if commit.parents:
            parent = store[commit.parents[0]]
            parent_tree = parent.tree if isinstance(parent, Commit) else None
        # (tree id, the parent's tree at the same place, path, depth, below .gitmodules)
        todo: list[tuple[bytes, bytes | None, bytes, int, bool]] = [
            (commit.tree, parent_tree, b"", 0, False)]
        while todo:
            sha, before, prefix, depth, in_modules = todo.pop()
            if sha == before or (sha in checked and not in_modules):
                # equal to the parent's (taken), or read already (a symlink that was
                # fine elsewhere is not below a .gitmodules directory)
                continue
            if depth > lim.MAX_TREE_DEPTH:
                raise OperationFailed(f"a tree of commit {commit_id} is nested deeper than "
                                      f"{lim.MAX_TREE_DEPTH} (MAX_TREE_DEPTH)")
            here, old = tree(sha), tree(before)
            if here is None:
                continue
            old_entries = {e.path: (e.mode, e.sha) for e in old.iteritems()} if old else {}
            for entry in here.iteritems():
                name, mode, child = entry.path, entry.mode, entry.sha
                if old_entries.get(name) == (mode, child):
                    continue
                path = prefix + name
                reason = refused_name(name, symlink=stat.S_ISLNK(mode),
                                      below_gitmodules=in_modules)
                if reason:
                    return commit_id, path, reason
                if stat.S_ISDIR(mode):
                    was = old_entries.get(name)
                    todo.append((child, was[1] if was and stat.S_ISDIR(was[0]) else None,
                                 path + b"/", depth + 1, in_modules or gitmodules_dir(name)))
            if not in_modules:
                checked.add(sha)
    return None
