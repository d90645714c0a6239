"""Named volumes of an engine, and the containers that carry files into and out of them.

Where an engine sees none of the client's files (``ssh://``, ``tcp://``), a run's trees
live in its volumes (see :mod:`git_iterare.runner.placement.remote`):

* ``iterare-<id>-work``: the worktree, at ``/workspace`` in the agent's container;
* ``iterare-<id>-git``: the run's gitdir, at ``/git/run``;
* ``iterare-cache-<key>``: the repository's object cache (read-only for the agent),
  shared by the runs of one repository on that engine: ``objects/`` (packs; the run
  gitdir's alternates point there) and ``have/<commit>`` (an empty file per commit whose
  objects the cache holds);
* ``iterare-spare-<key>-<8 hex>-work`` and ``-git``: a *spare* worktree and gitdir of
  the repository, checked out ahead of its next run, which takes them over as its own
  (:func:`spare_volumes`).

Files go in and out through the Engine API (``put_archive``/``get_archive``) of a
*porter*: a container from git-iterare's own image that mounts the volumes and is never
started, or runs one command (:class:`Porter`). Nothing here knows about git.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator, Mapping, Sequence
from typing import IO

from git_iterare.sandbox.dockertypes import Container
from git_iterare.sandbox.meter import Metered

#: Label on every volume git-iterare makes: ``work``, ``git`` or ``cache``.
LABEL_VOLUME = "dev.iterare.volume"
#: Label of a cache volume: the repository's cache key.
LABEL_CACHE = "dev.iterare.cache"
#: Label of a spare worktree's volumes: the repository's cache key. (Not
#: :data:`LABEL_CACHE`: once a run takes them over they hold its work, which removing the
#: cache must never remove.)
LABEL_SPARE = "dev.iterare.spare"


def run_volumes(run_id: str) -> tuple[str, str]:
    """Names of a run's worktree and gitdir volumes: ``(iterare-<id>-work,
    iterare-<id>-git)``."""
    return f"iterare-{run_id}-work", f"iterare-{run_id}-git"


def spare_volumes(key: str, token: str) -> tuple[str, str]:
    """Names of a spare worktree's volumes for the repository of cache key ``key``:
    ``(iterare-spare-<key>-<token>-work, ...-git)``; ``token`` is 8 random hex digits."""
    return f"iterare-spare-{key}-{token}-work", f"iterare-spare-{key}-{token}-git"


#: What :func:`spare_volumes` gives, for checking names read back from a file.
SPARE_VOLUME = re.compile(r"iterare-spare-[0-9a-f]{16}-[0-9a-f]{8}-(work|git)")


def cache_volume(key: str) -> str:
    """Name of the object cache volume of the repository whose cache key is ``key``."""
    return f"iterare-cache-{key}"


def ensure_volume(name: str, labels: Mapping[str, str]) -> None:
    """Make volume ``name`` with ``labels`` unless it exists.

    Raises:
        OperationFailed: the engine refused or cannot be reached.
    """
    from git_iterare.sandbox.docker_errors import docker_errors
    from git_iterare.sandbox.engine_client import client

    with docker_errors(f"make the volume {name}"):
        client().volumes.create(name, labels=dict(labels))


def volume_exists(name: str) -> bool:
    """Whether volume ``name`` exists on the current engine.

    Raises:
        OperationFailed: the engine cannot be reached.
    """
    import docker.errors

    from git_iterare.sandbox.docker_errors import docker_errors
    from git_iterare.sandbox.engine_client import client

    with docker_errors(f"look for the volume {name}"):
        try:
            client().volumes.get(name)
        except docker.errors.NotFound:
            return False
    return True


def remove_volumes_and_users(names: Sequence[str]) -> list[str]:
    """Remove the containers that mount any of the volumes ``names`` (running or not),
    then the volumes (:func:`remove_volumes`). Returns the volumes removed.

    Raises:
        OperationFailed: the engine refused or cannot be reached.
    """
    import docker.errors

    from git_iterare.sandbox.docker_errors import docker_errors

    for name in names:
        for container in containers_using(name):
            with docker_errors(f"remove {container.name}"), \
                    contextlib.suppress(docker.errors.NotFound):
                container.remove(force=True, v=True)
    return remove_volumes(names)


def remove_volumes(names: Sequence[str]) -> list[str]:
    """Remove the volumes ``names``; missing ones are skipped. Returns those removed.

    Raises:
        OperationFailed: the engine refused (a volume still in use) or cannot be reached.
    """
    import time

    import docker.errors

    from git_iterare.sandbox.docker_errors import docker_errors
    from git_iterare.sandbox.engine_client import client

    removed = []
    for name in names:
        with docker_errors(f"remove the volume {name}"):
            for attempt in range(10):
                try:
                    client().volumes.get(name).remove(force=True)
                except docker.errors.NotFound:
                    break
                except docker.errors.APIError as exc:
                    # The engine may still hold it for a container removed just now.
                    if exc.status_code != 409 or "in use" not in str(exc) or attempt == 9:
                        raise
                    time.sleep(0.3)
                    continue
                removed.append(name)
                break
    return removed


class Porter:
    """A container from git-iterare's own image that mounts volumes: files go into the
    volumes (``put_archive``) and come out (``get_archive``) through it. Use as a context
    manager; it is removed at the end, unless :meth:`start` ran its ``command`` (then the
    engine removes it when that ends, unless ``keep``: then at the end too, so what it
    wrote into its own file system can be read once it ended).

    It has no capabilities, no network and no new privileges, whoever it runs as.

    Args:
        image: git-iterare's own image (on the engine; the sidecar's).
        volumes: volume name -> (path in the porter, read-only).
        labels: labels for the container.
        command: argv for :meth:`start`; None for a porter that is never started.
        user: ``uid:gid`` it runs as.
        keep: whether the ``with`` block's end removes it, its ``command`` run or not.

    Raises:
        UserError / OperationFailed: the image is missing, the engine refused.
    """

    def __init__(self, image: str, volumes: Mapping[str, tuple[str, bool]],
                 labels: Mapping[str, str] | None = None, *,
                 command: Sequence[str] | None = None, user: str = "0:0",
                 keep: bool = False) -> None:
        self.image = image
        self.keep = keep
        self.volumes = dict(volumes)
        self.labels = dict(labels or {})
        self.command = list(command) if command is not None else None
        self.user = user
        self.container: Container | None = None
        self.started = False

    def __enter__(self) -> Porter:
        from docker.types import Mount

        from git_iterare.sandbox.docker_errors import docker_errors
        from git_iterare.sandbox.engine_client import client

        # no_copy: an empty volume is not filled from the image's folder at that path.
        mounts = [Mount(path, name, type="volume", read_only=ro, no_copy=True)
                  for name, (path, ro) in self.volumes.items()]
        with docker_errors("make a container to copy files to the Docker engine"):
            self.container = client().containers.create(
                self.image, command=None if self.command else ["true"],
                entrypoint=self.command or ["true"], user=self.user,
                mounts=mounts, network_mode="none", cap_drop=["ALL"],
                security_opt=["no-new-privileges:true"],
                environment={"GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": "/dev/null",
                             "HOME": "/tmp"},
                auto_remove=self.command is not None and not self.keep,
                labels={**self.labels, LABEL_VOLUME: "porter"}, detach=True)
        return self

    def __exit__(self, *exc: object) -> None:
        import docker.errors

        from git_iterare.sandbox.docker_errors import docker_errors

        if self.container is not None and (self.keep or not self.started):
            with contextlib.suppress(docker.errors.NotFound), \
                    docker_errors("remove the copying container"):
                self.container.remove(force=True)

    def start(self) -> None:
        """Start its ``command`` and leave it: the engine removes it when it ends (unless
        ``keep``).

        Raises:
            OperationFailed: the engine refused.
        """
        from git_iterare.sandbox.docker_errors import docker_errors

        with docker_errors("start a container of git-iterare's on the Docker engine"):
            self.made.start()
        self.started = True

    def wait(self, timeout: float) -> int | None:
        """Wait for its ``command`` (started, ``keep``) to end; its exit status, None when
        ``timeout`` seconds pass first.

        Raises:
            OperationFailed: the engine refused or cannot be reached.
        """
        import requests.exceptions

        from git_iterare.sandbox.docker_errors import docker_errors

        with docker_errors("wait for a container of git-iterare's on the Docker engine"):
            try:
                code = self.made.wait(timeout=timeout).get("StatusCode")
            except (requests.exceptions.ReadTimeout, requests.exceptions.ConnectionError):
                return None
        return code if isinstance(code, int) else None

    @property
    def made(self) -> Container:
        """Its container (inside the ``with`` block)."""
        assert self.container is not None, "a Porter is used inside its with block"
        return self.container

    def put(self, path: str, archive: bytes | IO[bytes] | Metered) -> None:
        """Unpack the tar ``archive`` (bytes or a file open for reading) at ``path``
        (which must exist).

        Raises:
            OperationFailed: the engine refused.
        """
        put_archive(self.made, path, archive)

    def get(self, path: str) -> Iterator[bytes]:
        """The tar of ``path`` (a folder comes with its own name as first component), as
        chunks; nothing when it does not exist."""
        return get_archive(self.made, path)


def put_archive(container: Container, path: str, archive: bytes | IO[bytes] | Metered
                ) -> None:
    """``put_archive`` of ``container`` (a tar as bytes or a file open for reading) with
    the engine's errors as ours.

    Raises:
        OperationFailed: the engine refused or cannot be reached.
    """
    from git_iterare.errors import OperationFailed
    from git_iterare.sandbox.docker_errors import docker_errors

    with docker_errors(f"copy files into {container.name}"):
        if not container.put_archive(path, archive):
            raise OperationFailed(f"the Docker engine did not take the files for {path}")


def get_archive(container: Container, path: str) -> Iterator[bytes]:
    """The tar of ``path`` in ``container`` (created, running or exited), streamed in
    chunks; nothing when the path does not exist. Errors while streaming (a connection
    that drops) are ours too.

    Raises:
        OperationFailed: the engine refused or cannot be reached.
    """
    import docker.errors

    from git_iterare.sandbox.docker_errors import docker_errors

    with docker_errors(f"copy {path} out of {container.name}"):
        try:
            stream, _ = container.get_archive(path, chunk_size=1 << 20)
        except docker.errors.NotFound:
            return
        yield from stream


def find_container(name: str) -> Container | None:
    """The container ``name`` (or id) on the current engine, or None.

    Raises:
        OperationFailed: the engine cannot be reached.
    """
    import docker.errors

    from git_iterare.sandbox.docker_errors import docker_errors
    from git_iterare.sandbox.engine_client import client

    with docker_errors(f"find {name}"):
        try:
            return client().containers.get(name)
        except docker.errors.NotFound:
            return None


def containers_using(volume: str) -> list[Container]:
    """The containers (running or not) that mount ``volume`` on the current engine.

    Raises:
        OperationFailed: the engine cannot be reached.
    """
    from git_iterare.sandbox.docker_errors import docker_errors
    from git_iterare.sandbox.engine_client import client

    with docker_errors(f"list the containers using {volume}"):
        return list(client().containers.list(all=True, filters={"volume": volume},
                                             ignore_removed=True))


def exec_in(container: Container, argv: Sequence[str]) -> tuple[int, bytes]:
    """Run ``argv`` as root in a running ``container``; its status and output.

    Raises:
        OperationFailed: the engine refused.
    """
    from git_iterare.sandbox.docker_errors import docker_errors

    with docker_errors(f"run {argv[0]} in {container.name}"):
        code, output = container.exec_run(list(argv), user="0:0")
    return int(code or 0), bytes(output or b"")


def cache_volumes(key: str | None = None) -> list[str]:
    """Names of the object cache volumes on the current engine, or of the one of cache
    key ``key``.

    Raises:
        OperationFailed: the engine cannot be reached.
    """
    from git_iterare.sandbox.docker_errors import docker_errors
    from git_iterare.sandbox.engine_client import client

    label = f"{LABEL_CACHE}={key}" if key else LABEL_CACHE
    with docker_errors("list the object caches"):
        found = {v.name for v in client().volumes.list(filters={"label": label})}
    # The engine makes a volume a container names again, without labels, when it was
    # removed meanwhile (cleanup --cache during a launch): found by its name too.
    if key and volume_exists(cache_volume(key)):
        found.add(cache_volume(key))
    return sorted(found)


def spare_volumes_made(key: str) -> dict[str, str]:
    """The spare worktree volumes (:func:`spare_volumes`) of the repository of cache key
    ``key`` on the current engine, whether a run took them over or not: name -> when the
    engine made it (its ``CreatedAt``, ISO 8601; empty when it gives none).

    Raises:
        OperationFailed: the engine cannot be reached.
    """
    from git_iterare.sandbox.docker_errors import docker_errors
    from git_iterare.sandbox.engine_client import client

    with docker_errors("list the spare worktrees"):
        found = client().volumes.list(filters={"label": f"{LABEL_SPARE}={key}"})
    return {v.name: str((v.attrs or {}).get("CreatedAt") or "") for v in found
            if SPARE_VOLUME.fullmatch(v.name)}
