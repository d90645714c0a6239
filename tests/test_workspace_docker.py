"""The run's worktree and gitdir as a real container sees them (needs Docker).

The container gets exactly :attr:`RunWorkspace.mounts`, runs as the agent uid with no
capabilities, and uses git normally; the host then finishes the run.
"""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from git_iterare.git import repo as repo_mod
from git_iterare.runner import importer, workspace
from tests.conftest import git

pytestmark = pytest.mark.docker

BASE_IMAGE = "iterare-base:bookworm"
DOCKERFILE = (f"FROM {BASE_IMAGE}\n"
              "RUN apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q "
              "--no-install-recommends git >/dev/null && rm -rf /var/lib/apt/lists/*\n")


def docker(*args: str, input: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(["docker", *args], capture_output=True, text=True, input=input,
                          check=False)


@pytest.fixture(scope="session")
def git_image() -> Iterator[str]:
    """A base image with git, built once per session and removed afterwards."""
    tag = f"itr-workspace-git:{uuid.uuid4().hex[:8]}"
    built = docker("build", "-q", "-t", tag, "-", input=DOCKERFILE)
    assert built.returncode == 0, f"docker build failed (is the engine running?): {built.stderr}"
    yield tag
    docker("rmi", "-f", tag)


def run_in_container(image: str, ws: workspace.RunWorkspace, script: str
                     ) -> subprocess.CompletedProcess:
    name = f"itr-workspace-{uuid.uuid4().hex[:8]}"
    args = ["run", "--rm", "--name", name, "--user", f"{ws.agent_uid}:{ws.agent_gid}",
            "--cap-drop", "ALL", "--security-opt", "no-new-privileges", "--network", "none",
            "-e", "HOME=/tmp", "-w", "/workspace"]
    for m in ws.mounts:
        args += ["--mount", f"type=bind,source={m.host_path},target={m.container_path}"
                 + (",readonly" if m.read_only else "")]
    try:
        return docker(*args, image, "sh", "-c", script)
    finally:
        docker("rm", "-f", name)


def give_to_agent(ws: workspace.RunWorkspace) -> None:
    """What the sandbox's sidecar does before the agent starts (this test has none)."""
    for tree in (ws.worktree, ws.gitdir, ws.gitfile):
        workspace.chown_tree(tree, ws.agent_uid, ws.agent_gid)


def test_git_works_in_the_container_and_work_comes_back(repo: Path, git_image: str) -> None:
    r = repo_mod.discover(repo)
    ws = workspace.prepare_run(r, "box-0123abcd", "HEAD")  # alternates: /git/objects
    give_to_agent(ws)
    user_config = (repo / ".git" / "config").read_bytes()
    status = run_in_container(git_image, ws, "git status --porcelain")
    # Clean, though the owner and ctime of every file changed after the index was written
    # (the run gitdir's config has git compare content-relevant stat data only).
    assert (status.returncode, status.stdout) == (0, "")
    script = "\n".join([
        "set -e",
        "test \"$(git status --porcelain)\" = ''",
        "git rev-parse --abbrev-ref HEAD",
        "git log --format=%s",
        "echo new > new.txt && git add new.txt && git commit -qm 'in the box'",
        "git log --format='%an|%s'",
        "echo more >> README.md",
        "mkdir -p sub && cd sub && git rev-parse --show-toplevel && cd ..",
        "git status --porcelain",
        "! (echo x > /git/objects/planted) 2>/dev/null && echo objects-ro",
        "! (echo x > .git) 2>/dev/null && echo gitfile-ro",
        "ls /git",
    ])
    result = run_in_container(git_image, ws, script)
    assert result.returncode == 0, result.stderr
    assert result.stdout == (
        "iterare/box-0123abcd\ninitial\n"
        "git-iterare agent|in the box\nTest Author|initial\n"
        "/workspace\n M README.md\nobjects-ro\ngitfile-ro\nobjects\nrun\n")
    done = importer.finish_run(r, ws, {"Iterare-Run": ws.run_id}, "iterare: leftovers")
    assert done.autocommitted and done.rejected_head is None
    assert git("log", "--format=%s", "main..iterare/box-0123abcd", cwd=repo).stdout == \
        "iterare: leftovers\nin the box\n"
    assert git("show", "iterare/box-0123abcd:README.md", cwd=repo).stdout == "hello\nmore\n"
    assert (repo / ".git" / "config").read_bytes() == user_config
    assert git("status", "--porcelain", cwd=ws.worktree).stdout == ""
