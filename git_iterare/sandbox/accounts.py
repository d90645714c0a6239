"""What is put into the agent's container before it starts: its account, home, secrets
and start script, as one archive (``put_archive`` at ``/``).

Nothing of it is written on the host, and nothing the agent may read is another uid's:
its home directory and secret files are its own (0700, 0600), its secret variables are
files it alone reads (0400) in root's folders it cannot add to (0555: what
``agent-start`` exports is what the user sent), the rest is root's and read-only to it.
"""

from __future__ import annotations

import io
import tarfile
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from git_iterare.sandbox.dockertypes import Container
from git_iterare.sandbox.spec import AGENT_HOME, AGENT_START, CA_PATH, SECRETS_PATH, SandboxSpec


class _Tar:
    """A tar archive built in memory, for ``put_archive`` (entries keep their owners)."""

    def __init__(self) -> None:
        self.buffer = io.BytesIO()
        # Closed by data(), when the archive is complete.
        self.tar = tarfile.open(fileobj=self.buffer, mode="w",  # noqa: SIM115
                                format=tarfile.PAX_FORMAT)
        self.dirs: set[str] = set()

    def dir(self, path: str, uid: int, gid: int, mode: int) -> None:
        if path in self.dirs:
            return
        self.dirs.add(path)
        info = tarfile.TarInfo(path.strip("/"))
        info.type, info.uid, info.gid, info.mode = tarfile.DIRTYPE, uid, gid, mode
        self.tar.addfile(info)

    def file(self, path: str, data: bytes, uid: int, gid: int, mode: int) -> None:
        info = tarfile.TarInfo(path.strip("/"))
        info.size, info.uid, info.gid, info.mode = len(data), uid, gid, mode
        self.tar.addfile(info, io.BytesIO(data))

    def data(self) -> bytes:
        self.tar.close()
        return self.buffer.getvalue()


def file_archive(files: Mapping[str, bytes]) -> bytes:
    """A tar archive for ``put_archive`` at ``/`` of ``files`` (absolute path ->
    content): root's, mode 0644, in root's folders (0755)."""
    tar = _Tar()
    for path, data in sorted(files.items()):
        _root_file(tar, path, data)
    return tar.data()


def _root_file(tar: _Tar, path: str, data: bytes) -> None:
    """Add ``path`` (absolute) to ``tar``, root's, 0644, in root's folders (0755)."""
    steps = path.strip("/").split("/")
    for depth in range(1, len(steps)):
        tar.dir("/".join(steps[:depth]), 0, 0, 0o755)
    tar.file(path, data, 0, 0, 0o644)


def container_file(name: str) -> bytes:
    """A file of ``container/`` as shipped in the package (``agent-start``, ``sidecar``,
    ``swarm-start``)."""
    return (resources.files("git_iterare") / "data" / "container" / name).read_bytes()


def read_created_file(container: Container, path: str, limit: int = 1 << 20) -> bytes:
    """The bytes of the regular file ``path`` (absolute) of a created (not necessarily
    started) container, through the engine's archive API; b"" when it is missing, not a
    regular file or over ``limit`` bytes."""
    import docker.errors

    try:
        stream, _ = container.get_archive(path)
    except docker.errors.NotFound:
        return b""
    raw = b"".join(stream)
    with tarfile.open(fileobj=io.BytesIO(raw)) as tar:
        member = tar.next()
        if member is None or not member.isfile() or member.size > limit:
            return b""
        handle = tar.extractfile(member)
        return handle.read() if handle else b""


def image_accounts(container: Container, image: str) -> tuple[bytes, bytes]:
    """``/etc/passwd`` and ``/etc/group`` of the image a created container runs, read
    once per image id and kept in the user's cache (an image's files never change;
    reading them costs two engine calls per run)."""
    from git_iterare.sandbox import cache

    image_id = str(container.attrs.get("Image") or image)
    kept = cache.read("accounts", image_id)
    if kept is not None and isinstance(kept.get("passwd"), str) \
            and isinstance(kept.get("group"), str):
        return kept["passwd"].encode(), kept["group"].encode()
    passwd = read_created_file(container, "/etc/passwd")
    group = read_created_file(container, "/etc/group")
    cache.write("accounts", image_id, {"passwd": passwd.decode("utf-8", "replace"),
                                       "group": group.decode("utf-8", "replace")})
    return passwd, group


def _accounts(passwd: bytes, group: bytes, uid: int, gid: int) -> tuple[bytes, bytes]:
    """``/etc/passwd`` and ``/etc/group`` of the image with the agent as ``agent``.

    Programs ask who they are (Node's ``os.userInfo()`` fails without an entry); earlier
    ``agent`` entries and entries with the agent's numbers are replaced.
    """
    def keep(text: bytes, number: int) -> list[str]:
        lines = []
        for line in text.decode("utf-8", "replace").splitlines():
            fields = line.split(":")
            if line and fields[0] != "agent" and (len(fields) < 3 or fields[2] != str(number)):
                lines.append(line)
        return lines

    users = [*keep(passwd, uid), f"agent:x:{uid}:{gid}:git-iterare agent:{AGENT_HOME}:/bin/sh"]
    groups = [*keep(group, gid), f"agent:x:{gid}:"]
    return ("\n".join(users) + "\n").encode(), ("\n".join(groups) + "\n").encode()


