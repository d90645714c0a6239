"""Spare network sidecars for real (git_iterare.sandbox.warm.spare): runs that follow one another
on Docker's default bridge leave a locked sidecar for the next, which claims it and gets its
own policy enforced and its trees made inert and given back at the end; an unclaimed spare
ends itself; cleanup removes a waiting one; a run on a network of the user's leaves none."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import git, iterare
from tests.runs_helpers import prompt, record, run_id
from tests.sandbox_fixtures import TEST_IMAGE

pytestmark = pytest.mark.docker


@pytest.fixture
def project(repo: Path, sandbox_image: str) -> Iterator[Path]:
    """A repository whose runs use the test image on Docker's default bridge (set in the
    user's configuration, which needs no approval)."""
    (repo / ".iterare" / "prompts").mkdir(parents=True)
    (repo / ".iterare" / ".gitignore").write_text("/worktrees/\n")
    git("add", ".iterare", cwd=repo)
    git("commit", "-qm", "iterare", cwd=repo)
    user_config("")
    yield repo
    ids = subprocess.run(["docker", "ps", "-aq", "--filter", f"label=dev.iterare.repo={repo}"],
                         capture_output=True, text=True, check=False).stdout.split()
    if ids:
        subprocess.run(["docker", "rm", "-f", *ids], capture_output=True, check=False)


@pytest.fixture
def servers(test_network: str) -> Iterator[tuple[str, str]]:
    """Addresses of two HTTP servers of the escape suite's image on the default bridge
    (answering "allowed:80" and "blocked:80")."""
    names = [f"itr-spare-{os.getpid()}-{role}" for role in ("allowed", "blocked")]
    try:
        addresses = []
        for name, role in zip(names, ("allowed", "blocked"), strict=True):
            subprocess.run(["docker", "run", "-d", "--name", name, "itr-sandbox-testnet:1",
                            "serve", role], capture_output=True, check=True)
            addresses.append(subprocess.run(
                ["docker", "inspect", "-f", "{{.NetworkSettings.IPAddress}}", name],
                capture_output=True, text=True, check=True).stdout.strip())
        yield addresses[0], addresses[1]
    finally:
        subprocess.run(["docker", "rm", "-f", *names], capture_output=True, check=False)


def spares(repo: Path) -> list[tuple[str, str]]:
    """(id, status) of the spare containers of ``repo`` on the engine."""
    out = subprocess.run(["docker", "ps", "-a", "--no-trunc", "--format",
                          "{{.ID}} {{.State}}", "--filter", "label=dev.iterare.spare",
                          "--filter", f"label=dev.iterare.repo={repo}"],
                         capture_output=True, text=True, check=True).stdout
    return [(line.split()[0], line.split()[1]) for line in out.splitlines()]


def user_config(text: str) -> None:
    """The user's configuration: the test image, the shell agent, small limits, and
    ``text``."""
    config = Path(os.environ["XDG_CONFIG_HOME"]) / "iterare" / "config.toml"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(f'[run]\nagent = "shell"\n[docker]\nimage = "{TEST_IMAGE}"\n'
                      f'cpus = 1\nmemory = "1g"\n{text}')


def run(repo: Path, name: str) -> tuple[str, str]:
    """Execute prompt ``name`` and follow it; (run id, output). It must succeed."""
    done = iterare("execute", name, "--follow", cwd=repo)
    assert done.returncode == 0, done.stdout + done.stderr
    return run_id(done.stdout), done.stdout


def net_prompt(repo: Path, allowed: str, blocked: str) -> None:
    """Prompt ``net``: reach the two servers, say its uid, leave a set-uid file and a FIFO
    in the worktree (see :func:`assert_trees_given_back`)."""
    prompt(repo, "net",
           f'echo "allowed: $(curl -s -m 5 http://{allowed}/ || echo refused)"\n'
           f'curl -s -m 3 http://{blocked}/ || echo blocked-refused\n'
           'echo "uid $(id -u)"\n'
           "touch suid && chmod 4755 suid && mkfifo fifo\n")


