"""``cleanup`` of a run whose agent left directories it cannot enter (mode 000): it makes
them removable and removes them, and when something still cannot be removed it says so in
one line and leaves the run listed and cleanable again (found by an adversarial test: a
traceback, and the worktree unregistered while its files stayed).

Root ignores permissions, so the cleanup runs as an unprivileged uid (``nobody``) that
owns the repository, with real git."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from git_iterare.git import repo as repo_mod
from git_iterare.runner import workspace
from git_iterare.runs.store import RunStore
from tests.conftest import git
from tests.runs_helpers import make_run
from tests.unprivileged import user_bin

NOBODY = 65534


@pytest.fixture
def top() -> Iterator[Path]:
    """A folder ``nobody`` can reach (pytest's temporary folders are root's alone)."""
    if os.geteuid() != 0:
        pytest.skip("needs root, to run the cleanup as another uid")
    path = Path(f"/tmp/itr-cleanup-{os.getpid()}")
    path.mkdir(mode=0o755)
    try:
        yield path
    finally:
        subprocess.run(["chmod", "-R", "u+rwX", str(path)], capture_output=True, check=False)
        shutil.rmtree(path, ignore_errors=True)


def as_nobody(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    """Run ``args`` as ``nobody`` with this checkout's commands (made by
    :func:`tests.test_trust_boundary_e2e.user_bin` in the top folder) first on PATH."""
    home = cwd.parent / "home"
    env = dict(os.environ, HOME=str(home), XDG_CONFIG_HOME=str(home / ".config"),
               XDG_CACHE_HOME=str(home / ".cache"), XDG_STATE_HOME=str(home / ".state"),
               PATH=f"{cwd.parent / 'bin'}:/usr/local/bin:/usr/bin:/bin")
    return subprocess.run(["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}",
                           "--clear-groups", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, check=False)


def finished_run(top: Path) -> tuple[Path, str, workspace.RunWorkspace]:
    """A repository with a finished run whose worktree and run gitdir hold mode-000
    directories (``locked/inner``), all owned by ``nobody``."""
    repo = top / "repo"
    repo.mkdir()
    (top / "home").mkdir()
    user_bin(top)
    git("init", "-q", "-b", "main", cwd=repo)
    (repo / "README.md").write_text("hello\n")
    git("add", "README.md", cwd=repo)
    git("commit", "-qm", "initial", cwd=repo)
    rec = make_run(repo, "locked")
    r = repo_mod.discover(repo)
    ws = workspace.prepare_run(r, rec.id, "HEAD", alternates=str(r.common_dir / "objects"))
    store = RunStore(repo)
    store.transition(rec.id, "running")
    store.set_head(rec.id, git("rev-parse", "HEAD", cwd=repo).stdout.strip())
    store.transition(rec.id, "failed", exit_code=1)
    for tree in (ws.worktree, ws.gitdir):
        (tree / "locked" / "inner").mkdir(parents=True)
        (tree / "locked" / "inner" / "file").write_text("x\n")
        (tree / "locked" / "link").symlink_to(top / "home")
    subprocess.run(["chown", "-R", f"{NOBODY}:{NOBODY}", str(top)], check=True)
    for tree in (ws.worktree, ws.gitdir):
        (tree / "locked" / "inner").chmod(0)
        (tree / "locked").chmod(0)
    return repo, rec.id, ws


def status(repo: Path, rid: str) -> str:
    """The run's recorded status (read as the repository's owner)."""
    out = as_nobody("git", "show", f"refs/iterare/runs/{rid}:run.json", cwd=repo)
    assert out.returncode == 0, out.stderr
    return str(json.loads(out.stdout)["status"])


def worktrees(repo: Path) -> str:
    listed = as_nobody("git", "worktree", "list", "--porcelain", cwd=repo)
    assert listed.returncode == 0, listed.stderr
    return listed.stdout


def test_cleanup_removes_directories_the_agent_locked(top: Path) -> None:
    repo, rid, ws = finished_run(top)
    done = as_nobody("git", "iterare", "cleanup", "-y", "--force", rid, cwd=repo)
    assert (done.returncode, done.stderr) == (0, ""), done.stderr
    assert done.stdout == f"cleaned {rid} (record and commits kept)\n"
    assert not os.path.lexists(ws.worktree) and not os.path.lexists(ws.gitdir)
    assert str(ws.worktree) not in worktrees(repo)
    assert status(repo, rid) == "cleaned"
    assert (top / "home").is_dir()  # the symlink's target is left alone
    assert (top / "home").stat().st_mode & 0o777 == 0o755


def test_what_cannot_be_removed_is_one_line_and_cleanup_can_run_again(top: Path) -> None:
    repo, rid, ws = finished_run(top)
    # A directory of another owner (root) that nobody may write: no chmod helps.
    stuck = ws.worktree / "stuck"
    stuck.mkdir()
    (stuck / "file").write_text("x\n")
    stuck.chmod(0o555)
    failed = as_nobody("git", "iterare", "cleanup", "-y", "--force", rid, cwd=repo)
    assert failed.returncode == 1
    assert failed.stderr == (
        f"error: cannot remove {stuck / 'file'} of run {rid}: Permission denied (make it "
        f"yours and writable, e.g. `chmod -R u+rwX {ws.worktree}` as its owner, then run "
        f"`git iterare cleanup {rid}` again)\n")
    assert "Traceback" not in failed.stderr
    # Nothing half-done: the run is listed and its worktree still registered.
    assert status(repo, rid) == "failed"
    assert str(ws.worktree) in worktrees(repo)
    listed = as_nobody("git", "iterare", "list", "--format", "porcelain", cwd=repo)
    assert rid in listed.stdout, listed.stderr
    os.chown(stuck, NOBODY, NOBODY)
    again = as_nobody("git", "iterare", "cleanup", "-y", "--force", rid, cwd=repo)
    assert again.returncode == 0, again.stderr
    assert not os.path.lexists(ws.worktree) and not os.path.lexists(ws.gitdir)
    assert not os.path.lexists(ws.gitfile)
    assert str(ws.worktree) not in worktrees(repo)
    assert status(repo, rid) == "cleaned"
