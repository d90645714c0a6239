"""Which of a run's changes would execute on the host once merged.

The sandbox keeps the agent away from the host while it runs; merging its work brings
files back that the host *runs*, or that make a tool run something or load instructions:
git hooks and hook managers, agent tool configuration, direnv files, editor tasks, REPL
and debugger start-up files, project files language servers build, linter configuration
that loads code, build and package scripts, task runners, dependency lists and lock files,
CI files, shell start-up files. The list is data:
``git_iterare/data/host-executables.toml``, grouped by kind, one ``"pattern" = "reason"``
a line (its header explains the pattern syntax). :func:`changed_files` lists every changed
file of a run with the reason when it is one of those, so ``merge`` can show them all with
those highlighted. The list is deliberately broad: a false alarm costs a glance, a miss
costs a compromised machine.
"""

from __future__ import annotations

import fnmatch
import functools
import posixpath
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from git_iterare.git.repo import Repo, common_git

#: The data file, inside the package.
DATA_FILE = "host-executables.toml"

#: Reasons of the rules that are not patterns.
HOOKS_PATH_REASON = "git hooks directory named by core.hooksPath"
EXECUTABLE_REASON = "executable file"


@dataclass(frozen=True)
class Rule:
    """One line of the data file.

    Attributes:
        pattern: as written (see the data file's header).
        reason: why a matching file matters, one short phrase.
        kind: the name of its ``[kind.NAME]`` table.
    """

    pattern: str
    reason: str
    kind: str

    def matches(self, path: str) -> bool:
        """Whether ``path`` (``/``-separated, from the top of the tree) matches."""
        return _matcher(self.pattern.casefold())(path.casefold())


@functools.cache
def _matcher(pattern: str) -> Callable[[str], bool]:
    is_dir = pattern.endswith("/")
    body = pattern.strip("/")
    parts = body.split("/")
    regexes = [re.compile(fnmatch.translate(part)) for part in parts]
    if len(parts) == 1 and not pattern.startswith("/"):
        one = regexes[0]
        if is_dir:  # a directory of that name at any depth
            return lambda path: any(one.match(c) for c in path.split("/")[:-1])
        return lambda path: one.match(path.rsplit("/", 1)[-1]) is not None

    def anchored(path: str) -> bool:
        comps = path.split("/")
        if is_dir:
            if len(comps) <= len(regexes):
                return False
        elif len(comps) != len(regexes):
            return False
        return all(r.match(c) for r, c in zip(regexes, comps, strict=False))

    return anchored


@dataclass(frozen=True)
class _Prefilter:
    """Whether any rule matches a path, in a few regex calls instead of one per rule: the
    name patterns joined into one regex for the last component, the directory-name
    patterns into one for the others, and the (few) patterns with a slash as they are.
    When it says no, no rule matches; when yes, the rules are tried in order for the
    first one's reason."""

    names: re.Pattern[str] | None
    folders: re.Pattern[str] | None
    anchored: tuple[Callable[[str], bool], ...]

    def any_match(self, folded: str) -> bool:
        """Whether some rule matches ``folded`` (a case-folded path)."""
        comps = folded.split("/")
        if self.names is not None and self.names.match(comps[-1]):
            return True
        if self.folders is not None and any(self.folders.match(c) for c in comps[:-1]):
            return True
        return any(match(folded) for match in self.anchored)


def _joined(patterns: list[str]) -> re.Pattern[str] | None:
    # Each alternative keeps fnmatch's own end anchor, so the whole matches as any one.
    return (re.compile("|".join(f"(?:{fnmatch.translate(p)})" for p in patterns))
            if patterns else None)


