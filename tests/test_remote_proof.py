# ruff: noqa: F811  (the fixtures imported from test_remote_runs are parameters here)
"""The rest of the remote-engine proof (issue 12), on the DinD engine of tests/engines.py:

* images built on the engine: ``git iterare image build`` sends its context through the
  API with progress shown and ``--ca-bundle`` working there (slow: a full build inside
  DinD); a project's trusted ``.iterare/Dockerfile`` is built there when a run needs it;
* the escape suite (tests/sandbox_net/escape.sh, as the agent and as capability-less root,
  in that hostile project image) in a remote run, against a local internet built on the
  engine's own networks (the same compose file, brought up *inside* DinD), with a listener
  on the engine's host and an inbound attempt;
* the real Claude Code against the fake Anthropic API, which runs as a container on the
  engine, published on the engine host's gateway address;
* ``git iterare interactive`` (a session in its own worktree works; one on the checkout
  is refused with one line), the refusal of ``[mounts] volumes``, and initialized
  submodules checked out there as locally, the work in them committed there.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import subprocess
import tarfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from git_iterare.sandbox import agent_ids
from tests.conftest import git, iterare
from tests.engines import DindEngine
from tests.sandbox_fixtures import NET, NET_DIR, subnet
from tests.terminal import in_terminal
from tests.test_faithful import ROT13, add_submodule, blob, rot_repo
from tests.test_remote_runs import (  # noqa: F401  (fixtures)
    _remove_leftovers,
    over_ssh,
    over_tls,
    record,
    remote_image,
    run_id,
    wait_for,
)
from tests.test_runs_e2e import CLAUDE_TURNS
from tests.test_sandbox_escape import (
    ATTEMPTS,
    CONTROLS,
    HOSTILE_DOCKERFILE,
    NEUTERED,
    ONLY_AGENT,
    ONLY_ROOT,
    SCRIPT,
    _parse,
)

pytestmark = pytest.mark.docker

TESTNET_IMAGE = "itr-sandbox-testnet:1"
#: Ports on the engine host's gateway address (inside DinD: nothing else uses them).
HOST_PORT = 8099
FAKEAPI_PORT = 8098
#: Attempts whose premise a remote engine does not have: the local suite's policy names
#: hostalike.test's address as one of the Docker host's own; the client cannot know a
#: remote engine host's addresses, so there it is an ordinary allowed server (the engine
#: host stays closed on its gateway addresses, which the sidecar finds itself).
NOT_REMOTE = {"rebind-host-address-name"}
ALLOWED = ["allowed.test", "*.wild.test", "cdn.test", "port.test:8080", "private.test",
           "ns.test", f"gw.test:{HOST_PORT}", "hostalike.test"]


def _dind_env(engine: DindEngine) -> dict[str, str]:
    """The environment of a docker CLI (or Compose) talking to the DinD engine over TLS
    (without REQUESTS_CA_BUNDLE, which Compose's docker-py would verify against)."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("DOCKER_CONTEXT", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE")}
    env.update(engine.tls_env())
    return env


def _put(container: Any, files: dict[str, bytes]) -> None:
    """Put ``files`` (absolute path -> content) into ``container`` through the API."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for path, data in files.items():
            info = tarfile.TarInfo(path.lstrip("/"))
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
    assert container.put_archive("/", buffer.getvalue())


def _can_reach(peer: Any, host: str, port: int, path: str = "/") -> str:
    """What a plain container ``peer`` (no firewall) gets from http://host:port/path, or
    the error."""
    _, out = peer.exec_run(["python3", "-c", (
        "import sys, urllib.request\n"
        "try:\n"
        f"    print(urllib.request.urlopen('http://{host}:{port}{path}', timeout=3)"
        ".read().decode().strip())\n"
        "except Exception as e:\n"
        "    print('error', e)\n")])
    return str(out.decode().strip())


@pytest.fixture(scope="module")
def remote_internet(dind_engine: DindEngine) -> Iterator[dict[str, Any]]:
    """The escape suite's local internet (sandbox_net/docker-compose.yml), brought up on
    the DinD engine's own networks, plus two services on the engine host's gateway
    address: a listener answering ``host-secret`` (on :data:`HOST_PORT`) and the fake
    Anthropic API (on :data:`FAKEAPI_PORT`, script :data:`CLAUDE_TURNS`). Yields
    ``{"project", "internet", "intranet", "peer"}`` (``peer``: a container of it without
    a firewall)."""
    subnet()  # NET and the compose file's ITR_TESTNET
    subprocess.run(["docker", "build", "-q", "-t", TESTNET_IMAGE, str(NET_DIR)], check=True,
                   capture_output=True, timeout=600)
    dind_engine.load_image(TESTNET_IMAGE)
    project = f"itrremote{os.getpid()}"
    env = _dind_env(dind_engine)
    compose = ["docker-compose", "-p", project, "-f", str(NET_DIR / "docker-compose.yml")]
    inner = dind_engine.client()
    try:
        up = subprocess.run([*compose, "up", "-d", "--no-build"], env=env, capture_output=True,
                            text=True, timeout=300, check=False)
        assert up.returncode == 0, up.stderr[-2000:]
        internet = f"{project}_internet"
        listener = inner.containers.create(
            TESTNET_IMAGE, ["python3", "-m", "http.server", "--directory", "/srv", "80"],
            name=f"{project}-hostlistener", network=internet, labels={"dev.iterare.test": "1"},
            ports={"80/tcp": (NET["GATEWAY_V4"], HOST_PORT)})
        _put(listener, {"/srv/index.html": b"host-secret\n"})
        listener.start()
        fake = inner.containers.create(
            TESTNET_IMAGE, ["python3", "/srv/server.py", "--script", "/srv/turns.json",
                            "--host", "0.0.0.0", "--port", "80", "--log", "/srv/requests.jsonl"],
            name=f"{project}-fakeapi", network=internet, labels={"dev.iterare.test": "1"},
            ports={"80/tcp": (NET["GATEWAY_V4"], FAKEAPI_PORT)})
        server = (Path(__file__).parent / "fakeapi" / "server.py").read_bytes()
        _put(fake, {"/srv/server.py": server,
                    "/srv/turns.json": json.dumps({"turns": CLAUDE_TURNS}).encode()})
        fake.start()
        peer = inner.containers.get(f"{project}_allowed_1")
        targets = [(NET[k], 80, "") for k in ("ALLOWED_V4", "BLOCKED_V4", "CDN_V4", "WILD_V4",
                                              "HOSTALIKE_V4")]
        targets.append((NET["GATEWAY_V4"], HOST_PORT, "host-secret"))
        # The intranet is another network: its servers answer the DNS container there.
        deadline = time.monotonic() + 60
        while True:
            answers = [_can_reach(peer, host, port) for host, port, _ in targets]
            if all(not a.startswith("error") and want in a
                   for a, (_, _, want) in zip(answers, targets, strict=True)):
                break
            assert time.monotonic() < deadline, answers
            time.sleep(0.5)
        yield {"project": project, "internet": internet, "intranet": f"{project}_intranet",
               "peer": peer, "fake": fake}
    finally:
        for name in (f"{project}-hostlistener", f"{project}-fakeapi"):
            with contextlib.suppress(Exception):  # not made
                inner.containers.get(name).remove(force=True)
        subprocess.run([*compose, "down", "-v"], env=env, capture_output=True, timeout=300,
                       check=False)


def _write_config(home: Path, image: str, internet: str, extra: str = "",
                  cidr: str = "INTRANET2_V4") -> None:
    """The user's (trusted) configuration: the test image, the remote internet's network
    and resolver, the escape suite's allowlist (with ``NET[cidr]`` as its CIDR entry), the
    shell agent, and ``extra``."""
    config = home / ".config" / "iterare" / "config.toml"
    config.parent.mkdir(parents=True, exist_ok=True)
    domains = ", ".join(f'"{d}"' for d in ALLOWED)
    config.write_text(
        f'[docker]\nimage = "{image}"\nnetwork = "{internet}"\ndns = ["{NET["DNS_V4"]}"]\n'
        f'cpus = 1\nmemory = "1g"\n[run]\nagent = "shell"\n'
        f'[firewall]\nallowed_domains = [{domains}]\n'
        f'allowed_cidrs = ["{NET[cidr]}/32"]\n{extra}')


def _task(body: str) -> str:
    return f"---\nagent: shell\n---\n{body}"


def script_env() -> dict[str, str]:
    """The escape script's environment: its targets (see escape.sh); HOST_GIT is the
    repository's object cache (shared by its runs on the engine, read-only for the agent),
    OWN_GITDIR the run's own gitdir."""
    return {**{k: NET[k] for k in ("ALLOWED_V4", "BLOCKED_V4", "BLOCKED_V6", "DNS_V4",
                                   "DNS_V6", "GATEWAY_V4", "INTRANET_V4", "INTRANET2_V4")},
            "HOST_PORT": str(HOST_PORT), "HOST_GIT": "/git/cache", "OWN_GITDIR": "/git/run"}

#: Waits (at most 120 s) for /workspace/go, which the test makes.
WAIT_FOR_GO = """\
i=0; while [ ! -e go ] && [ $i -lt 400 ]; do sleep 0.3; i=$((i+1)); done
rm -f go
"""


def _touch_go(container: Any) -> None:
    uid = agent_ids()[0]
    code, out = container.exec_run(["touch", "/workspace/go"], user=f"{uid}:{uid}")
    assert code == 0, out


def test_escape_suite_on_a_remote_engine(over_tls: Path, hermetic_env: Path,
                                         dind_engine: DindEngine, remote_image: str,
                                         remote_internet: dict[str, Any]) -> None:
    """escape.sh in a remote run (as the agent, then as root without capabilities) in the
    hostile project image, which the run builds on the engine from the trusted
    ``.iterare/Dockerfile``; then a connection from the internet to the sandbox."""
    project, inner = over_tls, dind_engine.client()
    _write_config(hermetic_env, remote_image, remote_internet["internet"])
    (project / "escape.sh").write_bytes(SCRIPT.read_bytes())
    (project / ".iterare" / "Dockerfile").write_text(HOSTILE_DOCKERFILE.format(
        base=remote_image, files=" ".join(NEUTERED)))
    exports = "".join(f"export {k}={v}\n" for k, v in script_env().items())
    (project / ".iterare" / "prompts" / "escape.md").write_text(_task(
        WAIT_FOR_GO + exports + "bash escape.sh\necho escape-finished\n"))
    (project / ".iterare" / "prompts" / "hold.md").write_text(_task(
        "nc -lk 8000 >/dev/null 2>&1 &\necho holding\n" + WAIT_FOR_GO))
    git("add", "-A", cwd=project)
    git("commit", "-qm", "escape suite", cwd=project)
    refused = iterare("execute", "escape", cwd=project)
    assert (refused.returncode, refused.stdout) == (2, ""), refused.stderr
    assert "not approved" in refused.stderr  # the project Dockerfile needs the user's trust
    assert iterare("trust", "--yes", cwd=project).returncode == 0

    # As the agent. The project image is built on the engine when the run needs it.
    started = iterare("execute", "escape", cwd=project)
    assert started.returncode == 0, started.stderr
    rid = run_id(started.stdout)
    built = [line for line in started.stderr.splitlines() if line.startswith("building ")]
    assert built and built[0].endswith(f"from {project}/.iterare/Dockerfile (its RUN steps "
                                       "reach the internet, not the Docker host)"), started.stderr
    assert "Step 1/5: FROM " + remote_image in started.stderr
    rec = record(project, rid)
    assert ":project-" in rec["image"]
    assert inner.images.get(rec["image"]).id == rec["image_digest"]
    # The sandbox is attached to the intranet too, which no policy entry opens (but a CIDR
    # entry opens one of its addresses): as the local suite's sandbox is.
    inner.networks.get(remote_internet["intranet"]).connect(f"iterare-{rid}-net")
    _touch_go(inner.containers.get(f"iterare-{rid}"))
    followed = iterare("log", "-f", rid, cwd=project)
    assert followed.returncode == 0, followed.stderr
    assert "escape-finished" in followed.stdout, followed.stdout
    agent = _parse(followed.stdout)
    rec = record(project, rid)
    assert rec["status"] == "succeeded", rec

    # As root in the agent's container (no capabilities there either), in a run that
    # waits; and from the internet, into the sandbox, where the agent listens.
    held = iterare("execute", "hold", cwd=project)
    assert held.returncode == 0, held.stderr
    rid2 = run_id(held.stdout)
    container = inner.containers.get(f"iterare-{rid2}")
    wait_for(lambda: b"holding" in container.logs(), "the second agent to start")
    inner.networks.get(remote_internet["intranet"]).connect(f"iterare-{rid2}-net")
    code, (out, err) = container.exec_run(["/opt/real/bash", "/workspace/escape.sh"],
                                          user="0", environment=script_env(),
                                          workdir="/workspace", demux=True)
    root = _parse((out or b"").decode())
    uid = agent_ids()[0]
    listening = container.exec_run(["nc", "-z", "127.0.0.1", "8000"], user=f"{uid}:{uid}")
    assert listening.exit_code == 0, "the agent's listener is not up"
    sidecar = inner.containers.get(f"iterare-{rid2}-net")
    addresses = sidecar.attrs["NetworkSettings"]["Networks"][remote_internet["internet"]]
    inbound = {}
    for family in ("IPAddress", "GlobalIPv6Address"):
        address = addresses[family]
        assert address, addresses
        inbound[address] = remote_internet["peer"].exec_run(["python3", "-c", (
            "import socket\n"
            f"socket.create_connection(('{address}', 8000), timeout=3)\n"
            "print('connected')\n")]).output.decode()
    _touch_go(container)
    assert iterare("log", "-f", rid2, cwd=project).returncode == 0

    problems = []
    for mode, results, skip in (("agent", agent, ONLY_ROOT), ("root", root, ONLY_AGENT)):
        for name in CONTROLS:
            if not results.get(name, {}).get("escaped"):
                problems.append(f"{mode}: control {name} did not work: {results.get(name)}")
        for name in ATTEMPTS:
            if name in skip or name in NOT_REMOTE:
                continue
            if name not in results:
                problems.append(f"{mode}: attempt {name} did not run")
            elif results[name]["escaped"]:
                problems.append(f"{mode}: {name} escaped: {results[name]['detail']}")
    for address, answer in inbound.items():
        if "connected" in answer:
            problems.append(f"inbound: the internet connected to the sandbox at {address}")
    assert not problems, "\n".join(problems) + "\n" + (err or b"").decode()[-2000:]
    assert code == 0
    # The sidecar's report came back with the run: blocked names were asked and refused.
    egress = rec["egress"]
    assert egress["refused_connections"]["recorded"] is True, egress
    assert "blocked.test" in egress["blocked"], egress


def test_claude_code_against_the_fake_api_on_a_remote_engine(
        over_ssh: Path, hermetic_env: Path, dind_engine: DindEngine, remote_image: str,
        remote_internet: dict[str, Any]) -> None:
    """The real Claude Code in a remote run talks to the fake API, which runs as a
    container on the engine (published on the engine host's gateway address, which only a
    CIDR entry of the user's opens); its commits land on the run's branch and merge."""
    project = over_ssh
    # fakeapi.test answers the gateway's address: only a CIDR entry opens it.
    _write_config(hermetic_env, remote_image, remote_internet["internet"],
                  f'[claude]\nbase_url = "http://fakeapi.test:{FAKEAPI_PORT}"\n',
                  cidr="GATEWAY_V4")
    (project / ".iterare" / "prompts" / "notes.md").write_text(
        "---\nagent: claude\n---\nAdd a notes file and commit it.\n")
    git("add", "-A", cwd=project)
    git("commit", "-qm", "prompt", cwd=project)
    env = {"ANTHROPIC_API_KEY": "sk-ant-api03-test-key-not-real"}
    started = iterare("execute", "notes", "-f", "-v", "1", cwd=project, env=env)
    assert started.returncode == 0, started.stdout + started.stderr
    rid = run_id(started.stdout)
    assert "I will add the notes file." in started.stdout
    assert "Added notes.txt and second.txt." in started.stdout
    rec = record(project, rid)
    assert (rec["status"], rec["turns"]) == ("succeeded", 3), rec
    assert rec["extra"]["engine"]["url"] == dind_engine.ssh_url
    assert git("show", f"iterare/{rid}:notes.txt", cwd=project).stdout == "made by claude\n"
    assert git("log", "--format=%s", f"main..iterare/{rid}", cwd=project).stdout.splitlines() == [
        f"iterare: work left uncommitted by run {rid}", "Add notes"]
    _, log = remote_internet["fake"].exec_run(["cat", "/srv/requests.jsonl"])
    taken = [json.loads(line)["turn"] for line in log.decode().splitlines()]
    assert [t for t in taken if t is not None] == [0, 1, 2], taken
    assert b"sk-ant-api03-test-key-not-real" not in log  # the fake redacts the key header
    merged = iterare("merge", rid, cwd=project)
    assert merged.returncode == 0, merged.stderr
    assert (project / "notes.txt").read_text() == "made by claude\n"
    assert (project / "second.txt").read_text() == "second file\n"
    assert iterare("cleanup", "-y", rid, cwd=project).returncode == 0


#: The docker command's ssh reads the login's own ~/.ssh (not $HOME's): this one reads
#: the test's HOME, as ssh reads a user's own files.
SSH_SHIM = """#!/bin/sh
exec /usr/bin/ssh -F "$HOME/.ssh/config" -o UserKnownHostsFile="{known}" "$@"
"""


def _ssh_for_the_cli(home: Path, monkeypatch: pytest.MonkeyPatch, known: str) -> None:
    shim = home / "bin"
    shim.mkdir(exist_ok=True)
    (shim / "ssh").write_text(SSH_SHIM.format(known=known))
    (shim / "ssh").chmod(0o755)
    monkeypatch.setenv("PATH", f"{shim}{os.pathsep}{os.environ['PATH']}")


@pytest.mark.parametrize("transport", ["ssh", "tls"])
def test_interactive_session_in_a_worktree_on_a_remote_engine(
        transport: str, request: pytest.FixtureRequest, hermetic_env: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The session is a remote run; the docker command attaches the terminal over the same
    transport (ssh, or tcp+TLS with the certificates of DOCKER_CERT_PATH)."""
    project = request.getfixturevalue("over_ssh" if transport == "ssh" else "over_tls")
    if transport == "ssh":
        _ssh_for_the_cli(hermetic_env, monkeypatch, str(hermetic_env / ".ssh" / "known_hosts"))
    code, output = in_terminal(
        ["git", "iterare", "interactive", "--worktree", "--shell", "--workspace", "tty"],
        project, b"echo typed > typed.txt; exit 0\n", ready=b"/workspace$")
    assert code == 0, output.decode(errors="replace")
    runs = git("for-each-ref", "--format=%(refname:strip=3)", "refs/iterare/runs",
               cwd=project).stdout.split()
    assert len(runs) == 1 and runs[0].startswith("tty-"), runs
    rec = record(project, runs[0])
    assert (rec["status"], rec["agent"]) == ("succeeded", "shell"), rec
    assert rec["extra"]["engine"]["url"].startswith(f"{transport.replace('tls', 'tcp')}://")
    assert git("show", f"iterare/{runs[0]}:typed.txt", cwd=project).stdout == "typed\n"


def test_interactive_when_the_docker_command_cannot_reach_the_engine(
        over_ssh: Path, hermetic_env: Path, dind_engine: DindEngine,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The docker command's ssh does not know the engine's host key: one line, no
    "detached" (the sandbox never started), and stopping the run commits nothing (its
    empty trees on the engine are not the agent's work)."""
    project = over_ssh
    monkeypatch.setenv("NO_COLOR", "1")
    _ssh_for_the_cli(hermetic_env, monkeypatch, "/dev/null")
    code, output = in_terminal(
        ["git", "iterare", "interactive", "--worktree", "--shell", "--workspace", "tty"],
        project, b"", ready=b"never typed")
    text = output.decode(errors="replace").replace("\r\n", "\n")
    runs = git("for-each-ref", "--format=%(refname:strip=3)", "refs/iterare/runs",
               cwd=project).stdout.split()
    assert code == 1, text
    assert "Host key verification failed" in text
    assert text.splitlines()[-1] == (
        "error: the docker command could not attach the terminal to the sandbox on "
        f"{dind_engine.ssh_url} (exit status 1) (check that `docker version` reaches that "
        f"engine from this shell; `git iterare stop {runs[0]}` ends the run)")
    stopped = iterare("stop", runs[0], cwd=project)
    assert stopped.returncode == 0, stopped.stderr
    assert f"run {runs[0]}: its agent never started; its base is kept" in (
        stopped.stderr)
    assert git("rev-parse", f"iterare/{runs[0]}", cwd=project).stdout == git(
        "rev-parse", "main", cwd=project).stdout


def test_interactive_on_the_checkout_is_refused_on_a_remote_engine(
        over_ssh: Path, dind_engine: DindEngine, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NO_COLOR", "1")
    code, output = in_terminal(["git", "iterare", "interactive", "--shell"], over_ssh, b"",
                               ready=b"never typed", timeout=30)
    assert code == 2, output
    assert output.decode().replace("\r\n", "\n") == (
        "error: a session on your checkout needs a local Docker engine; "
        f"{dind_engine.ssh_url} is remote and sees none of this machine's files "
        "(use `git iterare interactive --worktree`, which ships a copy)\n")
    assert dind_engine.client().containers.list(
        all=True, filters={"label": f"dev.iterare.repo={over_ssh}"}) == []


def _nothing_made(engine: DindEngine, project: Path) -> None:
    assert git("for-each-ref", "refs/iterare", cwd=project).stdout == ""
    inner = engine.client()
    assert inner.volumes.list(filters={"label": f"dev.iterare.repo={project}"}) == []
    assert inner.containers.list(all=True,
                                 filters={"label": f"dev.iterare.repo={project}"}) == []


def test_mounts_are_refused_on_a_remote_engine(over_ssh: Path, hermetic_env: Path,
                                               dind_engine: DindEngine, tmp_path: Path
                                               ) -> None:
    project = over_ssh
    data = tmp_path / "data"
    data.mkdir()
    config = hermetic_env / ".config" / "iterare" / "config.toml"
    config.write_text(config.read_text() + f'[mounts]\nvolumes = ["{data}:/data:ro"]\n')
    (project / ".iterare" / "prompts" / "noop.md").write_text(_task("true\n"))
    result = iterare("execute", "noop", cwd=project)
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr == (
        f"error: the mount of {data} cannot be used: the Docker engine is remote and sees "
        "none of this machine's files (drop it from [mounts] volumes, or use a local Docker "
        "engine)\n")
    _nothing_made(dind_engine, project)


SUBMODULE_TASK = """\
s=$(git status --porcelain); echo "$s" > status.txt
cat vendor/lib/lib.c > seen.txt
ls -A vendor/lib >> seen.txt
echo 'int more;' >> vendor/lib/lib.c
echo 'int added;' > vendor/lib/added.c
"""


def test_initialized_submodules_work_on_a_remote_engine(
        over_ssh: Path, dind_engine: DindEngine, tmp_path: Path) -> None:
    project = over_ssh
    recorded = add_submodule(project, tmp_path)
    base = git("rev-parse", "HEAD", cwd=project).stdout.strip()
    (project / ".iterare" / "prompts" / "sub.md").write_text(_task(SUBMODULE_TASK))
    result = iterare("execute", "sub", "--follow", cwd=project)
    assert result.returncode == 0, result.stdout + result.stderr
    rid = run_id(result.stdout)
    extra = record(project, rid)["extra"]
    assert extra["shipped"]["submodules"] == [[recorded, "vendor/lib"]]
    assert extra["fetched"]["worktree"] == "change"  # not the whole tree
    # The agent saw the submodule checked out as a local run has it: files, no .git, and
    # a clean status.
    assert git("show", f"iterare/{rid}:status.txt", cwd=project).stdout == "\n"
    assert git("show", f"iterare/{rid}:seen.txt", cwd=project).stdout == "int lib;\nlib.c\n"
    # Its work there is a commit in the submodule's repository, and nothing was deleted.
    assert git("diff", "--name-status", base, f"iterare/{rid}", cwd=project).stdout == (
        "A\tseen.txt\nA\tstatus.txt\nM\tvendor/lib\n")
    link = git("rev-parse", f"iterare/{rid}:vendor/lib", cwd=project).stdout.strip()
    modules = project / ".git" / "modules" / "vendor" / "lib"
    assert git("--git-dir", str(modules), "rev-parse", f"iterare/{rid}",
               cwd=project).stdout.strip() == link
    assert git("--git-dir", str(modules), "diff", "--name-status", recorded, link,
               cwd=project).stdout == "A\tadded.c\nM\tlib.c\n"
    assert git("--git-dir", str(modules), "show", f"{link}:lib.c",
               cwd=project).stdout == "int lib;\nint more;\n"
    # A second run (it takes the spare worktree over) sees it too, and changes nothing.
    (project / ".iterare" / "prompts" / "look.md").write_text(_task(
        "cat vendor/lib/lib.c\ngit status --porcelain\n"))
    again = iterare("execute", "look", "--follow", cwd=project)
    assert again.returncode == 0, again.stdout + again.stderr
    rid2 = run_id(again.stdout)
    assert "spare" in record(project, rid2)["extra"]
    assert "int lib;\n" in again.stdout and "vendor" not in again.stdout, again.stdout
    assert git("diff", "--stat", base, f"iterare/{rid2}", cwd=project).stdout == ""


FILTERED_TASK = """\
s=$(git status --porcelain); echo "$s" > status.txt
cat d.dat > seen-d.txt
sha256sum big.bin > seen-big.txt
echo 'hello changed' > d.dat
"""


def test_filtered_and_lfs_files_are_seen_as_locally_on_a_remote_engine(
        over_ssh: Path, dind_engine: DindEngine) -> None:
    project = over_ssh
    content = bytes(range(256)) * 64
    # The rot13 filter first: rot_repo writes .gitattributes whole, and a racily clean
    # big.bin would be staged again without its LFS attribute.
    rot_repo(project)  # the user's rot13 filter for *.dat
    git("lfs", "install", "--local", cwd=project)
    git("lfs", "track", "*.bin", cwd=project)  # appends to .gitattributes
    (project / "big.bin").write_bytes(content)
    git("add", ".", cwd=project)
    git("commit", "-qm", "lfs", cwd=project)
    base = git("rev-parse", "HEAD", cwd=project).stdout.strip()
    assert blob(project, f"{base}:big.bin").startswith(b"version https://git-lfs")
    (project / ".iterare" / "prompts" / "filtered.md").write_text(_task(FILTERED_TASK))
    result = iterare("execute", "filtered", "--follow", cwd=project)
    assert result.returncode == 0, result.stdout + result.stderr
    rid = run_id(result.stdout)
    # The agent saw the files as the user's filters write them, and a clean status.
    assert blob(project, f"iterare/{rid}:status.txt") == b"\n"
    assert blob(project, f"iterare/{rid}:seen-d.txt") == b"hello secret\n"
    assert blob(project, f"iterare/{rid}:seen-big.txt") == (
        f"{hashlib.sha256(content).hexdigest()}  big.bin\n".encode())
    # Its change is committed cleaned; what it left is its blob, and was not fetched.
    assert git("diff", "--name-status", base, f"iterare/{rid}", cwd=project).stdout == (
        "M\td.dat\nA\tseen-big.txt\nA\tseen-d.txt\nA\tstatus.txt\n")
    assert blob(project, f"iterare/{rid}:d.dat") == b"uryyb punatrq\n"
    assert record(project, rid)["extra"]["fetched"]["changed"] == 4
    assert record(project, rid)["extra"]["shipped"]["file_bytes"] > len(content)  # sent
    # A second run takes the spare worktree (checked out without filters) over: the same.
    (project / ".iterare" / "prompts" / "look.md").write_text(_task(
        "cat d.dat\ngit status --porcelain\nsha256sum big.bin\n"))
    again = iterare("execute", "look", "--follow", cwd=project)
    assert again.returncode == 0, again.stdout + again.stderr
    rid2 = run_id(again.stdout)
    assert "spare" in record(project, rid2)["extra"]
    assert (f"hello secret\n{hashlib.sha256(content).hexdigest()}  big.bin\n"
            in again.stdout), again.stdout
    assert git("diff", "--stat", base, f"iterare/{rid2}", cwd=project).stdout == ""
    assert record(project, rid2)["extra"]["fetched"]["changed"] == 0


def test_filtered_files_in_a_submodule_are_seen_as_locally_on_a_remote_engine(
        over_ssh: Path, dind_engine: DindEngine, tmp_path: Path) -> None:
    project = over_ssh
    for key, value in (("clean", ROT13), ("smudge", ROT13), ("required", "true")):
        git("config", "--global", f"filter.rot.{key}", value, cwd=project)  # the user's
    lib = tmp_path / "lib"
    lib.mkdir()
    git("init", "-q", "-b", "main", cwd=lib)
    (lib / ".gitattributes").write_text("*.dat filter=rot\n")
    (lib / "d.dat").write_text("hello secret\n")
    git("add", ".", cwd=lib)
    git("commit", "-qm", "lib", cwd=lib)
    git("-c", "protocol.file.allow=always", "submodule", "add", "-q", str(lib), "vendor/lib",
        cwd=project)
    git("commit", "-qm", "submodule", cwd=project)
    base = git("rev-parse", "HEAD", cwd=project).stdout.strip()
    (project / ".iterare" / "prompts" / "sub.md").write_text(_task(
        's=$(git status --porcelain); echo "$s" > status.txt\n'
        "cat vendor/lib/d.dat > seen.txt\n"))
    result = iterare("execute", "sub", "--follow", cwd=project)
    assert result.returncode == 0, result.stdout + result.stderr
    rid = run_id(result.stdout)
    assert blob(project, f"iterare/{rid}:seen.txt") == b"hello secret\n"
    assert blob(project, f"iterare/{rid}:status.txt") == b"\n"
    # Nothing changed in the submodule: its converted file neither came back nor counts.
    assert git("diff", "--name-status", base, f"iterare/{rid}", cwd=project).stdout == (
        "A\tseen.txt\nA\tstatus.txt\n")
    assert record(project, rid)["extra"]["fetched"]["changed"] == 2


@pytest.fixture(scope="module")
def remote_base(dind_engine: DindEngine) -> str:
    """The Debian base image, copied into the DinD engine (before any test points
    DOCKER_HOST there)."""
    from tests.sandbox_fixtures import BASE_IMAGE

    dind_engine.load_image(BASE_IMAGE)
    return BASE_IMAGE


@pytest.mark.slow
def test_image_build_on_a_remote_engine(remote_base: str, over_ssh: Path,
                                        dind_engine: DindEngine, tmp_path: Path) -> None:
    """The whole sandbox image, Claude Code included, built inside DinD: the context goes
    through the API (over ssh), steps are shown, and npm downloads through this machine's
    TLS-intercepting proxy with ``--ca-bundle`` (which never reaches the image)."""
    from tests.sandbox_fixtures import CA_BUNDLE

    base = remote_base
    tag = f"itr-remote-built-{os.getpid()}:1"
    outside = tmp_path / "outside"  # no repository: no project layer
    outside.mkdir()
    env = {"GIT_CEILING_DIRECTORIES": str(tmp_path)}
    bad = tmp_path / "not-pem.txt"
    bad.write_text("hello\n")
    refused = iterare("image", "build", "--base", base, "--ca-bundle", str(bad),
                      "--tag", tag, cwd=outside, env=env)
    assert (refused.returncode, refused.stderr) == (
        2, f"building {tag} from {base}\nerror: {bad} is not a PEM CA bundle (no BEGIN "
           "CERTIFICATE) (fix --ca-bundle or [docker] ca_bundle)\n")
    missing = iterare("image", "build", "--base", "itr-no-such-base:1", "--tag", tag,
                      cwd=outside, env=env)
    assert missing.returncode == 1
    assert missing.stderr.splitlines()[-1].startswith(
        f"error: the base image itr-no-such-base:1 is not on the Docker engine at "
        f"{dind_engine.ssh_url} and could not be pulled there (building {tag} failed: ")
    assert missing.stderr.endswith(
        f"(copy it from an engine that has it: `docker save itr-no-such-base:1 | docker -H "
        f"{dind_engine.ssh_url} load`, or name another with --base or [docker] "
        "base_image)\n"), missing.stderr
    inner = dind_engine.client()
    try:
        built = iterare("image", "build", "--base", base, "--ca-bundle", CA_BUNDLE,
                        "--agents", "claude", "--tag", tag, cwd=outside, env=env)
        assert built.returncode == 0, built.stderr[-3000:]
        image = inner.images.get(tag)
        assert built.stdout == f"{tag} {image.id}\n"
        lines = built.stderr.splitlines()
        assert lines[0] == f"building {tag} from {base}"
        steps = [line for line in lines if line.startswith("Step ")]
        assert steps[0].startswith("Step 1/") and len(steps) > 10, lines
        assert image.labels["dev.iterare.agents"] == "claude"
        out = inner.containers.run(tag, ["claude --version; ls -A /tmp"],
                                   entrypoint=["sh", "-c"], remove=True)
        assert out.decode().splitlines() == [out.decode().splitlines()[0]]
        assert "Claude Code" in out.decode()
        # Built there, not here.
        local = subprocess.run(["docker", "image", "inspect", tag], capture_output=True,
                               env={k: v for k, v in os.environ.items()
                                    if not k.startswith("DOCKER_")}, check=False)
        assert local.returncode != 0
    finally:
        with contextlib.suppress(Exception):  # not built
            inner.images.remove(tag, force=True)
