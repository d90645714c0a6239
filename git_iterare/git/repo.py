"""Finding the repository the way git does.

``git iterare`` is started by git, so the current directory, ``git -C``, ``GIT_DIR`` and
``GIT_WORK_TREE`` already say which repository is meant; we ask ``git rev-parse`` rather
than guess, which also handles linked worktrees and subdirectories.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from git_iterare import proc
from git_iterare.errors import ExternalError, UserError


@dataclass(frozen=True)
class Repo:
    """A repository as git sees it from the current directory.

    Attributes:
        git_dir: the gitdir of the current worktree (``.git``, or ``.git/worktrees/<name>``
            for a linked worktree), absolute.
        common_dir: the gitdir shared by all worktrees (objects, refs, config), absolute.
        work_tree: top of the current worktree, absolute; None in a bare repository.
    """

    git_dir: Path
    common_dir: Path
    work_tree: Path | None

    @property
    def main_work_tree(self) -> Path | None:
        """The main worktree (where run worktrees live, ``.iterare/worktrees/``), or None
        when bare.

        For a linked worktree this is the parent of the common dir when that is named
        ``.git``, as ``git worktree`` lays it out; otherwise the current worktree.
        """
        if self.common_dir.name == ".git" and (self.common_dir.parent / ".git").exists():
            return self.common_dir.parent
        return self.work_tree

    @property
    def project_tree(self) -> Path | None:
        """The worktree whose project files (``.iterare/``: config, prompts, Dockerfile,
        include, and the files include names) a command reads: the one it runs in, so a
        linked worktree (git-worktree(1)) with a ``.iterare`` of its own reads its own
        checkout of them, as git reads its own HEAD and index there. A linked worktree
        without one has no project files: there, and in a run's worktree (under the main
        worktree's ``.iterare/worktrees/``, or ``iterare/live/`` of the common dir while
        it is live, which hold what its agent wrote), it is the main worktree. None when
        bare.
        """
        top, main = self.work_tree, self.main_work_tree
        if top is None or main is None or top == main:
            return top
        runs = main / ".iterare" / "worktrees"
        live = self.common_dir / "iterare" / "live"  # runner.livetree: a live run's
        if top == runs or runs in top.parents or live in top.parents \
                or not os.path.lexists(top / ".iterare"):
            return main
        return top

    @property
    def iterare_dir(self) -> Path:
        """``.iterare`` of :attr:`project_tree` (config, prompts, Dockerfile, include).

        Raises:
            UserError: the repository is bare, so it has no ``.iterare`` directory.
        """
        top = self.project_tree
        if top is None:
            raise UserError("this is a bare repository; run git iterare in a worktree")
        return top / ".iterare"


NOT_A_REPO = "not a git repository (run git iterare inside one, or use git -C <path>)"


def discover(cwd: str | Path | None = None) -> Repo:
    """Find the repository for ``cwd`` as git would.

    Honours ``GIT_DIR``, ``GIT_WORK_TREE`` and ``git -C`` (which git applied before
    starting us), subdirectories and linked worktrees.

    Args:
        cwd: directory to start from; the current directory when None.

    Returns:
        The repository.

    Raises:
        UserError: not inside a repository (exit status 2).
        ExternalError: git failed for another reason.
    """
    # One git in the usual case; --show-toplevel fails in a bare repository and inside a
    # gitdir, where it is asked again on its own.
    first = proc.git("rev-parse", "--path-format=absolute", "--git-dir", "--git-common-dir",
                     "--is-bare-repository", "--show-toplevel", cwd=cwd, check=False)
    lines = first.stdout.splitlines()
    if first.returncode == 0 and len(lines) == 4 and lines[2] == "false" and lines[3]:
        return Repo(git_dir=Path(lines[0]), common_dir=Path(lines[1]),
                    work_tree=Path(lines[3]))
    try:
        out = proc.git(
            "rev-parse",
            "--path-format=absolute",
            "--git-dir",
            "--git-common-dir",
            "--is-bare-repository",
            cwd=cwd,
        ).stdout.splitlines()
    except ExternalError as exc:
        if "not a git repository" in exc.stderr:
            raise UserError(NOT_A_REPO) from None
        raise
    git_dir, common_dir, bare = Path(out[0]), Path(out[1]), out[2] == "true"
    work_tree: Path | None = None
    if not bare:
        top = proc.git("rev-parse", "--show-toplevel", cwd=cwd, check=False)
        if top.returncode == 0 and top.stdout.strip():
            work_tree = Path(top.stdout.strip())
    return Repo(git_dir=git_dir, common_dir=common_dir, work_tree=work_tree)


def common_git(repo: Repo, *args: str, **kwargs: Any) -> subprocess.CompletedProcess[Any]:
    """Run git on the user's repository (its common dir), ignoring inherited GIT_* paths.

    Keyword arguments go to :func:`git_iterare.proc.run` (``check``, ``input``, ``text``).

    Raises:
        ExternalError: git failed and ``check`` was not false.
    """
    return proc.git("--git-dir", str(repo.common_dir), *args, scrub_git_env=True, **kwargs)


def worktree_git(repo: Repo, *args: str, **kwargs: Any) -> subprocess.CompletedProcess[Any]:
    """Run git on the gitdir of the worktree the command runs in (``HEAD``, ``@{-1}`` and
    ``HEAD~2`` are its own there: a linked worktree's, not the main worktree's), ignoring
    inherited GIT_* paths; refs and objects are the repository's.

    Raises:
        ExternalError: git failed and ``check`` was not false.
    """
    return proc.git("--git-dir", str(repo.git_dir), *args, scrub_git_env=True, **kwargs)


def rev(repo: Repo, name: str, *, here: bool = False) -> str | None:
    """The object id ``name`` (a revision: gitrevisions(7)) names, or None when it names
    none; with ``here``, as the worktree the command runs in reads it (its own HEAD).

    Raises:
        ExternalError: git cannot be started.
    """
    run = worktree_git if here else common_git
    result = run(repo, "rev-parse", "--verify", "--quiet", "--end-of-options", name,
                 check=False)
    return str(result.stdout.strip()) if result.returncode == 0 else None


def commit_of(repo: Repo, commitish: str, *, here: bool = False) -> str:
    """The hex id of the commit ``commitish`` names (``<rev>^{commit}``); with ``here``,
    as the worktree the command runs in reads it (see :func:`rev`).

    Raises:
        UserError: it names no commit.
    """
    found = rev(repo, f"{commitish}^{{commit}}", here=here)
    if found is None:
        raise UserError(f"{commitish!r} is not a commit in this repository")
    return found


def tree_of(repo: Repo, commit: str) -> str:
    """The hex id of ``commit``'s tree.

    Raises:
        ExternalError: it is no commit of the repository.
    """
    return str(common_git(repo, "rev-parse", f"{commit}^{{tree}}").stdout.strip())


def rev_list(repo: Repo, *args: str) -> list[str]:
    """What ``git rev-list args`` lists (ids, in its order), in the common dir.

    Raises:
        ExternalError: git failed.
    """
    return str(common_git(repo, "rev-list", *args, "--").stdout).split()


def is_ancestor(repo: Repo, ancestor: str, descendant: str) -> bool:
    """True when ``ancestor`` is ``descendant`` or one of its ancestors."""
    return common_git(repo, "merge-base", "--is-ancestor", ancestor, descendant,
                      check=False).returncode == 0


def current_branch(repo: Repo) -> str | None:
    """The branch checked out in the worktree the command runs in; None when detached."""
    result = worktree_git(repo, "symbolic-ref", "--quiet", "--short", "HEAD", check=False)
    return result.stdout.strip() or None


def read_blobs(repo: Repo, names: list[str], limit: int | None = None
               ) -> dict[str, bytes | int]:
    """The content of the blobs ``names`` name: blob ids or ``<commit>:<path>`` (gitrevisions(7)),
    read with one ``git cat-file --batch`` (and one ``--batch-check`` first when ``limit``
    is given, so a large blob is never read).

    Args:
        repo: the repository.
        names: object names, none holding a newline or a space.
        limit: largest blob read, in bytes; None for no limit.

    Returns:
        Name -> content; a blob over ``limit`` maps to its size (an int) instead. Names
        that are missing or not blobs are left out.

    Raises:
        ExternalError: git failed.
    """
    def batch(option: str, wanted: list[str]) -> list[tuple[str, int, bytes]]:
        out = common_git(repo, "cat-file", f"{option}=%(objecttype) %(objectsize) %(rest)",
                         input="".join(f"{n} {n}\n" for n in wanted).encode(),
                         text=False).stdout
        found, pos = [], 0
        while pos < len(out):
            end = out.index(b"\n", pos)
            header = out[pos:end].split(b" ", 2)
            pos = end + 1
            if len(header) != 3 or header[0] != b"blob":
                continue  # "<name> missing", or not a blob
            size = int(header[1])
            body = b""
            if option == "--batch":
                body, pos = out[pos:pos + size], pos + size + 1
            found.append((header[2].decode("utf-8", "surrogateescape"), size, body))
        return found

    if not names:
        return {}
    sizes = {name: size for name, size, _ in batch("--batch-check", names)} \
        if limit is not None else None
    small = names if sizes is None else [n for n, s in sizes.items() if s <= (limit or 0)]
    read: dict[str, bytes | int] = {name: body for name, _, body in batch("--batch", small)} \
        if small else {}
    for name, size in (sizes or {}).items():
        read.setdefault(name, size)
    return read


#: Who moved a ref in the reflog when git knows no identity (no name or email configured).
_FALLBACK_IDENTITY = b"git-iterare <git-iterare@localhost>"


def reflog_identity(repo: Repo) -> bytes:
    """Who moved a ref, for the reflog entries git-iterare writes through dulwich: the
    committer identity git itself would record (``git var GIT_COMMITTER_IDENT`` without
    its date: environment and git config as git reads them), else
    ``git-iterare <git-iterare@localhost>``.

    Given to dulwich, it keeps dulwich from reading the user's git config files itself,
    which fails on a file it cannot read (a ``~/.gitconfig`` of mode 000) where git skips
    it.

    Returns:
        ``Name <email>`` as bytes.
    """
    result = common_git(repo, "var", "GIT_COMMITTER_IDENT", check=False)
    ident = str(result.stdout).strip()
    if result.returncode != 0 or ">" not in ident:
        return _FALLBACK_IDENTITY
    return ident[:ident.rindex(">") + 1].encode()
