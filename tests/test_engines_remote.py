"""git iterare against a second, real engine (Docker-in-Docker, tests/engines.py) over ssh and
tcp+TLS: engine selection, TLS behind REQUESTS_CA_BUNDLE, and one-line authentication errors."""

from __future__ import annotations

import io
import json
import tarfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import iterare
from tests.engines import DindEngine

pytestmark = pytest.mark.docker

HOST_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"


@pytest.fixture(scope="module")
def tiny_image(dind_engine: DindEngine) -> Iterator[tuple[str, str]]:
    """A one-file image built on the local engine and loaded into the DinD engine:
    (name, id)."""
    import docker

    local = docker.from_env()
    name = f"iterare-test-tiny:{uuid.uuid4().hex[:8]}"
    context = io.BytesIO()
    with tarfile.open(fileobj=context, mode="w") as tar:
        dockerfile = b"FROM scratch\nCOPY marker /marker\nLABEL dev.iterare.test=tiny\n"
        for member, data in (("Dockerfile", dockerfile), ("marker", b"remote\n")):
            info = tarfile.TarInfo(member)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    context.seek(0)
    local.images.build(fileobj=context, custom_context=True, tag=name, rm=True)
    try:
        inner_id = dind_engine.load_image(name)
        local.images.remove(name, force=True)  # only the remote engine has it now
        yield name, inner_id
    finally:
        if any(name in img.tags for img in local.images.list(name.split(":")[0])):
            local.images.remove(name, force=True)


def status(repo: Path, image: str, env: dict[str, str], *args: str):
    return iterare(*args, "image", "status", "--format", "json", cwd=repo,
                   env={"ITERARE_DOCKER_IMAGE": image, "DOCKER_CONTEXT": "", "DOCKER_HOST": "",
                        **env})


def test_startup_time_is_reasonable(dind_engine: DindEngine) -> None:
    assert dind_engine.startup_seconds < 60
    assert dind_engine.storage_driver in ("overlay2", "vfs")


def test_image_status_over_ssh(repo: Path, hermetic_env: Path, dind_engine: DindEngine,
                               tiny_image: tuple[str, str]) -> None:
    dind_engine.ssh_home(hermetic_env)
    name, inner_id = tiny_image
    result = status(repo, name, {"DOCKER_HOST": dind_engine.ssh_url})
    assert result.returncode == 0, result.stderr
    shown = json.loads(result.stdout)
    # Present there, and only there: the local engine has no such image.
    assert (shown["present"], shown["id"]) == (True, inner_id)
    assert shown["engine"] == {"name": "default", "url": dind_engine.ssh_url}
    assert shown["labels"] == {"dev.iterare.test": "tiny"}
    text = iterare("image", "status", cwd=repo, env={
        "ITERARE_DOCKER_IMAGE": name, "DOCKER_HOST": dind_engine.ssh_url})
    assert text.stdout.splitlines()[0] == f"engine: {dind_engine.ssh_url}"
    local = iterare("image", "status", cwd=repo, env={"ITERARE_DOCKER_IMAGE": name,
                                                      "DOCKER_HOST": ""})
    assert local.returncode == 1
    assert local.stdout.splitlines()[:3] == ["engine: unix:///var/run/docker.sock",
                                             f"image: {name}", "present: no"]


def test_tls_context_works_with_requests_ca_bundle_set(
        repo: Path, hermetic_env: Path, dind_engine: DindEngine,
        tiny_image: tuple[str, str]) -> None:
    name, inner_id = tiny_image
    dind_engine.make_context(hermetic_env, "dind-tls")
    proxy_env = {"REQUESTS_CA_BUNDLE": HOST_BUNDLE, "CURL_CA_BUNDLE": HOST_BUNDLE}
    # Through DOCKER_CONTEXT, [docker] context (the flag) and currentContext.
    (hermetic_env / ".docker" / "config.json").write_text('{"currentContext": "dind-tls"}')
    for env, args in (({"DOCKER_CONTEXT": "dind-tls"}, ()), ({}, ("--context", "dind-tls")),
                      ({}, ())):
        result = status(repo, name, {**proxy_env, **env}, *args)
        assert result.returncode == 0, (args, result.stderr)
        shown = json.loads(result.stdout)
        assert (shown["id"], shown["engine"]) == (
            inner_id, {"name": "dind-tls", "url": dind_engine.tcp_url})
    # And DOCKER_HOST with DOCKER_TLS_VERIFY / DOCKER_CERT_PATH.
    result = status(repo, name, {**proxy_env, **dind_engine.tls_env()})
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["id"] == inner_id
    # DOCKER_HOST alone: plain HTTP to a TLS endpoint is named as such.
    plain = status(repo, name, {"DOCKER_HOST": dind_engine.tcp_url, "DOCKER_TLS_VERIFY": "",
                                "DOCKER_CERT_PATH": ""})
    assert (plain.returncode, plain.stderr) == (
        1, f"error: cannot talk to the Docker engine at {dind_engine.tcp_url}: it expects TLS "
           "(set DOCKER_TLS_VERIFY=1 and DOCKER_CERT_PATH (or use a docker context))\n")


