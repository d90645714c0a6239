"""A live run's trees never run the agent's git config for the user who looks at them,
also with ``safe.directory = *`` in the user's global config, which switches git's
ownership check off (issue 25, item 7): as root and as an unprivileged user the test
creates.

While the agent runs, its nested repositories (a ``.git`` it made anywhere, a submodule
folder of the base it made a repository) and its run gitdir's config would name programs
git runs (``core.fsmonitor``). The user's shell prompt, editor or a repository scanner runs
git where the user looks: in the run's worktree, in its folders, in the user's checkout.
None of them may reach the agent's config, while the run is live or after it ended."""

from __future__ import annotations

import os
import pwd
import subprocess
import time
from pathlib import Path

import pytest

from tests.conftest import git, iterare
from tests.runs_helpers import prompt, record, run_id
from tests.test_runs_e2e import project  # noqa: F401  (fixture)
from tests.test_trust_boundary_e2e import user, user_repo  # noqa: F401  (fixtures)
from tests.unprivileged import as_user

pytestmark = pytest.mark.docker

#: The agent's trap: nested repositories (one in the folder of a submodule the base
#: records, which the user's own `git status` in the worktree looks into) and its run
#: gitdir, each naming a program for git to run. Prints "ready", then waits to be stopped.
TRAP = """\
for d in src/lib vendor/mod; do
    mkdir -p "$d" && (cd "$d" && git init -q &&
        git config core.fsmonitor 'echo "$PWD" >> "$HOME/pwned"; false')
done
git config core.fsmonitor 'echo "$PWD" >> "$HOME/pwned"; false'
git config core.worktree ..
echo ready
sleep 600
"""


def with_submodule(repo: Path) -> None:
    """Commit a gitlink ``vendor/mod`` (a submodule not initialized here) on main."""
    head = git("rev-parse", "HEAD", cwd=repo).stdout.strip()
    git("update-index", "--add", "--cacheinfo", f"160000,{head},vendor/mod", cwd=repo)
    git("commit", "-qm", "a submodule", cwd=repo)


def wait_ready(rid: str, timeout: float = 90) -> None:
    """Wait until the run's agent printed ``ready`` (its container's output: where its
    files are on the host is not the test's business)."""
    deadline = time.monotonic() + timeout
    while b"ready" not in subprocess.run(["docker", "logs", f"iterare-{rid}"],
                                         capture_output=True, check=False).stdout:
        assert time.monotonic() < deadline, "the agent never got going"
        time.sleep(0.3)


def places(repo: Path, rid: str, found: str) -> list[Path]:
    """Where a user's tools run git for the run: the run's worktree and its folders, the
    user's checkout, and the folders of the ``.git`` entries a repository scanner walking
    the checkout ``found`` (``find`` output)."""
    worktree = repo / ".iterare" / "worktrees" / rid
    return [repo, worktree, worktree / "src", worktree / "src" / "lib",
            worktree / "vendor" / "mod", *(Path(p).parent for p in found.split())]


#: A scanner as editors' git integrations are: folders holding ``.git``, never entering one.
PRUNING = ["find", ".", "-name", ".git", "-prune", "-print"]
#: One that looks everywhere it can (``fd -H``, a search for every ``.git``).
EVERYWHERE = ["find", ".", "-name", ".git", "-print"]


LOOK = 'cd "$1" 2>/dev/null && git status --porcelain >/dev/null 2>&1; git -C "$1" log -1 ' \
       '>/dev/null 2>&1; true'


