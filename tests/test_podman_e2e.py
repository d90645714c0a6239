"""git iterare on Podman, through its Docker-compatible API (``podman system service``,
rootful; tests/podman_engine.py), chosen with ``DOCKER_HOST`` as a user would: the shell
agent end to end, the key escape attempts from a Podman sandbox on a Podman network made
here, and Docker still working on the same machine afterwards."""

from __future__ import annotations

import os
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from git_iterare.sandbox import agent_ids
from tests.conftest import git, iterare
from tests.podman_engine import BASE_IMAGE, PodmanEngine
from tests.runs_helpers import prompt, record, run_id

pytestmark = pytest.mark.docker

LABEL = "dev.iterare.test"


@dataclass
class PodmanNet:
    """A Podman network with a DNS server and two HTTP servers.

    Attributes:
        name: the network's name (on the Podman engine).
        prefix: its ``198.19.N`` (a /24): the gateway is ``.1``, the DNS server ``.10``
            (allowed.test -> ``.20``, every other name -> ``.21``), ``allowed`` at ``.20``
            and ``blocked`` at ``.21`` answer HTTP on 80 and 8080 with ``NAME:PORT``.
    """

    name: str
    prefix: str

    def at(self, host: int) -> str:
        return f"{self.prefix}.{host}"


def _free_prefix() -> str:
    """``198.19.N`` routed nowhere on this host yet (Docker and Podman bridges alike)."""
    routes = subprocess.run(["ip", "-4", "route"], capture_output=True, text=True,
                            check=True).stdout
    start = os.getpid() % 200
    for n in (*range(start + 7, 250), *range(7, start + 7)):
        if f"198.19.{n}." not in routes:
            return f"198.19.{n}"
    raise RuntimeError("no free 198.19.N.0/24 for the Podman test network")


def _tcp_open(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1):
            return True
    except OSError:
        return False


SERVE = ("set -e; for p in 80 8080; do mkdir -p /srv/$p; echo \"$0:$p\" > /srv/$p/index.html; "
         "python3 -m http.server --bind 0.0.0.0 --directory /srv/$p $p & done; wait")


@pytest.fixture(scope="module")
def podman_net(podman_engine: PodmanEngine, podman_image: str) -> Iterator[PodmanNet]:
    """The Podman network and its servers (from the sandbox image: it has dnsmasq and
    python3), made through the API; removed, containers first, at the end."""
    from docker.types import IPAMConfig, IPAMPool

    engine = podman_engine.client()
    prefix = _free_prefix()
    name = f"itr-podman-net-{uuid.uuid4().hex[:8]}"
    network = engine.networks.create(name, driver="bridge", labels={LABEL: "podman"},
                                     ipam=IPAMConfig(pool_configs=[IPAMPool(
                                         subnet=f"{prefix}.0/24", gateway=f"{prefix}.1")]))
    made: list[Any] = []
    try:
        servers = {
            10: ["dnsmasq", "--keep-in-foreground", "--no-resolv", "--no-hosts",
                 "--log-facility=-", f"--address=/allowed.test/{prefix}.20",
                 f"--address=/#/{prefix}.21"],
            20: ["sh", "-c", SERVE, "allowed"],
            21: ["sh", "-c", SERVE, "blocked"],
        }
        for host, argv in servers.items():
            config = engine.api.create_networking_config({name: engine.api.create_endpoint_config(
                ipv4_address=f"{prefix}.{host}")})
            created = engine.api.create_container(
                podman_image, entrypoint=argv[:1], command=argv[1:], user="0:0",
                name=f"{name}-{host}", labels={LABEL: "podman"}, networking_config=config,
                host_config=engine.api.create_host_config(network_mode=name))
            container = engine.containers.get(created["Id"])
            made.append(container)
            container.start()
        deadline = time.monotonic() + 60
        while not all(_tcp_open(f"{prefix}.{h}", p) for h in (20, 21) for p in (80, 8080)):
            assert time.monotonic() < deadline, [c.logs()[-500:] for c in made]
            time.sleep(0.3)
        yield PodmanNet(name=name, prefix=prefix)
    finally:
        for container in made:
            container.remove(force=True)
        network.remove()


