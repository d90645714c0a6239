"""How a swarm run's trees reach the agent and come back (container/swarm-start against
git_iterare/sandbox/tree_server.py), on this machine's engine, as on a swarm but for the
swarm itself.

On a network of the test's own (internal), a tree server from git-iterare's image, as the
agent's uid with no capabilities, mounts a run's trees in volumes (a worktree, a run gitdir
whose alternates name the object cache, the cache) and answers as ``trees``; the "agent"
container (same image, as 1900000:1900000, no capabilities, tmpfs /workspace and /git as a
swarm task has) runs swarm-start with a command that commits with git and leaves a file.
Afterwards the server's volumes hold the commit and the file; a task stopped with
``docker stop`` still uploads what its command did before it ended.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.sandbox_fixtures import sandbox_image  # noqa: F401 (fixture)

pytestmark = [pytest.mark.docker, pytest.mark.slow]

SWARM_START = Path(__file__).parent.parent / "container" / "swarm-start"
AGENT = "1900000:1900000"
#: The run's trees as the remote placement leaves them: the base commit's objects in the
#: cache, the run gitdir naming it in its alternates, the worktree checked out.
SETUP = r"""
set -eu
if [ "$(id -u)" = 0 ]; then
    chown 1900000:1900000 /workspace /git/run /git/cache
    exec setpriv --reuid 1900000 --regid 1900000 --clear-groups sh -c "$0"
fi
export HOME=/tmp
git init -q -b iterare/run --separate-git-dir=/git/run /workspace
cd /workspace
echo base > README
git add README
git -c user.name=base -c user.email=base@example.invalid commit -q -m base
mkdir -p /git/cache/objects
cp -a /git/run/objects/. /git/cache/objects/
find /git/run/objects -mindepth 1 -maxdepth 1 ! -name info ! -name pack -exec rm -rf {} +
echo /git/cache/objects > /git/run/objects/info/alternates
git fsck --no-dangling 2>&1
"""


def _docker(*args: str, check: bool = True, timeout: float = 300
            ) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(["docker", *args], capture_output=True, text=True,
                            timeout=timeout, check=False)
    if check and result.returncode != 0:
        raise AssertionError(f"docker {' '.join(args)}: {result.stderr[-2000:]}")
    return result


@dataclass
class Run:
    """A run's trees and tree server, by name."""

    image: str
    stamp: str
    network: str
    volumes: dict[str, str]
    server: str

    def mounts(self, read_only: bool = False) -> list[str]:
        suffix = ":ro" if read_only else ""
        return [a for path, vol in self.volumes.items() for a in ("-v", f"{vol}:{path}{suffix}")]

    def in_trees(self, script: str) -> str:
        """``script``'s output, run as the agent's uid over the server's volumes."""
        name = f"itr-trees-look-{self.stamp}-{time.monotonic_ns() % 10**6}"
        result = _docker("run", "--rm", "--name", name, "--network", "none", "--user", AGENT,
                         *self.mounts(read_only=True), "--entrypoint", "sh", self.image,
                         "-c", script)
        return result.stdout

    def agent(self, name: str, command: str, env: dict[str, str], detach: bool = False,
              owner: str = "", extra: tuple[str, ...] = ()
              ) -> subprocess.CompletedProcess[str]:
        """Run swarm-start with ``sh -c command`` in an agent's container called ``name``.

        Its /workspace is a tmpfs through the local volume driver (as a swarm service can
        mount one), owned by ``owner`` (``uid=N``) or root's with mode 1777: a plain tmpfs
        mount there would take the mode of the image's /workspace (0755, runc), which the
        agent cannot write. ``extra``: more ``docker run`` options.
        """
        envs = {"HTTPS_PROXY": "http://proxy.invalid:3128", "HTTP_PROXY":
                "http://proxy.invalid:3128", **env}
        return _docker("run", *(["-d"] if detach else []), "--name", name,
                       "--network", self.network, "--user", AGENT, "--cap-drop", "ALL",
                       "--security-opt", "no-new-privileges:true",
                       "--mount", "type=volume,dst=/workspace,volume-driver=local,"
                       "volume-opt=type=tmpfs,volume-opt=device=tmpfs,volume-nocopy=true"
                       + (f",volume-opt=o={owner}" if owner else ""),
                       "--tmpfs", "/git:mode=1777",
                       *(a for k, v in envs.items() for a in ("-e", f"{k}={v}")), *extra,
                       "--entrypoint", "sh", self.image,
                       "-c", SWARM_START.read_text(), "swarm-start", "sh", "-c", command,
                       check=False, timeout=240)