@functools.lru_cache(maxsize=1)
def _prefilter() -> _Prefilter:
    names: list[str] = []
    folders: list[str] = []
    anchored: list[Callable[[str], bool]] = []
    for rule in rules():
        pattern = rule.pattern.casefold()
        if "/" not in pattern.strip("/") and not pattern.startswith("/"):
            (folders if pattern.endswith("/") else names).append(pattern.strip("/"))
        else:
            anchored.append(_matcher(pattern))
    return _Prefilter(_joined(names), _joined(folders), tuple(anchored))


@functools.lru_cache(maxsize=1)
def _data() -> dict[str, Any]:
    from importlib import resources

    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover
        import tomli as tomllib

    text = resources.files("git_iterare").joinpath("data").joinpath(DATA_FILE).read_text("utf-8")
    kinds = tomllib.loads(text).get("kind")
    if not isinstance(kinds, dict):
        raise RuntimeError(f"{DATA_FILE}: no [kind.NAME] tables")
    return kinds


@functools.lru_cache(maxsize=1)
def rules() -> tuple[Rule, ...]:
    """Every rule of the data file, in file order.

    Raises:
        RuntimeError: the packaged data file is missing or malformed (a broken install).
    """
    out = []
    for kind, table in _data().items():
        files = table.get("files") if isinstance(table, dict) else None
        if not isinstance(files, dict) or not isinstance(table.get("title"), str):
            raise RuntimeError(f"{DATA_FILE}: [kind.{kind}] needs a title and a files table")
        for pattern, reason in files.items():
            if not isinstance(reason, str) or not pattern.strip("/"):
                raise RuntimeError(f"{DATA_FILE}: [kind.{kind}] {pattern!r} is not "
                                   "\"pattern\" = \"reason\"")
            out.append(Rule(pattern, reason, kind))
    return tuple(out)


def kinds() -> dict[str, str]:
    """Kind name -> title, in file order.

    Raises:
        RuntimeError: see :func:`rules`.
    """
    rules()
    return {name: table["title"] for name, table in _data().items()}


@dataclass(frozen=True)
class HostExecChange:
    """A changed file that would run (or make something run) on the host.

    Attributes:
        path: path in the tree, ``/``-separated.
        reason: why it matters, one short phrase.
    """

    path: str
    reason: str


@dataclass(frozen=True)
class FileChange:
    """One file a run changed.

    Attributes:
        status: git's status letter: ``A`` added, ``M`` modified, ``D`` deleted, ``T``
            type changed (file, symlink, submodule).
        path: path in the tree, ``/``-separated; undecodable bytes as surrogates
            (``surrogateescape``), which :func:`git_iterare.ui.sanitize_line` shows as
            ``\\xNN``.
        reason: why it would run on the host, or None (never set for deletions).
    """

    status: str
    path: str
    reason: str | None


def _hooks_path(repo: Repo) -> str | None:
    """``core.hooksPath`` as a tree-relative prefix ending in ``/``, when inside the tree."""
    result = common_git(repo, "config", "--get", "core.hooksPath", check=False)
    value = result.stdout.strip()
    if result.returncode != 0 or not value:
        return None
    top = repo.main_work_tree
    if value.startswith("/"):
        if top is None or not value.startswith(str(top) + "/"):
            return None
        value = value[len(str(top)) + 1:]
    value = posixpath.normpath(value)
    return None if value.startswith("..") else value.rstrip("/") + "/"


def classify(path: str, new_mode: str, hooks_prefix: str | None = None) -> str | None:
    """Why ``path`` (with git mode ``new_mode``, e.g. ``100755``) runs on the host, or None.

    Args:
        path: ``/``-separated path from the top of the tree.
        new_mode: git's octal mode of the new version.
        hooks_prefix: the tree-relative directory ``core.hooksPath`` names, ending in ``/``.
    """
    if hooks_prefix and path.startswith(hooks_prefix):
        return HOOKS_PATH_REASON
    folded = path.casefold()
    if _prefilter().any_match(folded):
        for rule in rules():
            if _matcher(rule.pattern.casefold())(folded):
                return rule.reason
    if new_mode == "100755":
        return EXECUTABLE_REASON
    return None


