"""``merge`` refuses while git is in the middle of something in the worktree (a stopped
``git rebase -i``, a conflicted merge, cherry-pick or revert, ``git am``, a bisect), as
git's own commands do: one line naming it and how to finish or abort it; nothing moves."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import git, iterare
from tests.runs_helpers import head_of
from tests.test_output_sanitized import agent_run


def _two_commits(repo: Path) -> None:
    """main gets a second commit (README.md changed), and a branch ``other`` from the first
    commit changes README.md the other way: the two conflict."""
    git("branch", "other", cwd=repo)
    (repo / "README.md").write_text("main\n")
    git("commit", "-qam", "main side", cwd=repo)
    git("checkout", "-q", "other", cwd=repo)
    (repo / "README.md").write_text("other\n")
    git("commit", "-qam", "other side", cwd=repo)
    git("checkout", "-q", "main", cwd=repo)


def _rebase_stopped(repo: Path) -> None:
    git("rebase", "-q", "-i", "HEAD~1", cwd=repo,
        env=_env(GIT_SEQUENCE_EDITOR="sed -i s/^pick/edit/"))


def _merge_conflicted(repo: Path) -> None:
    git("merge", "-q", "other", cwd=repo, check=False)


def _cherry_pick_conflicted(repo: Path) -> None:
    git("cherry-pick", "other", cwd=repo, check=False)


def _revert_conflicted(repo: Path) -> None:
    (repo / "README.md").write_text("third\n")
    git("commit", "-qam", "third", cwd=repo)
    git("revert", "--no-edit", "HEAD~1", cwd=repo, check=False)


def _picks_between(repo: Path) -> None:
    # Two picks, the first conflicting, resolved and committed by hand: only the
    # sequencer says a cherry-pick goes on.
    git("checkout", "-q", "other", cwd=repo)
    (repo / "more.txt").write_text("more\n")
    git("add", "more.txt", cwd=repo)
    git("commit", "-qm", "more", cwd=repo)
    git("checkout", "-q", "main", cwd=repo)
    git("cherry-pick", "other~1", "other", cwd=repo, check=False)
    git("checkout", "-q", "--theirs", "README.md", cwd=repo)
    git("commit", "-qam", "resolved", cwd=repo)


def _am_stopped(repo: Path) -> None:
    patch = git("format-patch", "--stdout", "-1", "other", cwd=repo).stdout
    git("am", cwd=repo, input=patch, check=False)


def _bisecting(repo: Path) -> None:
    git("bisect", "start", cwd=repo)


def _env(**values: str) -> dict[str, str]:
    import os

    return dict(os.environ, **values)


CASES: dict[str, tuple[Callable[[Path], None], str, str]] = {
    "rebase": (_rebase_stopped, "a rebase", "finish it with `git rebase --continue` or abort "
                                            "it with `git rebase --abort`"),
    "merge": (_merge_conflicted, "a merge", "conclude it with `git commit` or abort it with "
                                            "`git merge --abort`"),
    "cherry-pick": (_cherry_pick_conflicted, "a cherry-pick",
                    "finish it with `git cherry-pick --continue` or abort it with "
                    "`git cherry-pick --abort`"),
    "revert": (_revert_conflicted, "a revert", "finish it with `git revert --continue` or "
                                               "abort it with `git revert --abort`"),
    "sequencer": (_picks_between, "a cherry-pick",
                  "finish it with `git cherry-pick --continue` or abort it with "
                  "`git cherry-pick --abort`"),
    "am": (_am_stopped, "`git am`", "finish it with `git am --continue` or abort it with "
                                    "`git am --abort`"),
    "bisect": (_bisecting, "a bisect", "end it with `git bisect reset`"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_merge_refuses_while_git_is_in_the_middle_of_something(repo: Path, case: str) -> None:
    rid = agent_run(repo, {"work.txt": "work\n"})
    _two_commits(repo)
    start, what, how = CASES[case]
    start(repo)
    before = head_of(repo)
    refused = iterare("merge", "--yes", rid, cwd=repo)
    assert (refused.returncode, refused.stdout, refused.stderr) == (
        1, "", f"error: {what} is in progress in this worktree; not merging ({how})\n")
    assert head_of(repo) == before and not (repo / "work.txt").exists()


def test_merge_goes_on_once_the_rebase_is_done(repo: Path) -> None:
    rid = agent_run(repo, {"work.txt": "work\n"})
    _two_commits(repo)
    _rebase_stopped(repo)
    assert iterare("merge", "--yes", rid, cwd=repo).returncode == 1
    git("rebase", "--continue", cwd=repo)
    merged = iterare("merge", "--yes", rid, cwd=repo)
    assert merged.returncode == 0, merged.stderr
    assert (repo / "work.txt").read_text() == "work\n"


def test_a_linked_worktree_has_its_own_state(repo: Path, tmp_path: Path) -> None:
    """A rebase stopped in another worktree does not stop a merge here, and one stopped in
    a linked worktree stops a merge there (the state is per worktree, as git keeps it)."""
    rid = agent_run(repo, {"work.txt": "work\n"})
    _two_commits(repo)
    linked = tmp_path / "linked"
    git("worktree", "add", "-q", "-b", "side", str(linked), "main", cwd=repo)
    _rebase_stopped(linked)
    there = iterare("merge", "--yes", rid, cwd=linked)
    assert there.returncode == 1 and "a rebase is in progress" in there.stderr
    here = iterare("merge", "--yes", rid, cwd=repo)
    assert here.returncode == 0, here.stderr
