"""Session fixtures for tests that need the sandbox image and the escape suite's network.

Import the fixtures you use from here (``from tests.sandbox_fixtures import ...``).
The image is named by ``ITERARE_TEST_IMAGE`` (default ``git-iterare:latest``) and built
once, with the real ``git iterare image build``, when it is missing; its base comes from
``ITERARE_TEST_BASE_IMAGE`` (default ``iterare-base:bookworm``) and the CA bundle for the
build from ``ITERARE_TEST_CA_BUNDLE`` (default the host's bundle).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

HERE = Path(__file__).parent
NET_DIR = HERE / "sandbox_net"
TEST_IMAGE = os.environ.get("ITERARE_TEST_IMAGE", "git-iterare:latest")
BASE_IMAGE = os.environ.get("ITERARE_TEST_BASE_IMAGE", "iterare-base:bookworm")
CA_BUNDLE = os.environ.get("ITERARE_TEST_CA_BUNDLE", "/etc/ssl/certs/ca-certificates.crt")



def _free_subnet() -> int:
    """N such that 198.18.N.0/24 and 10.231.N.0/24 are used by no Docker network
    (concurrent sessions)."""
    ids = subprocess.run(["docker", "network", "ls", "-q"], capture_output=True, text=True,
                         check=False).stdout.split()
    used = subprocess.run(["docker", "network", "inspect", "--format",
                           "{{range .IPAM.Config}}{{.Subnet}} {{end}}", *ids],
                          capture_output=True, text=True, check=False).stdout.split()
    start = os.getpid() % 200
    for n in (*range(start + 7, 250), *range(7, start + 7)):
        if f"10.231.{n}.0/24" not in used and f"198.18.{n}.0/24" not in used:
            return n
    raise RuntimeError("no free 198.18.N.0/24 subnet for the test network")


_SUBNET: list[int] = []


def subnet() -> int:
    """The test network's third octet (and IPv6 group), chosen on first use (it asks Docker,
    so collecting the Docker-free tests needs no Docker) and exported as ``ITR_TESTNET``,
    which sandbox_net/docker-compose.yml reads."""
    if not _SUBNET:
        _SUBNET.append(int(os.environ.get("ITR_TESTNET") or _free_subnet()))
        os.environ["ITR_TESTNET"] = str(_SUBNET[0])
    return _SUBNET[0]


#: Host parts of the addresses given in sandbox_net/docker-compose.yml.
_NET_ADDRESSES = {
    "GATEWAY_V4": "198.18.{n}.1",
    "DNS_V4": "198.18.{n}.10",
    "DNS_V6": "2001:db8:{n}::10",
    "ALLOWED_V4": "198.18.{n}.20",
    "BLOCKED_V4": "198.18.{n}.21",
    "CDN_V4": "198.18.{n}.22",
    "WILD_V4": "198.18.{n}.23",
    "HOSTALIKE_V4": "198.18.{n}.25",
    "BLOCKED_V6": "2001:db8:{n}::21",
    "INTRANET_V4": "10.231.{n}.30",
    "INTRANET2_V4": "10.231.{n}.31",
}


class _Net(Mapping[str, str]):
    """Addresses of the test network by role (``NET["DNS_V4"]``); the subnet is chosen at
    the first lookup, never at import."""

    def __getitem__(self, key: str) -> str:
        return _NET_ADDRESSES[key].format(n=subnet())

    def __iter__(self) -> Iterator[str]:
        return iter(_NET_ADDRESSES)

    def __len__(self) -> int:
        return len(_NET_ADDRESSES)


#: Addresses given in sandbox_net/docker-compose.yml.
NET: Mapping[str, str] = _Net()


@pytest.fixture(scope="session")
def sandbox_image() -> str:
    """The sandbox image name, built once per session from this checkout's container
    files (Docker's layer cache makes that quick when nothing changed), so an image left
    by an older checkout is never what the tests exercise."""
    # A repository-less directory, so no project layer is built.
    env = dict(os.environ, GIT_CEILING_DIRECTORIES="/")
    # Session fixtures run before the per-test PATH: name this checkout's executable.
    exe = str(Path(sys.executable).parent / "git-iterare")
    args = [exe, "image", "build", "--base", BASE_IMAGE, "--tag", TEST_IMAGE]
    if CA_BUNDLE and Path(CA_BUNDLE).is_file():
        args += ["--ca-bundle", CA_BUNDLE]
    result = subprocess.run(args, cwd="/", capture_output=True, text=True, env=env,
                            check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    return TEST_IMAGE


@pytest.fixture
def own_image(sandbox_image: str) -> Iterator[str]:
    """A name of the test's own for the sandbox image, for a test whose run adds an agent
    to it (``docker.image``): the image built with that agent goes by this name, and
    the shared one stays as the other tests expect it (an install step pinned to another
    version would otherwise make their runs rebuild it). Removed afterwards."""
    name = f"itr-own-{os.getpid()}-{threading.get_ident() % 10000}:1"
    subprocess.run(["docker", "tag", sandbox_image, name], capture_output=True, check=True)
    yield name
    subprocess.run(["docker", "rmi", name], capture_output=True, check=False)


@pytest.fixture(scope="session")
def docker_compose_command() -> str:
    """Debian ships Compose v1 as ``docker-compose``."""
    return "docker-compose"


@pytest.fixture(scope="session")
def docker_setup() -> list[str]:
    """Compose v1 has no ``up --wait`` (pytest-docker's default)."""
    return ["down -v", "up --build -d"]


@pytest.fixture(scope="session")
def docker_cleanup() -> list[str]:
    return ["down -v"]


@pytest.fixture(scope="session")
def docker_compose_file() -> str:
    subnet()  # Compose reads ITR_TESTNET
    return str(NET_DIR / "docker-compose.yml")


@pytest.fixture(scope="session")
def docker_compose_project_name() -> str:
    return f"itrsandbox{os.getpid()}"


@pytest.fixture(scope="session")
def test_network(docker_services, docker_compose_project_name: str) -> str:
    """Name of the escape suite's network, with its DNS and HTTP servers up."""
    docker_services.wait_until_responsive(
        timeout=60, pause=0.5,
        check=lambda: all(_tcp_open(NET[k], 80) for k in (
            "ALLOWED_V4", "BLOCKED_V4", "CDN_V4", "WILD_V4", "HOSTALIKE_V4", "INTRANET_V4",
            "INTRANET2_V4")))
    return f"{docker_compose_project_name}_internet"


def _tcp_open(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1):
            return True
    except OSError:
        return False


@pytest.fixture(scope="session")
def host_listener(test_network: str) -> Iterator[int]:
    """A TCP service on the Docker host, bound to the test network's gateway address.

    Yields the port. Every connection gets ``host-secret`` and is recorded.
    """
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind((NET["GATEWAY_V4"], 0))
    server.listen(8)
    server.settimeout(0.5)
    accepted: list[str] = []
    done = threading.Event()

    def serve() -> None:
        while not done.is_set():
            try:
                conn, peer = server.accept()
            except OSError:
                continue
            accepted.append(peer[0])
            with conn:
                conn.sendall(b"HTTP/1.0 200 OK\r\n\r\nhost-secret\n")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield server.getsockname()[1]
    done.set()
    thread.join(2)
    server.close()
