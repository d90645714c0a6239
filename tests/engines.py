"""A second, real Docker engine for the tests: Docker-in-Docker that shares no filesystem
with the client, reached over ssh and over tcp+TLS.

Use the session fixture :func:`dind_engine` (``from tests.engines import dind_engine``, or
list this module in ``pytest_plugins``). It starts once per session and is removed, with
its volume, at the end:

* the image ``iterare-test-dind:<tag>`` is built from ``tests/dind`` (Debian's
  ``docker.io`` and ``openssh-server`` FROM ``ITERARE_TEST_BASE_IMAGE``, default
  ``iterare-base:bookworm``; Docker's cache makes rebuilding quick);
* the container runs without ``--privileged`` (this machine's engine lacks
  CAP_SYS_RESOURCE): every other capability, seccomp and AppArmor unconfined, ``/sys``
  and the cgroup hierarchies remounted read-write inside, ``/var/lib/docker`` on a volume,
  overlay2 (vfs when overlay2 does not start);
* sshd listens on a port of 127.0.0.1 for ``root`` with a key made here; dockerd listens on
  another with TLS and client certificates, from a CA made here (``openssl``).

The engine starts empty: :meth:`DindEngine.load_image` copies an image from the local
engine through the API (``docker save | docker load``). Nothing of the client's filesystem
is mounted into it except ``/seed`` (keys and certificates).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
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

HERE = Path(__file__).parent
DIND_DIR = HERE / "dind"
BASE_IMAGE = os.environ.get("ITERARE_TEST_BASE_IMAGE", "iterare-base:bookworm")
DIND_IMAGE = os.environ.get("ITERARE_TEST_DIND_IMAGE", "iterare-test-dind:latest")

#: Longest wait for sshd and dockerd to answer, in seconds.
START_TIMEOUT = 120


@dataclass
class DindEngine:
    """A running Docker-in-Docker engine.

    Attributes:
        container: the DinD container's name on the local engine.
        ssh_url: ``ssh://root@127.0.0.1:PORT`` (use with :meth:`ssh_home`).
        tcp_url: ``tcp://127.0.0.1:PORT``, TLS with client certificates.
        ssh_port / tcp_port: the ports on 127.0.0.1.
        seed: folder of the keys and certificates: ``id_ed25519`` (client key),
            ``known_hosts``, ``client/{ca,cert,key}.pem`` (for ``DOCKER_CERT_PATH``),
            ``ca.pem``, ``other-ca.pem`` (a CA the engine's certificate is not from).
        startup_seconds: from ``docker run`` to both endpoints answering.
        storage_driver: overlay2 or vfs.
    """

    container: str
    ssh_url: str
    tcp_url: str
    ssh_port: int
    tcp_port: int
    seed: Path
    startup_seconds: float
    storage_driver: str

    @property
    def cert_path(self) -> Path:
        """``DOCKER_CERT_PATH`` for the tcp endpoint (ca.pem, cert.pem, key.pem)."""
        return self.seed / "client"

    def tls_env(self) -> dict[str, str]:
        """``DOCKER_HOST``, ``DOCKER_TLS_VERIFY`` and ``DOCKER_CERT_PATH`` for the tcp
        endpoint."""
        return {"DOCKER_HOST": self.tcp_url, "DOCKER_TLS_VERIFY": "1",
                "DOCKER_CERT_PATH": str(self.cert_path)}

    def ssh_home(self, home: Path, key: Path | None = None) -> None:
        """Let ``home``'s user reach the ssh endpoint: ``~/.ssh/known_hosts`` with the
        engine's host key and ``~/.ssh/config`` naming ``key`` (default: the key the engine
        accepts)."""
        ssh = home / ".ssh"
        ssh.mkdir(mode=0o700, exist_ok=True)
        (ssh / "known_hosts").write_text((self.seed / "known_hosts").read_text())
        key = key or self.seed / "id_ed25519"
        (ssh / "config").write_text(f"Host 127.0.0.1\n  IdentityFile {key}\n"
                                    "  IdentitiesOnly yes\n")

    def make_context(self, home: Path, name: str, *, ca: Path | None = None,
                     client_cert: bool = True) -> None:
        """Write a docker context ``name`` for the tcp endpoint into ``home/.docker``, as
        ``docker context create`` does (TLS files under ``contexts/tls``); ``ca`` replaces
        the engine's CA, ``client_cert=False`` leaves the client certificate out."""
        digest = hashlib.sha256(name.encode()).hexdigest()
        meta = home / ".docker" / "contexts" / "meta" / digest
        meta.mkdir(parents=True, exist_ok=True)
        (meta / "meta.json").write_text(json.dumps({
            "Name": name, "Metadata": {},
            "Endpoints": {"docker": {"Host": self.tcp_url, "SkipTLSVerify": False}}}))
        tls = home / ".docker" / "contexts" / "tls" / digest / "docker"
        tls.mkdir(parents=True, exist_ok=True)
        (tls / "ca.pem").write_bytes((ca or self.cert_path / "ca.pem").read_bytes())
        if client_cert:
            for part in ("cert", "key"):
                (tls / f"{part}.pem").write_bytes((self.cert_path / f"{part}.pem").read_bytes())

    def client(self) -> Any:
        """A docker SDK client of the inner engine (tcp+TLS), verified against its own CA
        whatever ``REQUESTS_CA_BUNDLE`` says."""
        from git_iterare.sandbox.engine import TLS, Engine
        from git_iterare.sandbox.engine_client import client

        certs = self.cert_path
        return client(Engine("dind-test", self.tcp_url, TLS(
            True, str(certs / "ca.pem"), str(certs / "cert.pem"), str(certs / "key.pem"))))

    def restart_dockerd(self) -> float:
        """Restart the engine's dockerd (its entrypoint starts it again): containers
        running in it are stopped, as when the engine's host reboots; images and volumes
        stay. Returns the seconds until it answered again.

        Raises:
            RuntimeError: it did not answer within :data:`START_TIMEOUT` seconds.
        """
        local = local_env()

        def pid() -> str:
            return subprocess.run(["docker", "exec", self.container, "cat",
                                   "/var/run/docker.pid"], capture_output=True, text=True,
                                  check=False, env=local).stdout.strip()

        began = time.monotonic()
        deadline = began + START_TIMEOUT
        old = pid()
        while not old:
            if time.monotonic() > deadline:
                raise RuntimeError(f"dockerd in {self.container} has no pid file")
            time.sleep(0.3)
            old = pid()
        _run("docker", "exec", self.container, "kill", old, env=local)
        while True:
            now = pid()
            if now and now != old and _docker_ready(self.seed, self.tcp_url):
                return time.monotonic() - began
            if time.monotonic() > deadline:
                raise RuntimeError(f"dockerd in {self.container} did not come back")
            time.sleep(0.3)

    def load_image(self, name: str) -> str:
        """Copy image ``name`` from the local engine into this one through the API;
        return its id."""
        import docker

        local = docker.from_env()
        inner = self.client()
        try:
            found = inner.images.get(name)
            return str(found.id)
        except docker.errors.ImageNotFound:
            pass
        # Streamed (a chunked upload): joined, the image would stay in this process's memory.
        inner.images.load(local.images.get(name).save(named=name))  # named: this tag, not its first
        return str(inner.images.get(name).id)


