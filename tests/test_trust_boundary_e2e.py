"""Issue 8's found cases through the real sandbox: the agent's exit status is its own, the
trees it could write come back inert and the user's, and a live run's nested repository
never runs a program for the user who looks at it (git iterare run as an unprivileged
user the test creates, as the agent's uid then differs from the user's)."""

from __future__ import annotations

import os
import pwd
import stat
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from git_iterare.sandbox import agent_ids
from tests.conftest import iterare
from tests.test_runs_e2e import project, prompt, record, run_id  # noqa: F401  (fixture)
from tests.unprivileged import as_user, new_user, user_folder, user_repository

pytestmark = pytest.mark.docker


def test_agent_exit_94_is_the_agents_own(project: Path) -> None:  # noqa: F811
    """94 once meant "the firewall self-check failed"; the sandbox's own set-up now runs
    in its sidecar, so every status of the agent's container is the agent's."""
    prompt(project, "quits", "echo partial > partial.txt\nexit 94\n")
    done = iterare("execute", "quits", "--follow", cwd=project)
    assert done.returncode == 1, done.stderr
    rec = record(project, run_id(done.stdout))
    assert (rec["status"], rec["exit_code"]) == ("failed", 94)
    assert rec["error"] == "the agent exited with status 94"
    assert "self-check" not in done.stderr


def test_set_uid_files_and_fifos_do_not_survive_the_run(project: Path) -> None:  # noqa: F811
    prompt(project, "suid", 'g=$(git rev-parse --git-dir)\ncp /bin/bash "$g/evil"\n'
           'chmod 4755 "$g/evil"\ncp /bin/bash tool\nchmod 6755 tool\nmkfifo "$g/pipe"\n'
           'mkfifo jam\nls -l "$g/evil"\n')
    done = iterare("execute", "suid", "--follow", cwd=project)
    assert done.returncode == 0, done.stderr
    rid = run_id(done.stdout)
    assert "-rwsr-xr-x" in done.stdout  # it was set-uid while the agent ran
    assert "removed special file: " in done.stderr
    gitdir = project / ".git" / "iterare" / "gitdirs" / rid
    worktree = project / ".iterare" / "worktrees" / rid
    for tree in (gitdir, worktree):
        for path in [tree, *tree.rglob("*")]:
            mode = path.lstat().st_mode
            assert not mode & (stat.S_ISUID | stat.S_ISGID), path
            assert not (stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)), path
            assert path.lstat().st_uid == os.getuid(), path
    assert (gitdir / "evil").is_file() and (worktree / "tool").is_file()
    assert record(project, rid)["status"] == "succeeded"


# --- as an unprivileged user -------------------------------------------------------------

@pytest.fixture
def user(sandbox_image: str) -> Iterator[pwd.struct_passwd]:
    """A user of this machine (not root) who may use the Docker engine, with the test
    image configured in their own (trusted) config."""
    with new_user(groups=["docker"]) as entry:
        config = Path(entry.pw_dir) / ".config" / "iterare"
        config.mkdir(parents=True)
        (config / "config.toml").write_text(
            f'[docker]\nimage = "{sandbox_image}"\ncpus = 1\nmemory = "1g"\n'
            '[run]\nagent = "shell"\n')
        subprocess.run(["chown", "-R", f"{entry.pw_uid}:{entry.pw_gid}",
                        str(Path(entry.pw_dir) / ".config")], check=True)
        yield entry


@pytest.fixture
def user_repo(user: pwd.struct_passwd) -> Iterator[Path]:
    """A repository of ``user``'s after ``git iterare init``, in a folder of theirs that
    also holds this checkout's commands (:func:`user_bin`); its containers and the folder
    are removed afterwards."""
    with user_folder(user, "unprivileged") as top:
        try:
            yield user_repository(user, top, "iterare", "init")
        finally:
            subprocess.run(["docker", "rm", "-f", *subprocess.run(
                ["docker", "ps", "-aq", "--filter", f"label=dev.iterare.repo={top / 'repo'}"],
                capture_output=True, text=True, check=False).stdout.split()],
                capture_output=True, check=False)