def assert_trees_given_back(repo: Path, rid: str) -> None:
    """After run ``rid`` of :func:`net_prompt`: its worktree is inert (no FIFO, no set-uid
    bit) and the user's again."""
    worktree = Path(record(repo, rid)["worktree"])
    assert not (worktree / "fifo").exists()
    assert (worktree / "suid").stat().st_mode & 0o7777 == 0o755
    assert {p.stat().st_uid for p in (worktree, worktree / "suid")} == {os.getuid()}


def test_runs_that_follow_one_another_claim_a_spare_that_enforces_their_own_policy(
        project: Path, servers: tuple[str, str]) -> None:
    allowed, blocked = servers
    net_prompt(project, allowed, blocked)
    run(project, "net")
    assert spares(project) == []  # a single run leaves nothing behind
    second, out = run(project, "net")
    assert "allowed: refused\n" in out  # nothing allowed yet
    assert record(project, second)["extra"]["sidecar"] == "own"  # none was waiting
    [(waiting, state)] = spares(project)
    assert state == "running"
    assert len(list((project / ".git" / "iterare" / "state").glob("spare-*"))) == 1

    # The spare was made during the second run; the third run's own policy is what holds.
    user_config(f'[firewall]\nallowed_cidrs = ["{allowed}/32"]\n')
    third, out = run(project, "net")
    assert "allowed: allowed:80\n" in out and "blocked-refused\n" in out
    assert record(project, third)["extra"]["sidecar"] == "spare"  # claimed
    assert f"uid {os.getuid()}\n" not in out
    # At the end the claimed sidecar made the trees inert and the user's again.
    assert_trees_given_back(project, third)
    # The claimed spare ended with its run, and this run left the next one.
    assert [s for s in spares(project) if s[0] == waiting] == []
    assert [state for _, state in spares(project)] == ["running"]


def test_an_unclaimed_spare_ends_itself_and_is_not_claimed(project: Path) -> None:
    user_config("spare_seconds = 10\n")
    prompt(project, "one", "echo one\n")
    run(project, "one")
    run(project, "one")
    assert [state for _, state in spares(project)] == ["running"]
    deadline = time.monotonic() + 40
    while spares(project) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert spares(project) == []  # it gave up and the engine removed it
    rid, out = run(project, "one")
    # None waits: it started its own sidecar.
    assert "one\n" in out and record(project, rid)["extra"]["sidecar"] == "own"


@pytest.mark.parametrize("left", ["waiting", "cut short", "folder gone"])
def test_cleanup_removes_a_waiting_spare(project: Path, left: str) -> None:
    prompt(project, "one", "echo one\n")
    run(project, "one")
    rid, _ = run(project, "one")
    assert len(spares(project)) == 1
    [folder] = (project / ".git" / "iterare" / "state").glob("spare-*")
    if left == "cut short":  # Ctrl-C ended the process before the spare was written down
        (folder / "spare.json").unlink()
    elif left == "folder gone":  # removed by hand: nobody can claim it any more
        shutil.rmtree(folder)
    done = iterare("cleanup", "-y", rid, cwd=project)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "removed 1 spare sidecar waiting for a next run"
    assert spares(project) == []
    assert not folder.exists()


def test_a_copy_of_the_repository_never_removes_the_originals_spare(
        project: Path, tmp_path: Path) -> None:
    """A copy of a repository's ``.git`` (``cp -a``, another user's, say) names the same
    spare tokens: its cleanup removes only spares labelled with its own repository."""
    prompt(project, "one", "echo one\n")
    run(project, "one")
    rid, _ = run(project, "one")
    [(waiting, _)] = spares(project)
    copy = tmp_path / "copy"
    shutil.copytree(project, copy, symlinks=True)
    [token] = [p.name for p in (copy / ".git" / "iterare" / "state").glob("spare-*")]
    done = iterare("cleanup", "--force", "-y", rid, cwd=copy)
    assert done.returncode == 0, done.stderr
    assert "spare sidecar" not in done.stdout  # none of its own was waiting
    assert spares(project) == [(waiting, "running")]
    assert not (copy / ".git" / "iterare" / "state" / token).exists()  # the copy's is gone
    later, _ = run(project, "one")
    assert record(project, later)["extra"]["sidecar"] == "spare"  # still claimable

    # A copy of .git elsewhere, with the original's work tree (GIT_DIR, GIT_WORK_TREE).
    run(project, "one")
    [(waiting, _)] = spares(project)
    shutil.copytree(project / ".git", tmp_path / "gd", symlinks=True)
    done = iterare("cleanup", "--force", "-y", later, cwd=tmp_path,
                   env={"GIT_DIR": str(tmp_path / "gd"), "GIT_WORK_TREE": str(project)})
    assert "spare sidecar" not in done.stdout, done.stdout + done.stderr
    assert spares(project) == [(waiting, "running")]