def local_env() -> dict[str, str]:
    """The environment for ``docker`` commands on the local engine, which holds the DinD
    containers, whatever a test set ``DOCKER_*`` to (a test of runs on a DinD engine)."""
    return {k: v for k, v in os.environ.items()
            if k not in ("DOCKER_HOST", "DOCKER_CONTEXT", "DOCKER_TLS_VERIFY",
                         "DOCKER_CERT_PATH", "DOCKER_TLS")}


def _run(*argv: str, **kwargs: Any) -> subprocess.CompletedProcess:
    """``argv`` (checked, output captured), on the local engine unless ``env`` says."""
    kwargs.setdefault("env", local_env())
    return subprocess.run(list(argv), capture_output=True, text=True, check=True, **kwargs)


def _openssl(*args: str, cwd: Path) -> None:
    _run("openssl", *args, cwd=cwd)


def make_seed(seed: Path) -> None:
    """Keys and certificates: an ssh client key and host key, a CA with a server
    certificate (127.0.0.1, localhost) and a client certificate, and another CA."""
    seed.mkdir(parents=True, exist_ok=True)
    _run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "iterare-test",
         "-f", str(seed / "id_ed25519"))
    (seed / "authorized_keys").write_text((seed / "id_ed25519.pub").read_text())
    _run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(seed / "ssh_host_ed25519_key"))
    days = ("-days", "3")
    for ca in ("ca", "other-ca"):
        _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", *days, "-subj",
                 f"/CN=iterare test {ca}", "-keyout", f"{ca}-key.pem", "-out", f"{ca}.pem",
                 cwd=seed)
    (seed / "server.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n"
                                     "extendedKeyUsage=serverAuth\n")
    (seed / "client.ext").write_text("extendedKeyUsage=clientAuth\n")
    for who in ("server", "client"):
        _openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={who}",
                 "-keyout", f"{who}-key.pem", "-out", f"{who}.csr", cwd=seed)
        _openssl("x509", "-req", "-in", f"{who}.csr", "-CA", "ca.pem", "-CAkey", "ca-key.pem",
                 "-CAcreateserial", *days, "-extfile", f"{who}.ext",
                 "-out", f"{who}-cert.pem", cwd=seed)
    client = seed / "client"
    client.mkdir()
    (client / "ca.pem").write_bytes((seed / "ca.pem").read_bytes())
    (client / "cert.pem").write_bytes((seed / "client-cert.pem").read_bytes())
    (client / "key.pem").write_bytes((seed / "client-key.pem").read_bytes())
    for path in seed.rglob("*"):
        path.chmod(0o700 if path.is_dir() else 0o600)
    seed.chmod(0o755)  # sshd and dockerd read /seed as root