def test_live_run_runs_no_agent_config_for_root_with_safe_directory_star(
        project: Path, hermetic_env: Path) -> None:  # noqa: F811
    with_submodule(project)
    git("config", "--global", "safe.directory", "*", cwd=project)
    pwned = hermetic_env / "pwned"
    prompt(project, "trap", TRAP)
    started = iterare("execute", "trap", cwd=project)
    assert started.returncode == 0, started.stderr
    rid = run_id(started.stdout)
    wait_ready(rid)
    found = subprocess.run(PRUNING, cwd=project, capture_output=True, text=True).stdout
    for where in places(project, rid, found):
        subprocess.run(["sh", "-c", LOOK, "sh", str(where)], cwd=project, check=False)
    assert not pwned.exists(), pwned.read_text()
    # The run's worktree is still git's: listed, and kept from `git worktree prune`.
    assert git("worktree", "prune", cwd=project).returncode == 0
    listed = git("worktree", "list", "--porcelain", cwd=project).stdout
    assert f"worktree {project}/.iterare/worktrees/{rid}\n" in listed
    assert "locked" in listed.split(f"worktrees/{rid}\n", 1)[1].split("\n\n")[0]
    assert record(project, rid)["status"] == "running"

    stopped = iterare("stop", rid, cwd=project)
    assert stopped.returncode == 0, stopped.stderr
    # Ended: the worktree is where the man page says, the user's, its nested repositories
    # disabled and the run gitdir's config the host's own: git there runs nothing either.
    worktree = project / ".iterare" / "worktrees" / rid
    assert (worktree / "src" / "lib").is_dir()
    assert worktree.stat().st_uid == os.getuid()
    gitdir = project / ".git" / "iterare" / "gitdirs" / rid
    found = subprocess.run(EVERYWHERE, cwd=project, capture_output=True, text=True).stdout
    for where in [*places(project, rid, found), gitdir, gitdir / "refs"]:
        subprocess.run(["sh", "-c", LOOK, "sh", str(where)], cwd=project, check=False)
    assert not pwned.exists(), pwned.read_text()
    listed = git("worktree", "list", "--porcelain", cwd=project).stdout
    assert "locked" not in listed
    assert git("status", "--porcelain", cwd=worktree).returncode == 0
    assert record(project, rid)["status"] == "stopped"


def test_live_run_runs_no_agent_config_for_an_unprivileged_user_with_safe_directory_star(
        user: pwd.struct_passwd, user_repo: Path) -> None:  # noqa: F811
    repo = user_repo
    home = Path(user.pw_dir)
    head = as_user(user, "git", "rev-parse", "HEAD", cwd=repo).stdout.strip()
    for args in (["git", "config", "--global", "safe.directory", "*"],
                 ["git", "update-index", "--add", "--cacheinfo", f"160000,{head},vendor/mod"],
                 ["git", "commit", "-qm", "a submodule"],
                 ["mkdir", "-p", ".iterare/prompts"]):
        done = as_user(user, *args, cwd=repo)
        assert done.returncode == 0, done.stderr
    as_user(user, "sh", "-c", 'printf "%s" "$0" > .iterare/prompts/trap.md',
            f"---\nagent: shell\n---\n{TRAP}", cwd=repo)
    started = as_user(user, "git", "iterare", "execute", "trap", cwd=repo)
    assert started.returncode == 0, started.stderr
    rid = run_id(started.stdout)
    wait_ready(rid)
    for where in places(repo, rid, as_user(user, *EVERYWHERE, cwd=repo).stdout):
        as_user(user, "sh", "-c", LOOK, "sh", str(where), cwd=repo)
    assert not (home / "pwned").exists(), (home / "pwned").read_text()
    stopped = as_user(user, "git", "iterare", "stop", rid, cwd=repo)
    assert stopped.returncode == 0, stopped.stderr
    worktree = repo / ".iterare" / "worktrees" / rid
    gitdir = repo / ".git" / "iterare" / "gitdirs" / rid
    found = as_user(user, *EVERYWHERE, cwd=repo).stdout
    for where in [*places(repo, rid, found), gitdir, gitdir / "refs"]:
        as_user(user, "sh", "-c", LOOK, "sh", str(where), cwd=repo)
    assert not (home / "pwned").exists(), (home / "pwned").read_text()
    assert worktree.stat().st_uid == user.pw_uid
    assert (worktree / "src" / "lib").is_dir()
    cleaned = as_user(user, "git", "iterare", "cleanup", "--force", "-y", rid, cwd=repo)
    assert cleaned.returncode == 0, cleaned.stderr


def test_a_worktree_that_cannot_land_stays_live_and_finish_brings_it_later(
        project: Path) -> None:  # noqa: F811
    prompt(project, "wait", "echo work > work.txt\necho ready\nsleep 600\n")
    started = iterare("execute", "wait", cwd=project)
    assert started.returncode == 0, started.stderr
    rid = run_id(started.stdout)
    wait_ready(rid)
    worktree = project / ".iterare" / "worktrees" / rid
    worktree.mkdir()
    (worktree / "mine.txt").write_text("in the way\n")
    stopped = iterare("stop", rid, cwd=project)
    live = f"{project}/.git/iterare/live/{rid}"
    assert (f"its work could not be committed (cannot move the run's worktree from {live} "
            f"to {worktree}: Directory not empty); it is kept in {live}, and `git iterare "
            f"finish {rid}` commits it") in stopped.stderr, stopped.stderr
    (worktree / "mine.txt").unlink()
    finished = iterare("finish", rid, cwd=project)
    assert finished.returncode == 0, finished.stderr
    assert (worktree / "work.txt").read_text() == "work\n"
    assert git("show", f"iterare/{rid}:work.txt", cwd=project).stdout == "work\n"
