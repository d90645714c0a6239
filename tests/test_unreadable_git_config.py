"""A git config file the user cannot read (``~/.gitconfig`` of mode 000): git skips it, and
so do git-iterare's own ref moves (no dulwich traceback); should dulwich still trip on such
a file, the command ends with one line naming it. Root reads any file, so the command runs
as ``nobody`` (see tests/test_cleanup_permissions.py)."""

from __future__ import annotations

import os
from pathlib import Path

from git_iterare.cli.main import _unreadable_git_config
from tests.test_cleanup_permissions import NOBODY, as_nobody, finished_run, status, top

__all__ = ["top"]  # the fixture


def test_cleanup_works_when_the_users_git_config_is_unreadable(top: Path) -> None:
    repo, rid, _ws = finished_run(top)
    gitconfig = top / "home" / ".gitconfig"
    gitconfig.write_text("[user]\n\tname = Unread\n")
    os.chown(gitconfig, NOBODY, NOBODY)
    gitconfig.chmod(0)
    done = as_nobody("git", "iterare", "cleanup", "-y", "--force", rid, cwd=repo)
    assert (done.returncode, done.stderr) == (0, ""), done.stderr
    assert status(repo, rid) == "cleaned"
    branches = as_nobody("git", "branch", "--list", f"iterare/{rid}", cwd=repo)
    assert (branches.returncode, branches.stdout) == (0, "")
    # The branch's reflog names whom git names (the environment's committer here).
    last = (repo / ".git" / "logs" / "refs" / "heads" / "iterare" / rid).read_text()
    _old, new, who = last.splitlines()[-1].split(" ", 2)
    assert new == "0" * 40
    assert who.startswith("Test Committer <committer@example.com> ")
    assert who.endswith(f"\titerare: remove run {rid}")


def test_a_config_file_dulwich_cannot_read_is_one_line(tmp_path: Path) -> None:
    from dulwich.config import ConfigFile

    try:
        ConfigFile.from_path(str(tmp_path))  # a folder: unreadable as a file, root or not
    except OSError as exc:
        error = _unreadable_git_config(exc)
    assert error is not None
    assert (error.exit_code, error.render()) == (
        2, f"cannot read the git config file {tmp_path}: Is a directory (make it readable "
           f"with `chmod u+r {tmp_path}`, or move it away)")
    assert _unreadable_git_config(IsADirectoryError(21, "Is a directory", "x")) is None
    assert _unreadable_git_config(ValueError("x")) is None