def build_image() -> str:
    """Build the DinD image (cached by Docker); return its name."""
    _run("docker", "build", "-q", "--build-arg", f"BASE={BASE_IMAGE}", "-t", DIND_IMAGE,
         str(DIND_DIR))
    return DIND_IMAGE


def _port(container: str, inner: str) -> int:
    out = _run("docker", "port", container, inner).stdout.split()[0]
    return int(out.rsplit(":", 1)[1])


def _ssh_ready(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2) as conn:
            conn.settimeout(2)
            return conn.recv(4).startswith(b"SSH-")
    except OSError:
        return False


def _docker_ready(seed: Path, url: str) -> bool:
    env = dict(os.environ, DOCKER_HOST=url, DOCKER_TLS_VERIFY="1",
               DOCKER_CERT_PATH=str(seed / "client"))
    env.pop("DOCKER_CONTEXT", None)
    result = subprocess.run(["docker", "version", "--format", "{{.Server.Version}}"],
                            capture_output=True, text=True, env=env, check=False, timeout=20)
    return result.returncode == 0 and bool(result.stdout.strip())


def _socket_ready(name: str) -> bool:
    result = subprocess.run(["docker", "exec", name, "docker", "-H", "unix:///var/run/docker.sock",
                             "version", "--format", "{{.Server.Version}}"],
                            capture_output=True, text=True, check=False, timeout=20,
                            env=local_env())
    return result.returncode == 0 and bool(result.stdout.strip())


