"""The network a project image's build steps run in: the internet, not the Docker host.

A project's ``.iterare/Dockerfile`` (approved by the user, written by the repository) is
built with the engine's classic builder. Its ``RUN`` steps would run on the engine's
default bridge, from where they reach the Docker host's own addresses and every private
range around it. They run instead in the network namespace of a build sidecar
(``container/sidecar``'s ``build`` mode, git-iterare's own image, NET_ADMIN alone): the
Engine API's ``networkmode=container:<id>`` for ``POST /build``
(https://docs.docker.com/engine/api/). Its firewall closes the host's gateway and own
addresses (:func:`git_iterare.sandbox.hostnet.with_dns` names them) and the loopback,
private, link-local, shared, multicast and reserved ranges, but lets through DNS to the
servers of its resolv.conf and everything else.

An engine may not honour that mode: Podman's builder, for one, runs build steps in the
engine host's own namespace whatever mode it is given. So before the project's build a
one-step probe build prints the namespace its step sees, and the project's steps are
built only when it is the sidecar's; else the build is refused in one line.
"""

from __future__ import annotations

import contextlib
import io
import secrets
import time
from collections.abc import Iterator

from git_iterare.errors import OperationFailed
from git_iterare.sandbox.docker_errors import docker_errors
from git_iterare.sandbox.engine_client import client
from git_iterare.sandbox.sidecar import LOG_CONFIG, READY_LINE, SAYS, SidecarLog
from git_iterare.sandbox.spec import LABEL_ROLE, SIDECAR

#: What the build sidecar needs as root: its firewall (iptables asks ipset through a raw
#: socket).
BUILD_CAPABILITIES = ("NET_ADMIN", "NET_RAW")
#: Longest life of a build sidecar, in seconds: one left behind (its git iterare killed
#: mid-build) ends by itself then, and the engine removes it.
BUILD_SECONDS = 3600
#: Seconds the build sidecar may take to set up its rules.
READY_TIMEOUT = 60.0
#: The build sidecar's line naming its network namespace (``net:[N]``).
NETNS_LINE = SAYS + b"netns "
#: The role label of a build sidecar (not a run's: no run label).
ROLE = "build-network"


@contextlib.contextmanager
def build_network(sidecar_image: str, name: str, *, network: str = "default"
                  ) -> Iterator[str]:
    """A build sidecar for the build of ``name``, checked; removed on leaving.

    Args:
        sidecar_image: git-iterare's own image (id or name) on the current engine.
        name: the image being built, for messages.
        network: the Docker network the sidecar, and so the build, is on (the engine's
            default bridge for project builds).

    Yields:
        The ``network_mode`` to give the build (``container:<id>``).

    Raises:
        OperationFailed: the sidecar failed or the engine refused; the engine does not
            run build steps in the sidecar's namespace.
    """
    from git_iterare.sandbox.engine import current
    from git_iterare.sandbox.hostnet import engine_host_addresses
    from git_iterare.sandbox.policy import EgressPolicy

    # The host's addresses as a run's policy names them; the sidecar's own resolv.conf
    # gives the DNS servers, which the build's steps share.
    policy = EgressPolicy(hosts=engine_host_addresses()).to_lines()
    config = {
        "Image": sidecar_image, "Entrypoint": [SIDECAR], "Cmd": ["build"], "User": "0:0",
        "Labels": {LABEL_ROLE: ROLE},
        "Env": [f"ITERARE_POLICY={policy}", f"ITERARE_BUILD_SECONDS={BUILD_SECONDS}"],
        "HostConfig": {"NetworkMode": network, "CapDrop": ["ALL"],
                       "CapAdd": list(BUILD_CAPABILITIES),
                       "SecurityOpt": ["no-new-privileges:true"],
                       "LogConfig": dict(LOG_CONFIG), "AutoRemove": True},
    }
    engine = client()
    with docker_errors(f"start the build network of {name}"):
        made = engine.api.create_container_from_config(
            config, f"iterare-build-{secrets.token_hex(4)}")
    container = engine.containers.prepare_model({"Id": made["Id"]})
    try:
        with docker_errors(f"start the build network of {name}"):
            engine.api.start(made["Id"])
        log = SidecarLog(container)
        log.wait_for(READY_LINE, time.monotonic() + READY_TIMEOUT)
        netns = next((line[len(NETNS_LINE):] for line in log.seen
                      if line.startswith(NETNS_LINE)), b"")
        mode = f"container:{made['Id']}"
        seen = _probe(sidecar_image, mode, name)
        if not netns or seen != netns.decode(errors="replace").strip():
            raise OperationFailed(
                f"cannot build {name}: the engine {current().label} runs build steps "
                f"outside the network namespace given to them ({seen or 'none seen'}), "
                "where they would reach the Docker host (Podman's builder does this)",
                hint="build the image yourself and set [docker] image to it, or move the "
                     "RUN steps out of .iterare/Dockerfile")
        yield mode
    finally:
        with contextlib.suppress(Exception):
            engine.api.remove_container(made["Id"], force=True)


def _probe(image: str, mode: str, name: str) -> str:
    """The network namespace (``net:[N]``) a build step sees with ``network_mode`` ``mode``;
    "" when it printed none. The probe's image is removed."""
    marker = f"iterare-probe-{secrets.token_hex(4)}"
    dockerfile = (f"FROM {image}\nRUN echo {marker} $(readlink /proc/self/ns/net)\n").encode()
    seen = ""
    built = ""
    with docker_errors(f"check the build network of {name}"):
        for chunk in client().api.build(fileobj=io.BytesIO(dockerfile), network_mode=mode,
                                        nocache=True, rm=True, forcerm=True, decode=True):
            text = str(chunk.get("stream", ""))
            for line in text.splitlines():
                if line.startswith(marker + " "):
                    seen = line[len(marker) + 1:].strip()
            if "aux" in chunk and isinstance(chunk["aux"], dict):
                built = str(chunk["aux"].get("ID", ""))
            if "error" in chunk:
                raise OperationFailed(f"cannot build {name}: a build step in its network "
                                      f"failed: {str(chunk['error']).strip()}")
    if built:
        with contextlib.suppress(Exception):
            client().api.remove_image(built, force=True, noprune=False)
    return seen