@pytest.fixture
def podman_project(repo: Path, hermetic_env: Path, podman_engine: PodmanEngine,
                   podman_image: str, podman_net: PodmanNet,
                   monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A repository whose runs go to Podman (``DOCKER_HOST``) on the test network; the
    settings are the user's own (trusted), so no trust step is needed."""
    for name, value in podman_engine.env().items():
        monkeypatch.setenv(name, value)
    config = hermetic_env / ".config" / "iterare"
    config.mkdir(parents=True, exist_ok=True)
    (config / "config.toml").write_text(
        f'[docker]\nimage = "{podman_image}"\nnetwork = "{podman_net.name}"\n'
        f'dns = ["{podman_net.at(10)}"]\ncpus = 1\nmemory = "1g"\n'
        '[firewall]\nallowed_domains = ["allowed.test"]\n[run]\nagent = "shell"\n')
    (repo / ".iterare" / "prompts").mkdir(parents=True)
    (repo / ".iterare" / ".gitignore").write_text("/worktrees/\n")
    git("add", ".iterare", cwd=repo)
    git("commit", "-qm", "iterare", cwd=repo)
    yield repo
    engine = podman_engine.client()
    for container in engine.containers.list(all=True,
                                            filters={"label": f"dev.iterare.repo={repo}"}):
        container.remove(force=True)


SHELL_TASK = """\
echo "hello from $(id -un) $(id -u)" > hello.txt
git add hello.txt
git commit -qm "Add hello"
echo "left for the autocommit" > more.txt
git status --short
curl -sS --max-time 3 http://allowed.test/
if [ -e /run/.containerenv ]; then echo "a Podman container"; fi
echo finished
"""


def test_shell_agent_full_flow_on_podman(podman_project: Path,
                                         podman_engine: PodmanEngine) -> None:
    project = podman_project
    prompt(project, "hello", SHELL_TASK)
    started = iterare("execute", "hello", "--follow", cwd=project)
    assert started.returncode == 0, started.stdout + started.stderr
    rid = run_id(started.stdout)
    # Podman (not Docker) ran it: it makes /run/.containerenv in its containers.
    assert "?? more.txt\nallowed:80\na Podman container\nfinished\n" in started.stdout
    assert started.stderr.splitlines()[-1] == f"run {rid} succeeded"
    rec = record(project, rid)
    assert (rec["status"], rec["exit_code"]) == ("succeeded", 0)
    assert rec["extra"]["engine"] == {"name": "default", "url": podman_engine.url}
    assert git("show", f"iterare/{rid}:hello.txt", cwd=project).stdout == (
        f"hello from agent {agent_ids()[0]}\n")

    listed = iterare("list", cwd=project)
    assert listed.returncode == 0, listed.stderr
    assert rid in listed.stdout and "succeeded" in listed.stdout
    shown = iterare("log", rid, cwd=project)
    assert shown.stdout.endswith("a Podman container\nfinished\ndone\n"), shown.stdout
    diff = iterare("diff", rid, "--stat", cwd=project)
    assert diff.stdout.splitlines()[-1] == " 2 files changed, 2 insertions(+)"
    merged = iterare("merge", rid, cwd=project)
    assert merged.returncode == 0, merged.stderr
    assert (project / "hello.txt").read_text() == f"hello from agent {agent_ids()[0]}\n"
    assert (project / "more.txt").read_text() == "left for the autocommit\n"
    # The trees came back to the user (the sidecar on Podman gave them back).
    worktree = project / ".iterare" / "worktrees" / rid
    assert worktree.stat().st_uid == os.getuid()
    cleaned = iterare("cleanup", "-y", rid, cwd=project)
    assert cleaned.returncode == 0, cleaned.stderr
    assert not worktree.exists()
    assert record(project, rid)["status"] == "cleaned"
    assert podman_engine.client().containers.list(
        all=True, filters={"label": f"dev.iterare.repo={project}"}) == []


def test_a_loop_on_podman(podman_project: Path, podman_engine: PodmanEngine) -> None:
    """A round's check and the next round are made as on Docker (a commit of the agent's
    container, a container made from the run's image); nothing is left on Podman."""
    project = podman_project
    prompt(project, "twice", 'echo "round $ITERARE_ROUND" > "work-$ITERARE_ROUND"\n'
                             'echo planted > "$HOME/planted"\n')
    started = iterare("execute", "twice", "--until", 'test -e work-2 && ! test -e "$HOME/planted"',
                      "-f", cwd=project)
    rid = run_id(started.stdout)
    watch = project / ".git" / "iterare" / "state" / rid / "watch.log"
    assert started.returncode == 0, (started.stdout + started.stderr
                                     + (watch.read_text() if watch.exists() else ""))
    rec = record(project, rid)
    assert rec["extra"]["loop"]["reason"] == "passed"
    assert [r["check_exit"] for r in rec["extra"]["rounds"]] == [1, 0]
    assert git("show", f"iterare/{rid}:work-2", cwd=project).stdout == "round 2\n"
    engine = podman_engine.client()
    assert engine.images.list(filters={"label": f"dev.iterare.run={rid}"}) == [], \
        watch.read_text() if watch.exists() else started.stderr
    assert engine.containers.list(all=True, filters={"label": f"dev.iterare.run={rid}"}) == []


def _probes(net: PodmanNet) -> str:
    dns = net.at(10)
    return f"""\
probe() {{ n=$1; shift
    if "$@" >/dev/null 2>&1; then echo "PROBE $n reached"; else echo "PROBE $n refused"; fi; }}
answers() {{ dig +tries=1 +time=2 +short "$@" | grep -q '^[0-9]'; }}
web() {{ curl -sS --max-time 3 -o /dev/null "$@"; }}
probe allowed-name sh -c 'curl -sS --max-time 3 http://allowed.test/ | grep -q "^allowed:80"'
probe blocked-name web http://blocked.test/
probe blocked-address web http://{net.at(21)}/
probe blocked-address-other-port web http://{net.at(21)}:8080/
probe allowed-name-other-port web http://allowed.test:8080/
probe allowed-address-other-port web http://{net.at(20)}:8080/
probe blocked-name-resolves answers blocked.test
probe dns-udp-upstream-direct answers blocked.test @{dns}
probe dns-tcp-upstream-direct answers blocked.test +tcp @{dns}
probe dns-server-as-web-server web http://{dns}/
probe iptables-flush iptables -w -F OUTPUT
probe blocked-after-tampering web http://{net.at(21)}/
echo probes done
"""


def test_firewall_holds_on_podman(podman_project: Path, podman_net: PodmanNet) -> None:
    # The targets answer from outside the sandbox: a refusal below is the firewall's.
    for host, port in ((21, 80), (21, 8080), (20, 8080)):
        assert _tcp_open(podman_net.at(host), port), (host, port)
    dig = subprocess.run(["python3", "-c", (
        "import socket,struct,sys; s=socket.socket(socket.AF_INET,socket.SOCK_DGRAM); "
        "s.settimeout(3); q=struct.pack('>HHHHHH',7,256,1,0,0,0)+b'\\x07blocked\\x04test\\x00'"
        "+struct.pack('>HH',1,1); s.sendto(q,(sys.argv[1],53)); r=s.recv(512); "
        "print(struct.unpack('>H',r[6:8])[0])"), podman_net.at(10)],
        capture_output=True, text=True, check=False)
    assert dig.stdout.strip() == "1", dig.stderr  # the server answers blocked.test itself

    prompt(podman_project, "probe", _probes(podman_net))
    started = iterare("execute", "probe", "--follow", cwd=podman_project)
    assert started.returncode == 0, started.stdout + started.stderr
    results = dict(line.split()[1:3] for line in started.stdout.splitlines()
                   if line.startswith("PROBE "))
    assert "probes done" in started.stdout
    assert results == {
        "allowed-name": "reached",
        "blocked-name": "refused", "blocked-address": "refused",
        "blocked-address-other-port": "refused", "allowed-name-other-port": "refused",
        "allowed-address-other-port": "refused", "blocked-name-resolves": "refused",
        "dns-udp-upstream-direct": "refused", "dns-tcp-upstream-direct": "refused",
        "dns-server-as-web-server": "refused",
        "iptables-flush": "refused", "blocked-after-tampering": "refused"}, started.stdout
    rid = run_id(started.stdout)
    shown = iterare("show", rid, cwd=podman_project)
    assert "Blocked egress" in shown.stdout and "blocked.test" in shown.stdout, shown.stdout


def test_docker_still_works_after_podman(podman_net: PodmanNet) -> None:
    """Podman's netavark rules sit beside Docker's: Docker's default bridge and a new
    Docker network still run containers, and its embedded DNS still answers."""
    env = dict(os.environ, DOCKER_HOST="", DOCKER_CONTEXT="")
    name = f"itr-podman-dockercheck-{uuid.uuid4().hex[:8]}"

    def docker(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["docker", *args], capture_output=True, text=True, env=env,
                              check=False, timeout=120)

    assert docker("run", "--rm", BASE_IMAGE, "true").returncode == 0
    assert docker("network", "create", name).returncode == 0
    try:
        server = docker("run", "-d", "--name", f"{name}-srv", "--network", name,
                        "--network-alias", "srv", BASE_IMAGE, "sleep", "60")
        assert server.returncode == 0, server.stderr
        # Docker's embedded DNS (its own NAT rules in the container) answers.
        reach = docker("run", "--rm", "--network", name, BASE_IMAGE, "getent", "hosts", "srv")
        assert reach.returncode == 0, reach.stdout + reach.stderr
        assert reach.stdout.split()[1:] == ["srv"], reach.stdout
    finally:
        docker("rm", "-f", f"{name}-srv")
        docker("network", "rm", name)


def test_a_project_build_with_run_steps_is_refused_on_podman(
        podman_project: Path, podman_engine: PodmanEngine, podman_image: str) -> None:
    """Podman's builder runs build steps in the engine host's network namespace whatever
    network mode it is given: the probe build sees that, and the project's RUN steps are
    never run."""
    project = podman_project
    (project / ".iterare" / "Dockerfile").write_text(
        f"FROM {podman_image}\nRUN readlink /proc/self/ns/net > /tmp/seen\n")
    git("add", ".iterare", cwd=project)
    git("commit", "-qm", "a build step", cwd=project)
    assert iterare("trust", "--yes", cwd=project).returncode == 0
    prompt(project, "hello", "echo hi\n")
    started = iterare("execute", "hello", "--follow", cwd=project)
    assert started.returncode == 1, started.stdout + started.stderr
    last = started.stderr.splitlines()[-1]
    assert last.startswith(f"error: cannot build {podman_image.rsplit(':', 1)[0]}:project-")
    assert "runs build steps outside the network namespace given to them (net:[" in last
    assert last.endswith(
        "where they would reach the Docker host (Podman's builder does this) (build the "
        "image yourself and set [docker] image to it, or move the RUN steps out of "
        ".iterare/Dockerfile)")
    engine = podman_engine.client()
    assert engine.images.list(name=f"{podman_image.rsplit(':', 1)[0]}:project-*") == []
    assert engine.containers.list(all=True, filters={
        "label": "dev.iterare.role=build-network"}) == []