#: Why files of a repository committed inside the tree are flagged.
EMBEDDED_REPO_REASON = ("part of a git repository inside the tree: git reads its config, "
                        "which can run programs (core.pager, core.fsmonitor), when used there")


def _embedded_repositories(paths: list[str]) -> set[str]:
    """Directories among ``paths`` that hold both ``HEAD`` and ``config``: a bare
    repository (or a gitdir) committed as plain files."""
    def folders(name: str) -> set[str]:
        return {p.rsplit("/", 1)[0] if "/" in p else "" for p in paths
                if p.rsplit("/", 1)[-1] == name}

    return (folders("HEAD") & folders("config")) - {""}


#: Why a symbolic link the run added or changed is flagged when it leaves the tree.
OUTSIDE_SYMLINK_REASON = "symbolic link pointing outside the repository"


def _escapes(path: str, target: bytes) -> bool:
    """Whether the symlink ``path`` (tree-relative) with ``target`` points outside the tree."""
    if not target or target.startswith(b"/") or b"\0" in target:
        return True
    where = posixpath.normpath(posixpath.join(posixpath.dirname(path),
                                              target.decode("utf-8", "surrogateescape")))
    return where == ".." or where.startswith("../")


def _symlink_targets(repo: Repo, blobs: list[str]) -> dict[str, bytes]:
    """Blob id -> content for the symlink blobs ``blobs`` (one ``git cat-file --batch``)."""
    from git_iterare.git.repo import read_blobs

    return {name: body for name, body in read_blobs(repo, blobs).items()
            if isinstance(body, bytes)}


def changed_files(repo: Repo, base: str, head: str) -> list[FileChange]:
    """Every file changed between ``base`` and ``head``, with why it would run on the host.

    Args:
        repo: the user's repository.
        base: commit-ish the run started from.
        head: commit-ish of the run's result.

    Returns:
        Sorted by path (renames are a deletion and an addition).

    Raises:
        ExternalError: git failed (an unknown commit, for instance).
    """
    hooks_prefix = _hooks_path(repo)
    out = common_git(repo, "diff", "--raw", "-z", "--no-renames", "--no-ext-diff",
                     "--no-textconv", "--no-abbrev", base, head, text=False).stdout
    fields = out.decode("utf-8", "surrogateescape").split("\0")
    pairs = list(zip(fields[0::2], fields[1::2], strict=False))
    repos = _embedded_repositories([path for _, path in pairs])
    links = _symlink_targets(repo, sorted({
        parts[3] for parts in (meta.split() for meta, _ in pairs)
        if len(parts) >= 5 and parts[1] == "120000" and not parts[4].startswith("D")}))
    found = []
    for meta, path in pairs:
        parts = meta.split()
        if len(parts) < 5:
            continue
        status = parts[4][:1]
        reason = None if status == "D" else classify(path, parts[1], hooks_prefix)
        if status != "D" and any(path.startswith(r + "/") for r in repos):
            reason = EMBEDDED_REPO_REASON
        if status != "D" and reason is None and parts[1] == "120000" and _escapes(
                path, links.get(parts[3], b"/")):
            reason = OUTSIDE_SYMLINK_REASON
        found.append(FileChange(status=status, path=path, reason=reason))
    return sorted(found, key=lambda c: c.path)


def host_executable_changes(repo: Repo, base: str, head: str) -> list[HostExecChange]:
    """Files added or modified between ``base`` and ``head`` that would run on the host.

    Args:
        repo: the user's repository.
        base: commit-ish the run started from.
        head: commit-ish of the run's result.

    Returns:
        Sorted by path; deleted files are not listed.

    Raises:
        ExternalError: git failed (an unknown commit, for instance).
    """
    return [HostExecChange(path=c.path, reason=c.reason)
            for c in changed_files(repo, base, head) if c.reason]