def test_a_spare_whose_tree_folder_was_replaced_is_not_claimed(project: Path) -> None:
    prompt(project, "one", "echo one\n")
    run(project, "one")
    run(project, "one")
    [(waiting, _)] = spares(project)
    live = project / ".git" / "iterare" / "live"  # where a live run's worktree is
    live.rename(live.with_name("live-old"))
    live.mkdir(mode=0o300)  # the spare has the old folder mounted, not this one
    rid, out = run(project, "one")
    # One waits, but cannot serve: it started its own.
    assert "one\n" in out and record(project, rid)["extra"]["sidecar"] == "own"
    # The spare made for the old folder is swept for one of the new folder.
    assert [s for s in spares(project) if s[0] == waiting] == []


def test_runs_on_a_network_of_the_user_leave_no_spare(project: Path) -> None:
    network = f"itr-spare-net-{os.getpid()}"
    subprocess.run(["docker", "network", "create", network], capture_output=True, check=True)
    try:
        user_config(f'network = "{network}"\n')
        prompt(project, "one", "echo one\n")
        run(project, "one")
        run(project, "one")
        assert spares(project) == []
        # Nothing of git-iterare's keeps the network in use after the runs.
        removed = subprocess.run(["docker", "network", "rm", network], capture_output=True,
                                 text=True, check=False)
        assert removed.returncode == 0, removed.stderr
    finally:
        subprocess.run(["docker", "network", "rm", network], capture_output=True, check=False)


def test_ctrl_c_while_a_spare_is_claimed_removes_it(project: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    from git_iterare.git import repo as repo_mod
    from git_iterare.runner import launch
    from git_iterare.runner.session import load_config
    from git_iterare.sandbox.warm import spare

    prompt(project, "one", "echo one\n")
    run(project, "one")
    run(project, "one")
    assert len(spares(project)) == 1
    real = spare._running_spare

    def checked_then_interrupted(container_id: str, token: str, root: Path) -> bool:
        real(container_id, token, root)
        raise KeyboardInterrupt

    monkeypatch.setattr(spare, "_running_spare", checked_then_interrupted)
    found = repo_mod.discover(project)
    with pytest.raises(KeyboardInterrupt):
        launch.execute(found, load_config(found, {}), launch.ExecuteRequest(prompt="one"))
    assert spares(project) == []  # the run never learnt of it: not left waiting 600 s
    state = project / ".git" / "iterare" / "state"
    assert not [p for p in state.iterdir() if "spare-" in p.name]


def test_a_refused_cleanup_still_removes_spares_and_a_repeated_one_says_so(
        project: Path) -> None:
    prompt(project, "work", "echo x > x.txt\n")
    run(project, "work")
    rid, _ = run(project, "work")  # its unmerged commit is work cleanup keeps
    assert len(spares(project)) == 1
    refused = iterare("cleanup", "-y", rid, cwd=project)
    assert refused.returncode == 1 and "would be lost" in refused.stderr, refused.stderr
    assert refused.stdout == "removed 1 spare sidecar waiting for a next run\n"
    assert spares(project) == []
    assert iterare("cleanup", "-y", "--force", rid, cwd=project).returncode == 0
    again = iterare("cleanup", "-y", rid, cwd=project)
    assert (again.returncode, again.stdout) == (0, f"run {rid} was cleaned up already\n")
