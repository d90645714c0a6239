"""A local run's worktree while it is live and when it lands (git_iterare.runner.livetree),
with real git and no Docker: made out of the user's checkout, registered and locked where
it lands, brought there inert, removed from wherever it is."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import pytest

from git_iterare.errors import OperationFailed
from git_iterare.git.repo import discover
from git_iterare.git.safegit import DISABLED_GIT
from git_iterare.runner import livetree, workspace
from tests.conftest import git

RUN = "demo-0123abcd"


def live_run(repo: Path) -> workspace.RunWorkspace:
    r = discover(repo)
    ws = workspace.make_run(r, RUN, "HEAD", alternates=str(r.common_dir / "objects"),
                            live=True)
    workspace.fill_run(r, ws)
    return ws


def test_a_live_worktree_is_out_of_the_checkout_and_registered_where_it_lands(
        repo: Path) -> None:
    ws = live_run(repo)
    live = repo / ".git" / "iterare" / "live" / RUN
    assert (ws.live, ws.tree) == (live, live)
    assert ws.worktree == repo / ".iterare" / "worktrees" / RUN
    assert not ws.worktree.exists()
    assert (live / "README.md").read_text() == "hello\n"
    assert ws.mounts[0].host_path == live and ws.mounts[0].container_path == "/workspace"
    assert stat.S_IMODE(live.parent.stat().st_mode) == livetree.LIVE_ROOT_MODE
    # git has it where it lands, locked: `git worktree prune` keeps it meanwhile.
    git("worktree", "prune", cwd=repo)
    listed = git("worktree", "list", "--porcelain", cwd=repo).stdout
    assert f"worktree {ws.worktree}\n" in listed
    assert f"locked {livetree.LOCK_REASON}\n" in listed
    # Found again from its id (another command, after a restart).
    assert workspace.open_run(discover(repo), RUN, ws.base_commit).tree == live


def test_landing_disables_nested_repositories_and_the_gitdirs_config(repo: Path) -> None:
    ws = live_run(repo)
    nested = ws.tree / "src" / "lib"
    nested.mkdir(parents=True)
    git("init", "-q", cwd=nested)
    (ws.gitdir / "config").write_text("[core]\n\tfsmonitor = touch-pwned\n\tworktree = ..\n")
    (ws.gitdir / "commondir").write_text("../../elsewhere\n")
    workspace.land(discover(repo), ws)
    assert not os.path.lexists(ws.tree) or ws.tree == ws.worktree
    assert (ws.worktree / "README.md").read_text() == "hello\n"
    assert (ws.worktree / "src" / "lib" / DISABLED_GIT).is_dir()
    assert not (ws.worktree / "src" / "lib" / ".git").exists()
    assert (ws.gitdir / "config").read_text() == workspace.run_gitdir_config(discover(repo))
    assert not (ws.gitdir / "commondir").exists()
    assert "locked" not in git("worktree", "list", "--porcelain", cwd=repo).stdout
    assert git("status", "--porcelain", cwd=ws.worktree).stdout == "?? src/\n"
    workspace.land(discover(repo), ws)  # again: nothing left to do


def test_landing_over_something_else_keeps_the_live_worktree(repo: Path) -> None:
    ws = live_run(repo)
    ws.worktree.mkdir(parents=True)
    (ws.worktree / "mine.txt").write_text("the user's\n")
    with pytest.raises(OperationFailed, match=r"cannot move the run's worktree from .*live"):
        workspace.land(discover(repo), ws)
    assert (ws.tree / "README.md").is_file()


def test_a_copy_that_landed_before_a_kill_is_taken_as_landed(repo: Path) -> None:
    """Across file systems the worktree is copied and renamed into place: a process
    killed after that, before the live copy went, left both; the next finish keeps the
    landed one."""
    ws = live_run(repo)
    subprocess.run(["cp", "-a", str(ws.tree), str(ws.worktree)], check=True)
    workspace.land(discover(repo), ws)
    assert not ws.tree.exists() or ws.tree == ws.worktree
    assert not (repo / ".git" / "iterare" / "live" / RUN).exists()
    assert (ws.worktree / "README.md").is_file()


def test_cleanup_removes_a_live_worktree_and_its_registration(repo: Path) -> None:
    ws = live_run(repo)
    workspace.remove_run_files(discover(repo), ws)
    assert not (repo / ".git" / "iterare" / "live" / RUN).exists()
    assert git("worktree", "list", "--porcelain", cwd=repo).stdout.count("worktree ") == 1


def test_the_config_of_a_run_gitdir_is_replaced_whatever_it_became(tmp_path: Path) -> None:
    gitdir = tmp_path / "run"
    (gitdir / "config").mkdir(parents=True)
    (gitdir / "config.worktree").symlink_to("/etc/passwd")
    livetree.inert_gitdir(gitdir, "[core]\n\tbare = false\n")
    assert (gitdir / "config").read_text() == "[core]\n\tbare = false\n"
    assert not os.path.lexists(gitdir / "config.worktree")