def test_live_nested_repository_runs_nothing_for_the_user(user: pwd.struct_passwd,
                                                          user_repo: Path) -> None:
    repo = user_repo
    prompts = repo / ".iterare" / "prompts"
    as_user(user, "mkdir", "-p", str(prompts), cwd=repo)
    as_user(user, "sh", "-c", f"printf '%s' \"$0\" > {prompts}/trap.md",
            "---\nagent: shell\n---\nmkdir -p src/lib && cd src/lib && git init -q && "
            "git config core.fsmonitor 'id > \"$HOME/pwned\"; false'\ntouch ready\n"
            "sleep 20\n", cwd=repo)
    started = as_user(user, "git", "iterare", "execute", "trap", cwd=repo)
    assert started.returncode == 0, started.stderr
    rid = run_id(started.stdout)
    worktree = repo / ".iterare" / "worktrees" / rid
    live = repo / ".git" / "iterare" / "live" / rid  # out of the checkout while live
    deadline = time.monotonic() + 60
    while not (live / "src" / "lib" / "ready").exists():
        assert time.monotonic() < deadline, "the agent never got going"
        time.sleep(0.3)
    # While the run is live, its trees are the agent's (a uid no account has) and lie
    # in a directory of the user's that nobody may list.
    assert stat.S_IMODE(live.parent.stat().st_mode) == 0o300
    assert live.parent.stat().st_uid == user.pw_uid
    assert live.stat().st_uid == agent_ids()[0] != user.pw_uid
    assert not worktree.exists()
    # Who goes there anyway and runs git: git refuses the repository it does not own, and
    # the agent's fsmonitor never runs (test_live_trees_e2e.py: with safe.directory=*).
    for where in (live / "src" / "lib", live):
        looked = as_user(user, "git", "status", cwd=where)
        assert "dubious ownership" in looked.stderr, looked.stderr
    assert not (Path(user.pw_dir) / "pwned").exists()
    finished = as_user(user, "git", "iterare", "stop", rid, cwd=repo)
    assert finished.returncode == 0, finished.stderr
    status = as_user(user, "git", "iterare", "list", cwd=repo)
    assert rid in status.stdout
    # Afterwards: the user's again, the nested repository disabled.
    assert worktree.stat().st_uid == user.pw_uid
    after = as_user(user, "git", "status", "--porcelain", cwd=worktree / "src" / "lib")
    assert "dubious ownership" not in after.stderr
    assert not (Path(user.pw_dir) / "pwned").exists()
    shown = as_user(user, "git", "show", f"refs/iterare/runs/{rid}:run.json", cwd=repo)
    assert '"status": "stopped"' in shown.stdout, shown.stdout + shown.stderr
    # Nothing in the user's repository is left to root or another account (the
    # sidecar's status and DNS log included, found by an adversarial test).
    foreign = [p for p in (repo / ".git").rglob("*") if p.lstat().st_uid != user.pw_uid]
    assert foreign == []
    cleaned = as_user(user, "git", "iterare", "cleanup", "--force", "-y", rid, cwd=repo)
    assert cleaned.returncode == 0, cleaned.stderr
    assert not (repo / ".git" / "iterare" / "state" / rid).exists()


@pytest.mark.parametrize("worktree_made", [True, False])
def test_cleanup_gives_back_trees_an_interrupted_launch_left_to_the_agent(
        user: pwd.struct_passwd, user_repo: Path, worktree_made: bool) -> None:
    """Ctrl-C after the sidecar gave the trees to the agent's uid, before the agent
    started, left them that uid's (and the sidecar's output root's): unprivileged, cleanup
    failed with a hint to act as an owner that has no account; killed before the worktree
    was made, the output stayed root's for good (found by helpers)."""
    repo = user_repo
    as_user(user, "sh", "-c", "printf -- '---\\nagent: shell\\n---\\ntrue\\n' "
            "> .iterare/prompts/quick.md", cwd=repo)
    started = as_user(user, "git", "iterare", "execute", "quick", "-f", cwd=repo)
    assert started.returncode == 0, started.stderr
    rid = run_id(started.stdout)
    # As the interrupted launch left them:
    gitdir = repo / ".git" / "iterare" / "gitdirs" / rid
    trees = [repo / ".iterare" / "worktrees" / rid, gitdir, gitdir.with_name(rid + ".gitfile")]
    uid, gid = agent_ids()
    if worktree_made:
        subprocess.run(["chown", "-R", f"{uid}:{gid}", *map(str, trees)], check=True)
    else:
        as_user(user, "git", "worktree", "remove", "--force", str(trees[0]), cwd=repo)
        for tree in trees[1:]:
            subprocess.run(["rm", "-rf", str(tree)], check=True)
    out = repo / ".git" / "iterare" / "state" / rid / "out"
    out.mkdir(exist_ok=True)
    (out / "dns.log").write_text("x\n")
    subprocess.run(["chown", "-R", "0:0", str(out)], check=True)
    out.chmod(0o711)
    cleaned = as_user(user, "git", "iterare", "cleanup", "-y", rid, cwd=repo)
    assert cleaned.returncode == 0, cleaned.stderr
    assert not any(p.exists() for p in trees)
    assert not out.parent.exists()


def test_iterare_directories_in_a_users_credentials_folder(user: pwd.struct_passwd,
                                                           user_repo: Path) -> None:
    """iterare's runs made Docker (root) create .credentials.json and .claude.json as
    directories in the user's credentials folder: --force keeps the stored key and names
    them, and the command it names removes them, unprivileged."""
    folder = Path(user.pw_dir) / ".config" / "iterare"

    def store(token: str, *flags: str) -> subprocess.CompletedProcess:
        return as_user(user, "sh", "-c", f"echo {token} | git iterare credentials --agent "
                       f"claude {' '.join(flags)} --token-file -", cwd=user_repo)

    stored = store("sk-ant-api03-first")
    assert stored.returncode == 0, stored.stderr
    for name in (".credentials.json", ".claude.json"):
        (folder / name).mkdir(mode=0o755)  # root's, as Docker made them
    one, two = folder / ".credentials.json", folder / ".claude.json"
    again = store("sk-ant-api03-second", "--force")
    assert (again.returncode, again.stderr) == (
        2, f"error: {one}, {two}: directories where credential files belong (Docker makes "
           f"a directory when it mounts a missing file, as iterare's runs did) (remove them: "
           f"rmdir {one} {two})\n")
    assert (folder / "anthropic-api-key").read_text() == "sk-ant-api03-first\n"
    assert as_user(user, "rmdir", str(one), str(two), cwd=user_repo).returncode == 0
    again = store("sk-ant-api03-second", "--force")
    assert again.returncode == 0, again.stderr
    assert (folder / "anthropic-api-key").read_text() == "sk-ant-api03-second\n"
