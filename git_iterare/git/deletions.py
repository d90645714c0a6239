"""Whether a run's changes delete what ``merge`` should not fast-forward unasked.

An agent that rewrote history (reset to an older commit and committed again) or emptied
its worktree comes back as a result that deletes the files it started from; merged, that
deletes them from the user's branch. Two kinds of deletion are worth a question:

* anything under ``.iterare/`` (or ``.iterare`` itself): git iterare's own configuration,
  Dockerfile and prompts of the next runs;
* many of the base's files: at least :data:`MANY_FILES` of them, or at least half (a
  small repository losing most of itself).

A deliberate clean-up of a few files passes without a question; deleted files are never
flagged as host-executable (:mod:`git_iterare.git.hostexec`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from git_iterare.git.hostexec import FileChange
from git_iterare.git.repo import Repo, common_git

#: Deleting at least this many of the base's files needs a question, whatever their share.
MANY_FILES = 100


@dataclass(frozen=True)
class Deletions:
    """What a run deletes of its base.

    Attributes:
        deleted: files deleted (git status ``D``).
        iterare: of those, the files under the top-level ``.iterare/`` (or it, a file).
        base_files: files in the base's tree (blobs, symbolic links and submodules).
    """

    deleted: int
    iterare: int
    base_files: int

    @property
    def many(self) -> bool:
        """Whether the run deletes many of the base's files (see the module docstring)."""
        return self.deleted >= MANY_FILES or (self.deleted > 0
                                              and 2 * self.deleted >= self.base_files)

    def warning(self) -> str | None:
        """One line (without the run's name) saying what is deleted, or None when the
        deletions need no question."""
        why = "(git iterare's settings, Dockerfile and prompts of the next runs)"
        if self.many:
            return (f"deletes {self.deleted} of the {self.base_files} files of its base"
                    + (f", {self.iterare} of them under .iterare/ {why}" if self.iterare
                       else ""))
        if self.iterare:
            return f"deletes {self.iterare} file{'' if self.iterare == 1 else 's'} " \
                   f"under .iterare/ {why}"
        return None


def _under_iterare(path: str) -> bool:
    top = path.split("/", 1)[0]
    return top.casefold() == ".iterare"


def deletions(repo: Repo, base: str, changes: Sequence[FileChange]) -> Deletions:
    """What ``changes`` (base to the run's result, :func:`hostexec.changed_files`) delete.

    Args:
        repo: the user's repository.
        base: the commit the run started from.
        changes: every file the run changed.

    Raises:
        ExternalError: git failed (an unknown commit, for instance).
    """
    gone = [c.path for c in changes if c.status == "D"]
    if not gone:
        return Deletions(0, 0, 0)
    listed = common_git(repo, "ls-tree", "-r", "-z", "--name-only", base, text=False).stdout
    return Deletions(deleted=len(gone), iterare=sum(map(_under_iterare, gone)),
                     base_files=listed.count(b"\0"))
