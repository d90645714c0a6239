"""Runs on an engine that shares no filesystem with the client: the DinD engine of
tests/engines.py over ssh and over tcp+TLS. The worktree's objects go in through the
Engine API (an object cache per repository, then only what is new), results come out the
same way; no container of a remote run has a bind mount; a live run can be diffed,
followed and stopped; a dropped connection and a restarted engine lose nothing that was
there."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from git_iterare.sandbox import agent_ids
from tests.conftest import git, iterare
from tests.engines import DindEngine, remove_leftovers
from tests.runs_helpers import prompt, record, run_id

pytestmark = pytest.mark.docker


@pytest.fixture(scope="module")
def remote_image(dind_engine: DindEngine, sandbox_image: str) -> str:
    """The sandbox image, built here and copied into the DinD engine."""
    dind_engine.load_image(sandbox_image)
    return sandbox_image


def _project(repo: Path, home: Path, image: str) -> Path:
    """``repo`` set up for shell-agent runs; the settings are the user's (trusted)."""
    config = home / ".config" / "iterare"
    config.mkdir(parents=True, exist_ok=True)
    (config / "config.toml").write_text(
        f'[docker]\nimage = "{image}"\ncpus = 1\nmemory = "1g"\n[run]\nagent = "shell"\n')
    (repo / ".iterare" / "prompts").mkdir(parents=True)
    (repo / ".iterare" / ".gitignore").write_text("/worktrees/\n")
    git("add", ".iterare", cwd=repo)
    git("commit", "-qm", "iterare", cwd=repo)
    return repo