def test_the_sdk_alone_fails_with_requests_ca_bundle(
        dind_engine: DindEngine, monkeypatch: pytest.MonkeyPatch) -> None:
    """The control: docker-py's own client does verify against REQUESTS_CA_BUNDLE
    (docker-py #2433), so the test above proves the fix."""
    import docker
    import requests

    monkeypatch.setenv("REQUESTS_CA_BUNDLE", HOST_BUNDLE)
    certs = dind_engine.cert_path
    tls = docker.tls.TLSConfig(client_cert=(str(certs / "cert.pem"), str(certs / "key.pem")),
                               ca_cert=str(certs / "ca.pem"), verify=True)
    with pytest.raises((docker.errors.DockerException, requests.exceptions.SSLError),
                       match="CERTIFICATE_VERIFY_FAILED"):
        docker.DockerClient(base_url=dind_engine.tcp_url, tls=tls, version="auto").ping()


def test_wrong_ca_is_one_line_naming_the_endpoint(
        repo: Path, hermetic_env: Path, dind_engine: DindEngine) -> None:
    dind_engine.make_context(hermetic_env, "wrong-ca", ca=dind_engine.seed / "other-ca.pem")
    result = status(repo, "any:latest", {"DOCKER_CONTEXT": "wrong-ca"})
    assert result.returncode == 1
    assert result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.startswith(
        f"error: cannot connect to the Docker engine at {dind_engine.tcp_url} (context "
        "wrong-ca): the engine's TLS certificate is not trusted"), result.stderr
    assert "Traceback" not in result.stderr


def test_missing_client_certificate_is_one_line(
        repo: Path, hermetic_env: Path, dind_engine: DindEngine) -> None:
    dind_engine.make_context(hermetic_env, "no-cert", client_cert=False)
    result = status(repo, "any:latest", {"DOCKER_CONTEXT": "no-cert"})
    assert result.returncode == 1
    assert result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.startswith(
        f"error: cannot connect to the Docker engine at {dind_engine.tcp_url} (context "
        "no-cert): TLS handshake failed"), result.stderr


def test_bad_ssh_key_is_one_line_naming_the_endpoint(
        repo: Path, hermetic_env: Path, tmp_path: Path,
        dind_engine: DindEngine) -> None:
    import subprocess

    stranger = tmp_path / "stranger"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(stranger)],
                   check=True)
    dind_engine.ssh_home(hermetic_env, key=stranger)
    result = status(repo, "any:latest", {"DOCKER_HOST": dind_engine.ssh_url})
    assert (result.returncode, result.stderr.count("\n")) == (1, 1), result.stderr
    assert result.stderr.startswith(
        f"error: cannot log in to the Docker engine at {dind_engine.ssh_url}: ssh "
        "authentication failed"), result.stderr
    assert result.stderr.endswith(f"`ssh -p {dind_engine.ssh_port} root@127.0.0.1 docker info` "
                                  "must work)\n"), result.stderr
    # The TLS port is no ssh server; nothing listens on port 9.
    tls_port = f"ssh://root@127.0.0.1:{dind_engine.tcp_port}"
    wrong = status(repo, "any:latest", {"DOCKER_HOST": tls_port})
    assert wrong.stderr.startswith(f"error: cannot connect to the Docker engine at {tls_port} "
                                   "over ssh: no ssh server answered there"), wrong.stderr
    closed = status(repo, "any:latest", {"DOCKER_HOST": "ssh://root@127.0.0.1:9"})
    assert closed.stderr == ("error: cannot reach the Docker engine at ssh://root@127.0.0.1:9: "
                             "no ssh server answered (`ssh -p 9 root@127.0.0.1 docker info` "
                             "must work)\n"), closed.stderr
    # An unknown host key is refused as well, in one line.
    dind_engine.ssh_home(hermetic_env)
    (hermetic_env / ".ssh" / "known_hosts").write_text("")
    unknown = status(repo, "any:latest", {"DOCKER_HOST": dind_engine.ssh_url})
    assert (unknown.returncode, unknown.stderr.count("\n")) == (1, 1), unknown.stderr
    assert unknown.stderr.startswith(
        f"error: cannot connect to the Docker engine at {dind_engine.ssh_url} over ssh: "
        ), unknown.stderr
    assert "known_hosts" in unknown.stderr
