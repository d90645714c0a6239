"""Facts of a real swarm (tests/swarm.py) the swarm backend relies on, each asserted: the lab
itself, replicated jobs by digest with exit codes and logs, internal overlays, CPU
reservations that queue, a node's death, and secrets' ownership. Engine API 1.41 through the
docker SDK, as the backend will speak it."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.swarm import API_VERSION, SwarmLab

pytestmark = [pytest.mark.docker, pytest.mark.slow]


@pytest.fixture(scope="module")
def image(swarm: SwarmLab, sandbox_base: str) -> str:
    """The Debian base pushed into the lab's registry; its digest reference."""
    return swarm.push(sandbox_base)


@pytest.fixture(scope="module")
def sandbox_base() -> str:
    """The local Debian base image (built by .ci/setup)."""
    from tests import engines

    return engines.BASE_IMAGE


@pytest.fixture
def client(swarm: SwarmLab) -> Iterator[Any]:
    """The manager's SDK client; the swarm is clean again after the test."""
    made = swarm.manager.client()
    yield made
    for service in made.services.list():
        service.remove()
    for secret in made.secrets.list():
        _until(lambda s=secret: _removed(s), 30)
    for network in made.networks.list(filters={"driver": "overlay"}):
        if network.name != "ingress":
            _until(lambda n=network: _removed(n), 30)


def _removed(thing: Any) -> bool:
    """Remove ``thing`` (a secret or network); False while the swarm still holds it."""
    import docker.errors

    try:
        thing.remove()
    except docker.errors.NotFound:
        return True
    except docker.errors.APIError:
        return False
    return True


def _until(check: Callable[[], Any], timeout: float, step: float = 0.3) -> Any:
    """Poll ``check`` until it returns something truthy; return it (fail after
    ``timeout`` seconds)."""
    deadline = time.monotonic() + timeout
    while True:
        found = check()
        if found:
            return found
        assert time.monotonic() < deadline, f"not within {timeout} s"
        time.sleep(step)


def _name(what: str) -> str:
    return f"swarmlab-{what}-{uuid.uuid4().hex[:6]}"


def test_lab_is_a_drained_manager_and_ready_workers(swarm: SwarmLab, image: str) -> None:
    client = swarm.manager.client()
    assert client.version()["ApiVersion"] == API_VERSION
    nodes = {n.id: n.attrs for n in client.nodes.list()}
    assert len(nodes) == 1 + len(swarm.workers) >= 3
    manager = nodes[swarm.node_id(swarm.manager)]
    assert manager["Spec"]["Role"] == "manager"
    assert manager["Spec"]["Availability"] == "drain"
    for worker in swarm.workers:
        attrs = nodes[swarm.node_id(worker)]
        assert (attrs["Spec"]["Role"], attrs["Status"]["State"]) == ("worker", "ready")
    assert image.startswith(f"{swarm.registry}/iterare-base@sha256:")
    for node in swarm.nodes:  # every node pulls from the registry over plain HTTP
        assert node.client().info()["RegistryConfig"]["IndexConfigs"][swarm.registry][
            "Secure"] is False
    print(f"\nswarm lab up in {swarm.startup_seconds:.1f} s")