def start(seed: Path, driver: str = "overlay2", *, prefix: str = "iterare-test-dind",
          network: str | None = None, alias: str | None = None,
          dockerd_args: tuple[str, ...] = ()) -> DindEngine:
    """Start a DinD container with the keys and certificates in ``seed`` (see
    :func:`make_seed`); return when sshd and dockerd answer.

    Args:
        seed: the keys and certificates (``known_hosts`` is written there for this engine).
        driver: dockerd's storage driver.
        prefix: the container's (and its volume's) name is ``PREFIX-<8 hex>``.
        network: a Docker network of the local engine the container joins (instead of the
            default bridge); its ports stay published on 127.0.0.1 as well.
        alias: the container's name on ``network`` (and its hostname); only with ``network``.
        dockerd_args: extra arguments for dockerd (e.g. ``("--insecure-registry",
            "10.1.2.3:5000")``), passed as ``DIND_DOCKERD_ARGS``; none may hold whitespace.

    Raises:
        RuntimeError: it did not come up within :data:`START_TIMEOUT` seconds (its log is
            in the message); the container and volume are removed then.
        ValueError: ``alias`` without ``network``, or an argument holding whitespace.
    """
    if alias and not network:
        raise ValueError("an alias needs a network")
    if any(not arg or arg.split() != [arg] for arg in dockerd_args):
        raise ValueError(f"dockerd arguments must be single words: {dockerd_args!r}")
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    placed: list[str] = []
    if network:
        placed += ["--network", network]
    if alias:
        placed += ["--network-alias", alias, "--hostname", alias]
    if dockerd_args:
        placed += ["-e", f"DIND_DOCKERD_ARGS={' '.join(dockerd_args)}"]
    began = time.monotonic()
    _run("docker", "run", "-d", "--name", name, "--label", "dev.iterare.test=dind",
         "--cap-add", "ALL", "--cap-drop", "SYS_RESOURCE",
         "--security-opt", "seccomp=unconfined", "--security-opt", "apparmor=unconfined",
         "--mount", f"type=volume,source={name},target=/var/lib/docker",
         "-v", f"{seed}:/seed:ro", "-e", f"DIND_STORAGE_DRIVER={driver}", *placed,
         "-p", "127.0.0.1::22", "-p", "127.0.0.1::2376", DIND_IMAGE)
    try:
        ssh_port, tcp_port = _port(name, "22/tcp"), _port(name, "2376/tcp")
        tcp_url = f"tcp://127.0.0.1:{tcp_port}"
        deadline = began + START_TIMEOUT
        # ssh:// reaches dockerd through its unix socket, tcp:// through TLS: both must answer.
        while not (_ssh_ready(ssh_port) and _docker_ready(seed, tcp_url)
                   and _socket_ready(name)):
            state = _run("docker", "inspect", "-f", "{{.State.Running}}", name).stdout.strip()
            if state != "true" or time.monotonic() > deadline:
                log = subprocess.run(["docker", "logs", "--tail", "30", name],
                                     capture_output=True, text=True, check=False,
                                     env=local_env())
                raise RuntimeError(f"DinD engine {name} did not start ({driver}): "
                                   f"{log.stdout[-2000:]}{log.stderr[-2000:]}")
            time.sleep(0.3)
        elapsed = time.monotonic() - began
    except BaseException:
        stop(name)
        raise
    host_key = (seed / "ssh_host_ed25519_key.pub").read_text().split()[:2]
    (seed / "known_hosts").write_text(f"[127.0.0.1]:{ssh_port} {' '.join(host_key)}\n")
    return DindEngine(container=name, ssh_url=f"ssh://root@127.0.0.1:{ssh_port}",
                      tcp_url=tcp_url, ssh_port=ssh_port, tcp_port=tcp_port, seed=seed,
                      startup_seconds=elapsed, storage_driver=driver)


def remove_leftovers(inner: Any, repo: Path) -> None:
    """Remove the containers and volumes of ``repo``'s runs (label ``dev.iterare.repo``)
    on the engine ``inner`` (a ``docker.DockerClient``), porters that are ending by
    themselves included."""
    import docker.errors

    # The low-level list: the models layer inspects each container it lists, and a porter
    # that ends meanwhile (auto-removed) would make that fail.
    for container in inner.api.containers(all=True,
                                          filters={"label": f"dev.iterare.repo={repo}"}):
        with contextlib.suppress(docker.errors.APIError):  # or the engine removes it
            inner.api.remove_container(container["Id"], force=True)
    for volume in inner.volumes.list(filters={"label": f"dev.iterare.repo={repo}"}):
        for attempt in range(20):
            try:
                volume.remove(force=True)
                break
            except docker.errors.NotFound:
                break
            except docker.errors.APIError:  # still used by a porter that is ending
                if attempt == 19:
                    raise
                time.sleep(0.3)


def stop(name: str) -> None:
    """Remove the DinD container ``name`` and its volume."""
    subprocess.run(["docker", "rm", "-f", "-v", name], capture_output=True, check=False,
                   env=local_env())
    subprocess.run(["docker", "volume", "rm", "-f", name], capture_output=True, check=False,
                   env=local_env())


@pytest.fixture(scope="session")
def dind_engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DindEngine]:
    """The session's DinD engine (see the module docstring); its start-up time is
    printed at the end of the session's output (``-rA`` or ``-s``) as a property."""
    seed = tmp_path_factory.mktemp("dind-seed")
    make_seed(seed)
    build_image()
    try:
        engine = start(seed)
    except RuntimeError:
        engine = start(seed, driver="vfs")
    print(f"\nDinD engine {engine.container} ({engine.storage_driver}) up in "
          f"{engine.startup_seconds:.1f} s")
    try:
        yield engine
    finally:
        stop(engine.container)