@pytest.fixture
def run(sandbox_image: str) -> Iterator[Run]:  # noqa: F811
    stamp = f"{os.getpid()}-{time.monotonic_ns() % 10**8}"
    network = f"itr-trees-net-{stamp}"
    volumes = {path: f"itr-trees-{key}-{stamp}" for key, path in
               (("work", "/workspace"), ("run", "/git/run"), ("cache", "/git/cache"))}
    server = f"itr-trees-server-{stamp}"
    made: list[str] = []
    try:
        _docker("network", "create", "--internal", "--label", "dev.iterare.test=trees",
                network)
        for vol in volumes.values():
            _docker("volume", "create", "--label", "dev.iterare.test=trees", vol)
        created = Run(sandbox_image, stamp, network, volumes, server)
        _docker("run", "--rm", "--name", f"itr-trees-setup-{stamp}", "--network", "none",
                *created.mounts(), "--entrypoint", "sh", sandbox_image, "-c", SETUP, SETUP)
        _docker("run", "-d", "--name", server, "--network", network,
                "--network-alias", "trees", "--user", AGENT, "--cap-drop", "ALL",
                "--security-opt", "no-new-privileges:true",
                "-v", f"{volumes['/workspace']}:/workspace",
                "-v", f"{volumes['/git/run']}:/git/run",
                "-v", f"{volumes['/git/cache']}:/git/cache:ro",
                "-e", "ITERARE_MAX_RESULT_BYTES=50000000",
                "--entrypoint", "python3", sandbox_image,
                "/usr/local/lib/iterare/tree-server", "8080")
        made.append(server)
        yield created
    finally:
        for name in made:
            logs = _docker("logs", name, check=False)
            print(logs.stderr[-3000:])
        _docker("rm", "-f", server, check=False)
        for vol in volumes.values():
            _docker("volume", "rm", "-f", vol, check=False)
        _docker("network", "rm", network, check=False)


AGENT_WORK = r"""
set -e
test "$(cat README)" = base
git log --format=%s | grep -qx base
echo change >> README
echo new > new.txt
git add README new.txt
git -c user.name=agent -c user.email=agent@example.invalid commit -q -m "agent commit"
echo uncommitted > left.txt
"""


#: The image has no wget: this machine's GNU wget (Debian's, as the image) is lent to it.
WGET = "/usr/bin/wget"
CLIENTS = [("curl", ""), ("python3", "uid=1900000")] + (
    [("wget", "uid=1900000")] if Path(WGET).exists() else [])


@pytest.mark.parametrize(("client", "owner"), CLIENTS)
def test_the_agent_s_commit_and_files_reach_the_server_s_volumes(run: Run, client: str,
                                                                  owner: str) -> None:
    name = f"itr-trees-agent-{run.stamp}"
    extra = ("-v", f"{WGET}:/usr/local/bin/wget:ro") if client == "wget" else ()
    try:
        result = run.agent(name, AGENT_WORK, {"ITERARE_TREES_CLIENT": client,
                                              "ITERARE_SNAPSHOT_SECONDS": "0"}, owner=owner,
                           extra=extra)
        assert result.returncode == 0, result.stderr[-3000:]
        out = run.in_trees("cd /workspace && git log --format=%s && git status --short && "
                           "cat left.txt && git cat-file -p HEAD:new.txt && "
                           "cat /git/run/objects/info/alternates")
        assert out.splitlines() == ["agent commit", "base", "?? left.txt", "uncommitted",
                                    "new", "/git/cache/objects"]
    finally:
        _docker("rm", "-f", "-v", name, check=False)


def test_a_failing_command_s_status_comes_out_and_its_work_still_lands(run: Run) -> None:
    name = f"itr-trees-agent-{run.stamp}"
    try:
        result = run.agent(name, "echo partial > partial.txt; exit 3",
                           {"ITERARE_SNAPSHOT_SECONDS": "0"})
        assert result.returncode == 3, result.stderr[-3000:]
        assert run.in_trees("cat /workspace/partial.txt") == "partial\n"
    finally:
        _docker("rm", "-f", "-v", name, check=False)


def test_a_stopped_task_uploads_snapshots_and_its_last_work(run: Run) -> None:
    name = f"itr-trees-agent-{run.stamp}"
    # The command notes TERM, then ends with 7 after a while (as an agent saving its state);
    # only the last upload, after it ended, can hold its last line.
    command = ("echo started > term.txt; "
               "trap 'echo got-term >> term.txt; sleep 1; echo last >> term.txt; exit 7' TERM; "
               "while :; do sleep 0.2; done")
    try:
        run.agent(name, command, {"ITERARE_SNAPSHOT_SECONDS": "1"}, detach=True)
        deadline = time.monotonic() + 60
        while "started" not in run.in_trees("cat /workspace/term.txt 2>/dev/null || true"):
            assert time.monotonic() < deadline, _docker("logs", name, check=False).stderr
            time.sleep(0.5)
        _docker("stop", "-t", "30", name)
        status = _docker("wait", name).stdout.strip()
        assert status == "7", _docker("logs", name, check=False).stderr
        assert run.in_trees("cat /workspace/term.txt") == "started\ngot-term\nlast\n"
    finally:
        _docker("rm", "-f", "-v", name, check=False)