@pytest.fixture
def over_ssh(repo: Path, hermetic_env: Path, dind_engine: DindEngine, remote_image: str,
             monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A repository whose runs go to the DinD engine over ssh (``DOCKER_HOST``)."""
    dind_engine.ssh_home(hermetic_env)
    monkeypatch.setenv("DOCKER_HOST", dind_engine.ssh_url)
    monkeypatch.delenv("DOCKER_CONTEXT", raising=False)
    yield _project(repo, hermetic_env, remote_image)
    _remove_leftovers(dind_engine, repo)


@pytest.fixture
def over_tls(repo: Path, hermetic_env: Path, dind_engine: DindEngine, remote_image: str,
             monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A repository whose runs go to the DinD engine over tcp+TLS (``DOCKER_HOST``,
    ``DOCKER_TLS_VERIFY``, ``DOCKER_CERT_PATH``), with ``REQUESTS_CA_BUNDLE`` set as behind
    a proxy."""
    for name, value in dind_engine.tls_env().items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", "/etc/ssl/certs/ca-certificates.crt")
    monkeypatch.delenv("DOCKER_CONTEXT", raising=False)
    yield _project(repo, hermetic_env, remote_image)
    _remove_leftovers(dind_engine, repo)


def _remove_leftovers(engine: DindEngine, repo: Path) -> None:
    remove_leftovers(engine.client(), repo)


def volumes(engine: DindEngine, repo: Path) -> list[str]:
    return sorted(v.name for v in engine.client().volumes.list(
        filters={"label": f"dev.iterare.repo={repo}"}))


def wait_for(predicate: Any, what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.3)


#: Waits (at most 120 s) for /workspace/go, which the test makes, after leaving work.
WAITING_TASK = """\
echo "live work" > live.txt
echo started
i=0; while [ ! -e go ] && [ $i -lt 400 ]; do sleep 0.3; i=$((i+1)); done
rm -f go
git add live.txt && git commit -qm "Add live"
echo "after go" > after.txt
echo end
"""


def _go(engine: DindEngine, rid: str) -> None:
    """Let a WAITING_TASK run go on (a file in its worktree, made on the engine)."""
    container = engine.client().containers.get(f"iterare-{rid}")
    uid = agent_ids()[0]
    code, out = container.exec_run(["touch", "/workspace/go"], user=f"{uid}:{uid}")
    assert code == 0, out


SHELL_TASK = """\
echo "hello from $(id -un) $(id -u)" > hello.txt
git add hello.txt
git commit -qm "Add hello"
echo "left for the autocommit" > more.txt
git status --short
head -c 24 /run/iterare/prompt.md; echo
cat notes.env
echo finished
"""


def test_shell_agent_end_to_end_over_ssh(over_ssh: Path, dind_engine: DindEngine) -> None:
    project = over_ssh
    (project / "notes.env").write_text("TOKEN=local-only\n")  # untracked, included
    (project / ".iterare" / "include").write_text("notes.env\n")
    prompt(project, "hello", SHELL_TASK)
    git("add", ".iterare", cwd=project)
    git("commit", "-qm", "prompt", cwd=project)
    trusted = iterare("trust", "--yes", cwd=project)  # .iterare/include needs approval
    assert trusted.returncode == 0, trusted.stderr
    started = iterare("execute", "hello", "--follow", cwd=project)
    assert started.returncode == 0, started.stdout + started.stderr
    rid = run_id(started.stdout)
    # The copied-in notes.env is excluded in the sandbox too: `git status` does not list it.
    assert ("?? more.txt\necho \"hello from $(id -u\nTOKEN=local-only\n"
            "finished\n" in started.stdout), started.stdout
    assert started.stderr.splitlines()[-1] == f"run {rid} succeeded"
    rec = record(project, rid)
    assert (rec["status"], rec["exit_code"]) == ("succeeded", 0)
    assert rec["extra"]["engine"] == {"name": "default", "url": dind_engine.ssh_url}
    first = rec["extra"]["shipped"]
    assert first["objects"] > 0 and first["pack_bytes"] > 0
    assert git("show", f"iterare/{rid}:hello.txt", cwd=project).stdout == (
        f"hello from agent {agent_ids()[0]}\n")
    assert git("show", f"iterare/{rid}:more.txt", cwd=project).stdout == (
        "left for the autocommit\n")
    # The included file went in, and was not committed.
    assert git("cat-file", "-e", f"iterare/{rid}:notes.env", cwd=project,
               check=False).returncode != 0
    # The run's volumes are gone; the repository's object cache stays for the next run,
    # and a spare worktree checked out at this run's base.
    left = volumes(dind_engine, project)
    assert len(left) == 3 and left[0].startswith("iterare-cache-"), left
    assert [v.rsplit("-", 1)[1] for v in left[1:]] == ["git", "work"], left
    assert "spare" not in rec["extra"]

    # A second run ships only the objects that are new since the first.
    (project / "big.bin").write_bytes(os.urandom(1 << 20))
    git("add", "big.bin", cwd=project)
    git("commit", "-qm", "big", cwd=project)
    prompt(project, "noop", "echo nothing to do\n")
    warm = iterare("execute", "noop", "--follow", cwd=project)
    assert warm.returncode == 0, warm.stderr
    warm_record = record(project, run_id(warm.stdout))
    assert warm_record["extra"]["shipped"]["pack_bytes"] > 1 << 20  # the big blob is new
    # It took the spare over (and brought it to its base); a new spare was made.
    assert warm_record["extra"]["spare"]["work"] == left[2], warm_record["extra"]
    assert git("diff", "--stat", "HEAD", f"iterare/{run_id(warm.stdout)}",
               cwd=project).stdout == ""  # its worktree was the base: nothing changed
    (project / "small.txt").write_text("small change\n")
    git("add", "small.txt", cwd=project)
    git("commit", "-qm", "small", cwd=project)
    again = iterare("execute", "noop", "--follow", cwd=project)
    assert again.returncode == 0, again.stderr
    second = record(project, run_id(again.stdout))["extra"]["shipped"]
    assert len(volumes(dind_engine, project)) == 3, warm.stderr + again.stderr
    assert second["objects"] == 3, second  # commit, root tree, small.txt
    assert second["pack_bytes"] < 3000, second

    listed = iterare("list", cwd=project)
    assert rid in listed.stdout and "succeeded" in listed.stdout
    shown = iterare("log", rid, cwd=project)
    assert shown.stdout.endswith("finished\ndone\n"), shown.stdout
    diff = iterare("diff", rid, "--stat", cwd=project)
    assert diff.stdout.splitlines()[-1] == " 2 files changed, 2 insertions(+)"
    merged = iterare("merge", rid, cwd=project)
    assert merged.returncode == 0, merged.stderr
    assert (project / "hello.txt").read_text() == f"hello from agent {agent_ids()[0]}\n"
    # Its end left nothing on the engine: cleaning it up needs no engine at all.
    cleaned = iterare("cleanup", "-y", rid, cwd=project, env={"DOCKER_HOST": "tcp://127.0.0.1:9"})
    assert cleaned.returncode == 0, cleaned.stderr
    assert not (project / ".iterare" / "worktrees" / rid).exists()
    assert record(project, rid)["status"] == "cleaned"

    # cleanup --cache removes the object cache; the next run ships everything again.
    dropped = iterare("cleanup", "--cache", cwd=project)
    assert dropped.returncode == 0, dropped.stderr
    assert dropped.stdout == ("removed the object cache of this repository on "
                              f"{dind_engine.ssh_url}\n")
    assert volumes(dind_engine, project) == []
    assert iterare("cleanup", "--cache", cwd=project).stdout.startswith("no object cache")
    cold = iterare("execute", "noop", "--follow", cwd=project)
    assert cold.returncode == 0, cold.stderr
    assert record(project, run_id(cold.stdout))["extra"]["shipped"]["objects"] > 10


def test_live_run_over_tls_has_no_bind_mount_and_can_be_diffed_followed_and_stopped(
        over_tls: Path, dind_engine: DindEngine) -> None:
    project = over_tls
    prompt(project, "wait", WAITING_TASK)
    started = iterare("execute", "wait", cwd=project)
    assert started.returncode == 0, started.stderr
    rid = run_id(started.stdout)
    inner = dind_engine.client()
    agent = inner.containers.get(f"iterare-{rid}")
    wait_for(lambda: b"started" in agent.logs(), "the agent to start")
    # No container of the run has a bind mount: nothing of the client's is mounted.
    for name in (f"iterare-{rid}", f"iterare-{rid}-net"):
        mounts = inner.containers.get(name).attrs["Mounts"]
        assert mounts and {m["Type"] for m in mounts} == {"volume"}, (name, mounts)
    # The agent's current work, through the API (it has committed nothing yet).
    live = iterare("diff", rid, "--stat", cwd=project)
    assert live.returncode == 0, live.stderr
    assert live.stdout.splitlines() == [" live.txt | 1 +",
                                        " 1 file changed, 1 insertion(+)"]
    assert record(project, rid)["status"] == "running"
    # log -f follows it to its end, then the run is finished with its work.
    follower = subprocess.Popen(["git", "iterare", "log", "-f", rid], cwd=project,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(1)
    _go(dind_engine, rid)
    out, err = follower.communicate(timeout=120)
    assert follower.returncode == 0, err
    assert out.endswith("started\nend\ndone\n"), out
    rec = record(project, rid)
    assert rec["status"] == "succeeded", rec
    assert git("log", "--format=%s", f"iterare/{rid}", cwd=project).stdout.splitlines()[:2] == [
        f"iterare: work left uncommitted by run {rid}", "Add live"]
    assert git("show", f"iterare/{rid}:after.txt", cwd=project).stdout == "after go\n"
    assert rec["egress"]["refused_connections"]["recorded"] is True

    # stop: the work so far is fetched and committed.
    second = iterare("execute", "wait", cwd=project)
    rid2 = run_id(second.stdout)
    wait_for(lambda: b"started" in inner.containers.get(f"iterare-{rid2}").logs(),
             "the second agent to start")
    stopped = iterare("stop", rid2, cwd=project)
    assert stopped.returncode == 0, stopped.stderr
    assert record(project, rid2)["status"] == "stopped"
    assert git("show", f"iterare/{rid2}:live.txt", cwd=project).stdout == "live work\n"
    assert [v for v in volumes(dind_engine, project) if rid2 in v] == []


class Forwarder:
    """A TCP forwarder on 127.0.0.1 to ``port``, whose connections the test can cut."""

    def __init__(self, port: int) -> None:
        self.target = port
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.live: list[socket.socket] = []
        self.up = True
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            if not self.up:  # the network is down: connections fail
                client.close()
                continue
            upstream = socket.create_connection(("127.0.0.1", self.target))
            with self.lock:
                self.live += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        for s in (source, sink):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)

    def drop(self) -> None:
        """Cut every connection, and fail new ones until :meth:`restore`."""
        self.up = False
        with self.lock:
            live, self.live = self.live, []
        for s in live:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()

    def restore(self) -> None:
        """Let connections through again."""
        self.up = True

    def close(self) -> None:
        self.server.close()
        self.drop()


def test_a_tracked_file_with_a_long_path_is_never_deleted_by_a_remote_run(
        tmp_path: Path, hermetic_env: Path, dind_engine: DindEngine, remote_image: str,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """In a repository whose own path is 450 bytes long, two tracked files whose paths
    (3,513 bytes, fine for git and on the engine) are too long to commit from the host's
    copy: the one the agent left alone and the one it changed both stay as the base has
    them on the run's branch, with a warning; the agent's other work is committed."""
    project = tmp_path / ("r" * 200) / ("r" * 200) / "repo"
    project.mkdir(parents=True)
    git("init", "-q", "-b", "main", cwd=project)
    folder = "/".join(["x" * 250] * 13)
    names = [f"{folder}/{stem * 250}" for stem in "ab"]
    subprocess.run(["mkdir", "-p", folder], cwd=project, check=True)
    for name in names:
        subprocess.run(["sh", "-c", f'echo base > "{name}"'], cwd=project, check=True)
        git("add", name, cwd=project)
    git("commit", "-qm", "long paths", cwd=project)
    dind_engine.ssh_home(hermetic_env)
    monkeypatch.setenv("DOCKER_HOST", dind_engine.ssh_url)
    monkeypatch.delenv("DOCKER_CONTEXT", raising=False)
    _project(project, hermetic_env, remote_image)
    try:
        prompt(project, "touch", f'echo changed > "{names[1]}"\necho new > new.txt\n')
        done = iterare("execute", "touch", "--follow", cwd=project)
        assert done.returncode == 0, done.stderr
        rid = run_id(done.stdout)
        assert f"run {rid}: not committed: " in done.stderr
        assert git("diff", "--name-only", "HEAD", f"iterare/{rid}", cwd=project
                   ).stdout.split() == ["new.txt"]
    finally:
        _remove_leftovers(dind_engine, project)


def test_a_spare_taken_over_ignores_the_agent_images_git_config(
        repo: Path, hermetic_env: Path, dind_engine: DindEngine, remote_image: str,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The user's image sets core.autocrlf in its system git config: the files written
    when the next run takes the spare over come out as a fresh checkout has them (LF), so
    the run's branch changes nothing the agent did not."""
    crlf_image = f"itr-crlf-{os.getpid()}:1"
    subprocess.run(["docker", "build", "-q", "-t", crlf_image, "-"], check=True,
                   capture_output=True, input=f"FROM {remote_image}\nUSER root\n"
                   "RUN git config --system core.autocrlf true\n".encode())
    inner = dind_engine.client()
    try:
        dind_engine.load_image(crlf_image)  # from the local engine: before DOCKER_HOST
        dind_engine.ssh_home(hermetic_env)
        monkeypatch.setenv("DOCKER_HOST", dind_engine.ssh_url)
        monkeypatch.delenv("DOCKER_CONTEXT", raising=False)
        project = _project(repo, hermetic_env, crlf_image)
        prompt(project, "noop", "true\n")
        first = iterare("execute", "noop", "--follow", cwd=project)  # makes the spare
        assert first.returncode == 0, first.stderr
        (project / "README.md").write_text("changed\nlines\n")
        git("commit", "-qam", "change", cwd=project)
        second = iterare("execute", "noop", "--follow", cwd=project)
        assert second.returncode == 0, second.stderr
        rid = run_id(second.stdout)
        assert record(project, rid)["extra"].get("spare"), "the spare was not taken over"
        assert git("diff", "--stat", "HEAD", f"iterare/{rid}", cwd=project).stdout == ""
    finally:
        _remove_leftovers(dind_engine, repo)
        with contextlib.suppress(Exception):
            inner.images.remove(crlf_image, force=True)
        monkeypatch.delenv("DOCKER_HOST", raising=False)
        subprocess.run(["docker", "rmi", "-f", crlf_image], capture_output=True, check=False)


def test_dropped_ssh_connection_the_run_goes_on_and_is_picked_up(
        repo: Path, hermetic_env: Path, dind_engine: DindEngine, remote_image: str,
        monkeypatch: pytest.MonkeyPatch) -> None:
    forwarder = Forwarder(dind_engine.ssh_port)
    try:
        dind_engine.ssh_home(hermetic_env)
        key = (dind_engine.seed / "ssh_host_ed25519_key.pub").read_text().split()[:2]
        (hermetic_env / ".ssh" / "known_hosts").write_text(
            f"[127.0.0.1]:{forwarder.port} {' '.join(key)}\n")
        monkeypatch.setenv("DOCKER_HOST", f"ssh://root@127.0.0.1:{forwarder.port}")
        monkeypatch.delenv("DOCKER_CONTEXT", raising=False)
        project = _project(repo, hermetic_env, remote_image)
        prompt(project, "wait", WAITING_TASK)
        started = iterare("execute", "wait", cwd=project)
        assert started.returncode == 0, started.stderr
        rid = run_id(started.stdout)
        follower = subprocess.Popen(["git", "iterare", "log", "-f", rid], cwd=project,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        inner = dind_engine.client()
        wait_for(lambda: b"started" in inner.containers.get(f"iterare-{rid}").logs(),
                 "the agent to start")
        wait_for(lambda: bool(forwarder.live), "log -f to connect")
        time.sleep(3)  # and to be following the log
        forwarder.drop()
        out, err = follower.communicate(timeout=60)
        assert follower.returncode == 1, (out, err)
        assert err.count("\n") == 1 and err.startswith("error: "), err
        assert err.endswith(f"(the run goes on; follow it again with `git iterare log -f "
                            f"{rid}`)\n"), err
        # The run went on without the client; `log -f` picks it up again.
        assert inner.containers.get(f"iterare-{rid}").status == "running"
        forwarder.restore()
        again = subprocess.Popen(["git", "iterare", "log", "-f", rid], cwd=project,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(1)
        _go(dind_engine, rid)
        out, err = again.communicate(timeout=120)
        assert again.returncode == 0, err
        assert out.endswith("started\nend\ndone\n"), out
        assert record(project, rid)["status"] == "succeeded"
        assert git("show", f"iterare/{rid}:after.txt", cwd=project).stdout == "after go\n"

        # A run that ends while nobody is connected is finished by the next `list`.
        rid2 = run_id(iterare("execute", "wait", cwd=project).stdout)
        wait_for(lambda: b"started" in inner.containers.get(f"iterare-{rid2}").logs(),
                 "the second agent to start")
        forwarder.drop()
        _go(dind_engine, rid2)
        assert inner.containers.get(f"iterare-{rid2}").wait(timeout=60)["StatusCode"] == 0
        assert record(project, rid2)["status"] == "running"  # nobody noticed yet
        down = iterare("list", cwd=project)  # the engine cannot be reached: a warning
        assert down.returncode == 0, down.stderr
        assert "active runs could not be checked" in down.stderr
        assert record(project, rid2)["status"] == "running"
        forwarder.restore()
        listed = iterare("list", cwd=project)
        assert listed.returncode == 0, listed.stderr
        assert record(project, rid2)["status"] == "succeeded"
        assert git("show", f"iterare/{rid2}:after.txt", cwd=project).stdout == "after go\n"
    finally:
        forwarder.close()
        _remove_leftovers(dind_engine, repo)


def test_files_the_commit_leaves_out_are_never_written_back_and_a_huge_tree_is_not_fetched(
        over_tls: Path, dind_engine: DindEngine) -> None:
    """A 2 GB sparse file (no blocks on the engine) would come back as 2 GB of zeros on
    the user's disk: a file larger than MAX_OBJECT_BYTES, which the automatic commit
    leaves out anyway, is not sent, and named as not committed; a tracked one left alone
    is the base's, as in a local run. A worktree over MAX_FETCH_BYTES, when the engine
    cannot list the change (a file the agent made unreadable) and the whole tree is
    fetched, is not fetched at all: only the agent's commits are kept (issue 25, item
    10)."""
    project = over_tls
    with (project / "data.bin").open("wb") as out:  # tracked, over the limit, untouched
        out.truncate(101 * 1024 * 1024)
    git("add", "data.bin", cwd=project)
    git("commit", "-qm", "data", cwd=project)
    prompt(project, "sparse", "truncate -s 2G big.sparse\necho work > work.txt\n"
           "git init -q lib && git config core.worktree ..\n")
    done = iterare("execute", "sparse", "--follow", cwd=project)
    assert done.returncode == 0, done.stderr
    rid = run_id(done.stdout)
    worktree = project / ".iterare" / "worktrees" / rid
    assert (worktree / "work.txt").read_text() == "work\n"
    assert not (worktree / "big.sparse").exists()
    assert (worktree / "data.bin").stat().st_size == 101 * 1024 * 1024  # the base's
    used = subprocess.run(["du", "-s", "--block-size=1M", "--exclude=data.bin", str(worktree)],
                          capture_output=True, text=True, check=True).stdout.split()[0]
    assert int(used) < 10, used
    assert record(project, rid)["extra"]["fetched"]["worktree"] == "change"
    limit = "larger than MAX_OBJECT_BYTES (104857600 bytes)"
    assert (f"run {rid}: not committed: big.sparse ({limit}: 2147483648 bytes, not "
            "fetched from the Docker engine)") in done.stderr, done.stderr
    assert "data.bin" not in done.stderr
    changed = git("diff", "--name-only", "HEAD", f"iterare/{rid}", cwd=project).stdout
    assert changed.split() == ["work.txt"]  # data.bin as the base has it, nothing deleted
    shown = iterare("show", rid, cwd=project)
    assert "big.sparse" in shown.stdout, shown.stdout
    # And it came back inert: the nested repository disabled, the run gitdir's config ours.
    assert (worktree / "lib" / ".git.disabled-by-iterare").is_dir()
    assert not (worktree / "lib" / ".git").exists()
    gitdir = project / ".git" / "iterare" / "gitdirs" / rid
    assert git("config", "--file", str(gitdir / "config"), "core.worktree", cwd=project,
               check=False).stdout == ""

    prompt(project, "huge", "echo kept > kept.txt\ngit add kept.txt\ngit commit -qm kept\n"
           "echo lost > lost.txt\ntruncate -s 5G huge.sparse\nchmod 000 lost.txt\n")
    huge = iterare("execute", "huge", "--follow", cwd=project)
    assert huge.returncode == 0, huge.stderr
    hid = run_id(huge.stdout)
    assert (f"run {hid}: its worktree was not fetched from the Docker engine: the run's "
            "files hold more than 4294967296 bytes (MAX_FETCH_BYTES); only its commits are "
            "kept") in huge.stderr, huge.stderr
    assert git("diff", "--name-only", "HEAD", f"iterare/{hid}", cwd=project
               ).stdout.split() == ["kept.txt"], huge.stdout + huge.stderr
    assert not (project / ".iterare" / "worktrees" / hid / "huge.sparse").exists()
    assert record(project, hid)["extra"]["fetched"]["worktree"] == "none"


def test_engine_restart_ends_the_run_lost_with_its_work(over_tls: Path,
                                                        dind_engine: DindEngine) -> None:
    """Last in this file: it restarts the session's DinD engine."""
    project = over_tls
    prompt(project, "wait", WAITING_TASK)
    rid = run_id(iterare("execute", "wait", cwd=project).stdout)
    inner = dind_engine.client()
    wait_for(lambda: b"started" in inner.containers.get(f"iterare-{rid}").logs(),
             "the agent to start")
    follower = subprocess.Popen(["git", "iterare", "log", "-f", "--exit-status", rid],
                                cwd=project,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(3)  # following the log
    dind_engine.restart_dockerd()
    out, err = follower.communicate(timeout=120)
    # The follower says how the run ended, not that it goes on (exit 1: not a success).
    assert follower.returncode == 1, (out, err)
    assert "goes on" not in err, err
    assert out.rstrip().endswith("lost"), out
    shown = iterare("show", rid, cwd=project)
    assert shown.returncode == 0, shown.stderr
    rec = record(project, rid)
    assert rec["status"] == "lost", rec
    assert "the Docker engine ended the sandbox" in rec["error"]
    # What the agent had written by then was fetched and committed.
    assert git("show", f"iterare/{rid}:live.txt", cwd=project).stdout == "live work\n"
    assert [v for v in volumes(dind_engine, project) if rid in v] == []