@dataclass(frozen=True)
class AgentFile:
    """A file of the agent's container put there before it starts.

    Attributes:
        path: absolute path in the container.
        data: its content.
        uid / gid: its owner.
        mode: its permission bits.
        secret: it holds a credential (a swarm delivers it as a secret).
    """

    path: str
    data: bytes
    uid: int
    gid: int
    mode: int
    secret: bool = False


def _account_files(passwd: bytes, group: bytes, uid: int, gid: int,
                   ca: bytes | None) -> list[AgentFile]:
    """What every container of a sandbox's agent gets: ``/etc/passwd`` and ``/etc/group``
    with the agent's entry, ``/run/iterare/agent-start`` (root, 0755) and the CA bundle
    ``ca`` (0644) when given."""
    users, groups = _accounts(passwd, group, uid, gid)
    files = [AgentFile("/etc/passwd", users, 0, 0, 0o644),
             AgentFile("/etc/group", groups, 0, 0, 0o644),
             AgentFile(AGENT_START, container_file("agent-start"), 0, 0, 0o755)]
    if ca is not None:
        files.append(AgentFile(CA_PATH, ca, 0, 0, 0o644))
    return files


def agent_file_list(spec: SandboxSpec, passwd: bytes, group: bytes) -> list[AgentFile]:
    """The files of :func:`agent_files`: the account (:func:`_account_files`), the secret
    files in the agent's home (the agent's, 0600), the secret variables as files
    ``/run/iterare/secrets/env/NAME`` (the agent's, 0400) and on an engine of volumes the
    run's files (``spec.volumes.files``: root's, 0644).

    Raises:
        OSError: the CA bundle cannot be read.
    """
    uid, gid = spec.agent_uid, spec.agent_gid
    ca = Path(spec.ca_bundle).read_bytes() if spec.ca_bundle is not None else None
    files = _account_files(passwd, group, uid, gid, ca)
    files += [AgentFile(f"{AGENT_HOME}/{rel}", content, uid, gid, 0o600, secret=True)
              for rel, content in sorted(spec.secret_files.items())]
    files += [AgentFile(f"{SECRETS_PATH}/env/{name}", value.encode(), uid, gid, 0o400,
                        secret=True)
              for name, value in sorted(spec.secret_env.items())]
    if spec.volumes is not None:  # what an engine of volumes cannot mount (the prompt)
        files += [AgentFile(path, data, 0, 0, 0o644)
                  for path, data in sorted(spec.volumes.files.items())]
    return files


def _archive(files: list[AgentFile], uid: int, gid: int) -> bytes:
    """``files`` as an archive for ``put_archive`` at ``/``, with their folders: the
    agent's home (0700) and what is below it the agent's, the secret variables' folders
    root's 0555 (the agent can read its variables but not add one, such as PATH or
    LD_PRELOAD, that agent-start would export into a later container of the sandbox), the
    others root's 0755."""
    tar = _Tar()
    tar.dir("home", 0, 0, 0o755)
    tar.dir(AGENT_HOME, uid, gid, 0o700)
    for item in files:
        steps = item.path.strip("/").split("/")
        for depth in range(1, len(steps)):
            folder = "/" + "/".join(steps[:depth])
            if folder.startswith(f"{AGENT_HOME}/"):
                tar.dir(folder, uid, gid, 0o700)
            elif folder == SECRETS_PATH or folder.startswith(f"{SECRETS_PATH}/"):
                tar.dir(folder, 0, 0, 0o555)
            else:
                tar.dir(folder, 0, 0, 0o755)
        tar.file(item.path, item.data, item.uid, item.gid, item.mode)
    return tar.data()


def agent_files(spec: SandboxSpec, passwd: bytes, group: bytes) -> bytes:
    """The archive put into the agent's container at ``/`` before it starts: the files
    of :func:`agent_file_list` and the agent's home directory (0700). Nothing is written
    on the host.

    Raises:
        OSError: the CA bundle cannot be read.
    """
    return _archive(agent_file_list(spec, passwd, group), spec.agent_uid, spec.agent_gid)


def fresh_files(fresh: Container, agent: Container, uid: int, gid: int) -> bytes:
    """The archive put at ``/`` into ``fresh``, a created container of a sandbox that
    starts from the sandbox's image rather than from what its agent left (a loop's
    check): the account of :func:`agent_files` for ``uid``:``gid`` (the image's
    ``/etc/passwd`` and ``/etc/group`` with the agent's entry, an empty home, the start
    script) and the CA bundle of the agent's container ``agent`` when it has one (root's
    file in root's folder: the agent could not change it); no secret.

    Raises:
        docker.errors.APIError: the engine refused to read a file.
    """
    passwd, group = image_accounts(fresh, str(fresh.attrs.get("Image") or ""))
    ca = read_created_file(agent, CA_PATH) or None
    return _archive(_account_files(passwd, group, uid, gid, ca), uid, gid)
