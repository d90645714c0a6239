"""A local Podman engine for the tests, through its Docker-compatible API socket.

Use the session fixtures :func:`podman_engine` and :func:`podman_image` (list this module
in ``pytest_plugins``, as tests/conftest.py does). :func:`podman_engine` answers at
``ITERARE_TEST_PODMAN_SOCKET`` (default ``/run/podman/podman-itr.sock``): when nothing
answers there, it starts ``podman system service --time=0 unix://<socket>`` (rootful) and
stops that process at the end of the session; a service someone else started is used and
left running. Tests that need it are skipped only when ``podman`` is not installed
(``.ci/setup`` installs it).

Podman as root gives every container ``nofile`` and ``nproc`` limits of about a million
(its built-in defaults); an engine without CAP_SYS_RESOURCE, as on these machines, cannot
raise them and every container fails to start ("error setting rlimit type 7: operation not
permitted"). The service started here therefore reads a ``containers.conf``
(``CONTAINERS_CONF``) whose ``default_ulimits`` stay within the limits this process has.

Podman keeps its own image store: :func:`podman_image` builds the sandbox image there with
the real ``git iterare image build`` through ``DOCKER_HOST`` (Podman's classic-build API;
its layer cache makes a rebuild quick).
"""

from __future__ import annotations

import os
import resource
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

SOCKET = os.environ.get("ITERARE_TEST_PODMAN_SOCKET", "/run/podman/podman-itr.sock")
TEST_IMAGE = os.environ.get("ITERARE_TEST_IMAGE", "git-iterare:latest")
BASE_IMAGE = os.environ.get("ITERARE_TEST_BASE_IMAGE", "iterare-base:bookworm")
CA_BUNDLE = os.environ.get("ITERARE_TEST_CA_BUNDLE", "/etc/ssl/certs/ca-certificates.crt")

#: Longest wait for the service to answer, in seconds.
START_TIMEOUT = 60
#: Highest ``nproc`` given to containers (Podman's own process has at most this many on
#: these machines, and a container's limit may not exceed its creator's).
MAX_NPROC = 16384


@dataclass
class PodmanEngine:
    """A Podman API service.

    Attributes:
        url: ``unix:///path/of/the/socket`` (for ``DOCKER_HOST``).
        started: True when this session started the service (and stops it).
        startup_seconds: from start to the first answer (0 when it was running).
    """

    url: str
    started: bool
    startup_seconds: float

    def env(self) -> dict[str, str]:
        """Environment for git iterare and the docker CLI to use this engine."""
        return {"DOCKER_HOST": self.url, "DOCKER_CONTEXT": ""}

    def client(self) -> Any:
        """A docker SDK client of this engine."""
        import docker

        return docker.DockerClient(base_url=self.url, version="auto", timeout=120)


def _answers(url: str) -> bool:
    import docker

    try:
        return bool(docker.DockerClient(base_url=url, version="1.41", timeout=5).ping())
    except Exception:
        return False


def containers_conf(folder: Path) -> Path:
    """Write a ``containers.conf`` into ``folder`` whose default ulimits this process may
    give (see the module docstring); return its path."""
    nofile = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    nproc = resource.getrlimit(resource.RLIMIT_NPROC)[1]
    nofile = 1 << 20 if nofile == resource.RLIM_INFINITY else min(nofile, 1 << 20)
    nproc = MAX_NPROC if nproc == resource.RLIM_INFINITY else min(nproc, MAX_NPROC)
    path = folder / "containers.conf"
    path.write_text("[containers]\n"
                    f'default_ulimits = ["nofile={nofile}:{nofile}", "nproc={nproc}:{nproc}"]\n')
    return path


@pytest.fixture(scope="session")
def podman_engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PodmanEngine]:
    """The session's Podman engine (see the module docstring)."""
    if shutil.which("podman") is None:
        pytest.skip("podman is not installed (.ci/setup installs it)")
    url = f"unix://{SOCKET}"
    if _answers(url):
        yield PodmanEngine(url=url, started=False, startup_seconds=0.0)
        return
    folder = tmp_path_factory.mktemp("podman")
    Path(SOCKET).parent.mkdir(parents=True, exist_ok=True)
    Path(SOCKET).unlink(missing_ok=True)
    env = dict(os.environ, CONTAINERS_CONF=str(containers_conf(folder)))
    for name in ("DOCKER_HOST", "DOCKER_CONTEXT"):
        env.pop(name, None)
    log = (folder / "service.log").open("wb")
    began = time.monotonic()
    service = subprocess.Popen(["podman", "system", "service", "--time=0", url], env=env,
                               stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                               start_new_session=True)
    try:
        while not _answers(url):
            if service.poll() is not None or time.monotonic() - began > START_TIMEOUT:
                raise RuntimeError("podman system service did not start: "
                                   + (folder / "service.log").read_text()[-2000:])
            time.sleep(0.2)
        engine = PodmanEngine(url=url, started=True,
                              startup_seconds=time.monotonic() - began)
        print(f"\npodman service at {url} up in {engine.startup_seconds:.1f} s")
        yield engine
    finally:
        service.terminate()
        try:
            service.wait(timeout=30)
        except subprocess.TimeoutExpired:
            service.kill()
            service.wait()
        log.close()
        Path(SOCKET).unlink(missing_ok=True)


@pytest.fixture(scope="session")
def podman_image(podman_engine: PodmanEngine) -> str:
    """The sandbox image in Podman's store, built there by ``git iterare image build``
    through ``DOCKER_HOST`` (from this checkout's container files, as for Docker)."""
    env = dict(os.environ, GIT_CEILING_DIRECTORIES="/", **podman_engine.env())
    exe = str(Path(sys.executable).parent / "git-iterare")
    args = [exe, "image", "build", "--base", BASE_IMAGE, "--tag", TEST_IMAGE]
    if CA_BUNDLE and Path(CA_BUNDLE).is_file():
        args += ["--ca-bundle", CA_BUNDLE]
    _base_in_podman(podman_engine)
    result = subprocess.run(args, cwd="/", capture_output=True, text=True, env=env,
                            check=False, timeout=1800)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    return TEST_IMAGE


def _base_in_podman(engine: PodmanEngine) -> None:
    """Copy the base image from the local Docker engine into Podman's store when Podman
    lacks it (no registry is reachable here)."""
    import docker

    podman = engine.client()
    try:
        podman.images.get(BASE_IMAGE)
        return
    except docker.errors.ImageNotFound:
        pass
    data = docker.from_env().images.get(BASE_IMAGE).save(named=True)
    podman.images.load(b"".join(data))
