"""Values describing a sandbox: what to run, with which limits, and what came back."""

from __future__ import annotations

import grp
import os
import pwd
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from git_iterare.errors import UserError
from git_iterare.sandbox.policy import EgressPolicy

#: Labels on every container git-iterare starts.
LABEL_RUN = "dev.iterare.run"
LABEL_REPO = "dev.iterare.repo"
#: Which of a sandbox's containers this is: ``agent``, ``sidecar`` (a spare one too) or
#: ``reclaim``.
LABEL_ROLE = "dev.iterare.role"
#: On the agent's container: the id of its sidecar.
LABEL_SIDECAR = "dev.iterare.sidecar"
#: On a loop's later containers: the id of the image the sandbox's first agent container
#: ran (empty on that one, so that no image label can name another).
LABEL_ORIGIN = "dev.iterare.origin"

def sandbox_name(run_id: str) -> str:
    """The name of a run's agent container, ``iterare-<run id>``; its sidecar's is that
    with ``-net``."""
    return f"iterare-{run_id}"


#: Paths inside the sidecar (see ``container/sidecar``).
OUT_PATH = "/run/iterare/out"
TREES_PATH = "/trees"
SIDECAR = "/usr/local/sbin/iterare-sidecar"
#: Where the sidecar sees the last file put into trees in engine volumes (below
#: :data:`TREES_PATH`): once it is there, the trees are complete (its ``ITERARE_TREES_READY``).
SHIPPED = "iterare-shipped"
SIDECAR_TREES_READY = f"0/run/{SHIPPED}"
#: Where the agent's container sees trees in engine volumes: the worktree, the run's
#: gitdir and the repository's object cache (read-only).
WORK_PATH = "/workspace"
GITDIR_PATH = "/git/run"
CACHE_PATH = "/git/cache"
#: Paths inside the agent's container, put there by git-iterare before it starts.
SECRETS_PATH = "/run/iterare/secrets"
CA_PATH = "/run/iterare/ca.pem"
AGENT_START = "/run/iterare/agent-start"
AGENT_HOME = "/home/agent"

#: The agent's uid and gid are the first number from here that no host account or group
#: has (see :func:`agent_ids`): far above the ranges distributions give to people
#: (1000-60000) and to system services, so git's ownership check (``safe.directory``)
#: keeps whoever runs git on the host out of a live run's trees.
AGENT_ID_BASE = 1_900_000

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_MEMORY = re.compile(r"^([0-9]+)([bkmg]?)$", re.IGNORECASE)
_UNITS = {"": 1, "b": 1, "k": 1024, "m": 1024**2, "g": 1024**3}

#: Docker's smallest memory limit (bytes).
MIN_MEMORY = 6 * 1024**2
#: Docker's smallest CPU limit (cores; it counts in billionths but refuses less than this).
MIN_CPUS = 0.01
#: Smallest process limit we accept: fewer cannot run the entrypoint, git and an agent.
MIN_PIDS = 16
#: Largest process limit the kernel's pids controller takes (PID_MAX_LIMIT on 64-bit).
MAX_PIDS = 4 * 1024**2


def memory_bytes(size: str) -> int:
    """Bytes meant by a Docker memory size: a number with ``b``, ``k``, ``m`` or ``g``.

    Args:
        size: such as ``512m`` or ``4g`` (units are powers of 1024, any case; none = bytes).

    Raises:
        UserError: not such a size.
    """
    match = _MEMORY.fullmatch(size.strip())
    if not match:
        raise UserError(f"docker.memory: bad size {size!r}",
                        hint="use a number with b, k, m or g, such as 4g")
    return int(match.group(1)) * _UNITS[match.group(2).lower()]


def agent_ids(base: int = AGENT_ID_BASE) -> tuple[int, int]:
    """The uid and gid the agent runs as: the same number, which no host account (uid),
    group (gid) or the invoking user has.

    Args:
        base: the first candidate.

    Returns:
        ``(uid, gid)``, both equal.
    """
    own = {os.getuid(), os.geteuid(), os.getgid(), os.getegid()}
    candidate = base
    while True:
        if candidate not in own and not _has_account(candidate):
            return candidate, candidate
        candidate += 1


def _has_account(number: int) -> bool:
    try:
        pwd.getpwuid(number)
        return True
    except KeyError:
        pass
    try:
        grp.getgrgid(number)
        return True
    except KeyError:
        return False


@dataclass(frozen=True)
class Limits:
    """Resource limits of one sandbox, checked when made (there is no "unlimited").

    Attributes:
        cpus: CPU cores (fractions allowed), at least :data:`MIN_CPUS`; the engine's own
            CPU count is the upper bound (see :meth:`check_engine_cpus`).
        memory: Docker memory syntax (``512m``, ``4g``), at least :data:`MIN_MEMORY` bytes.
        pids: maximum number of processes, :data:`MIN_PIDS` to :data:`MAX_PIDS`.

    Raises:
        UserError: a value out of range, naming the ``docker.*`` key and how to fix it.
    """

    cpus: float = 2.0
    memory: str = "4g"
    pids: int = 1024

    def __post_init__(self) -> None:
        if not self.cpus >= MIN_CPUS:
            raise UserError(f"docker.cpus must be at least {MIN_CPUS}, got {self.cpus:g}",
                            hint="0 does not mean unlimited; for no practical limit "
                                 "use the engine's CPU count")
        if not MIN_PIDS <= self.pids <= MAX_PIDS:
            raise UserError(f"docker.pids must be from {MIN_PIDS} to {MAX_PIDS}, "
                            f"got {self.pids}",
                            hint="0 does not mean unlimited; for no practical limit "
                                 f"use {MAX_PIDS}")
        if memory_bytes(self.memory) < MIN_MEMORY:
            raise UserError(f"docker.memory must be at least 6m (Docker's minimum), "
                            f"got {self.memory!r}",
                            hint="0 does not mean unlimited; for no practical limit "
                                 "use a large value such as 1024g")

    def check_engine_cpus(self, engine_cpus: int) -> None:
        """Refuse more CPUs than the engine has (Docker would refuse to start the sandbox).

        Args:
            engine_cpus: the engine's CPU count (``NCPU`` of ``docker info``).

        Raises:
            UserError: ``cpus`` is larger than ``engine_cpus``.
        """
        if self.cpus > engine_cpus:
            raise UserError(f"docker.cpus is {self.cpus:g} but the Docker engine has only "
                            f"{engine_cpus} CPU" + ("" if engine_cpus == 1 else "s"),
                            hint=f"set docker.cpus to at most {engine_cpus}")


@dataclass(frozen=True)
class Mount:
    """A bind mount.

    Attributes:
        host_path: absolute path on the Docker host.
        container_path: absolute path in the container.
        read_only: mount read-only.
    """

    host_path: Path
    container_path: str
    read_only: bool = True


@dataclass(frozen=True)
class VolumeTrees:
    """A sandbox's trees in named volumes of its engine, for an engine that sees none of
    the client's files.

    Attributes:
        work: the worktree's volume (:data:`WORK_PATH`).
        git: the run gitdir's volume (:data:`GITDIR_PATH`); the last file put into it is
            :data:`SHIPPED`, after which the sidecar gives both to the agent.
        cache: the repository's object cache volume (:data:`CACHE_PATH`, read-only).
        files: absolute path in the agent's container -> content, put there (root, 0644)
            before it starts (the prompt).
    """

    work: str
    git: str
    cache: str
    files: Mapping[str, bytes] = field(default_factory=dict, repr=False)


@dataclass(frozen=True)
class SandboxSpec:
    """Everything needed to start one sandbox.

    A sandbox is two containers: a network sidecar from ``sidecar_image`` (git-iterare's
    own image) that holds the network namespace, resolver and firewall, and the agent's
    container from ``image`` that joins that namespace with no capabilities, as
    ``agent_uid``. Secrets (``secret_env``, ``secret_files``) are put into the agent's
    container through the engine API before it starts (files owned by the agent, 0400 and
    0600); they are never passed as Docker environment, never written to a host file and
    never logged. ``repr`` hides them.

    Attributes:
        image: the agent's image, name or id (the project's image, or git-iterare's).
        sidecar_image: git-iterare's own image (never the project's): runs the sidecar.
        name: the agent container's name (unique on the engine); the sidecar is
            ``<name>-net``.
        command: the agent's argv, run in ``workdir`` as the agent user.
        policy: egress policy.
        out_dir: host directory mounted at ``/run/iterare/out`` in the sidecar only
            (status, DNS log, refused connections).
        labels: extra labels; ``dev.iterare.run`` and ``dev.iterare.repo`` are added.
        run_id: value of ``dev.iterare.run``.
        repo_path: value of ``dev.iterare.repo`` (the repository's top directory).
        env: non-secret environment of the agent.
        secret_env: NAME -> value, environment of the agent process only.
        secret_files: path relative to the agent's home -> content (bytes), 0600 there.
        mounts: bind mounts of the agent's container (worktree, gitdir, ...).
        owned: host paths (trees) the agent owns while it runs: the sidecar gives them to
            ``agent_uid`` before the agent starts; :meth:`Backend.reclaim` gives them back.
        workdir: the agent's working directory.
        limits: CPU, memory and process limits.
        network: Docker network to attach to; empty for the default bridge.
        networks: more Docker networks the sidecar joins (``--docker-network``); the
            policy should let their subnets through.
        agent_uid: uid of the agent (not 0); see :func:`agent_ids`.
        agent_gid: gid of the agent (not 0).
        tty: allocate a terminal.
        stdin: keep stdin open (interactive sessions).
        ca_bundle: host path of a PEM bundle mounted for TLS-intercepting proxies.
        volumes: on an engine that sees none of the client's files, the run's trees in
            its volumes: then ``mounts`` and ``owned`` are not used and nothing of the
            client is mounted; None when the trees are host folders (``owned``, bind
            mounts).
    """

    image: str
    name: str
    command: tuple[str, ...]
    policy: EgressPolicy
    out_dir: Path
    sidecar_image: str = ""
    run_id: str = ""
    repo_path: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)
    env: Mapping[str, str] = field(default_factory=dict)
    secret_env: Mapping[str, str] = field(default_factory=dict, repr=False)
    secret_files: Mapping[str, bytes] = field(default_factory=dict, repr=False)
    mounts: tuple[Mount, ...] = ()
    owned: tuple[Path, ...] = ()
    workdir: str = "/workspace"
    limits: Limits = field(default_factory=Limits)
    network: str = ""
    networks: tuple[str, ...] = ()
    agent_uid: int = AGENT_ID_BASE
    agent_gid: int = AGENT_ID_BASE
    tty: bool = False
    stdin: bool = False
    ca_bundle: Path | None = None
    volumes: VolumeTrees | None = None

    def __post_init__(self) -> None:
        if not self.command:
            raise UserError("a sandbox needs a command")
        if not self.sidecar_image:
            raise UserError("a sandbox needs git-iterare's own image for its sidecar")
        if self.agent_uid <= 0 or self.agent_gid <= 0:
            raise UserError("the agent must not run as root (uid/gid 0)")
        for name in (*self.env, *self.secret_env):
            if not _ENV_NAME.fullmatch(name):
                raise UserError(f"bad environment variable name {name!r}",
                                hint="use letters, digits and _, not starting with a digit")
        for rel in self.secret_files:
            parts = Path(rel).parts
            if not parts or Path(rel).is_absolute() or ".." in parts:
                raise UserError(f"bad secret file path {rel!r}: must be relative, without ..")

    def all_labels(self) -> dict[str, str]:
        """``labels`` plus the run and repository labels."""
        return {**self.labels, LABEL_RUN: self.run_id, LABEL_REPO: self.repo_path}

    def signal_dir(self) -> Path:
        """The host folder, beside ``out_dir``, where git-iterare tells the sidecar that
        the run's trees are ready (a file ``go``), or hands a spare its run (``claim/``);
        mounted read-only in the sidecar alone. A file there costs nothing, where an
        archive put into the starting sidecar waits for its start."""
        return self.out_dir.with_name("signal")


@dataclass(frozen=True)
class ContainerInfo:
    """What the engine says about a sandbox.

    Attributes:
        id: container id.
        name: container name.
        state: ``created``, ``running``, ``exited``, ...
        exit_code: exit status once exited, else None.
        labels: all labels.
        image: image name or id it runs.
        ran_seconds: seconds from its start to its exit (the engine's clock) once it
            exited, else None.
        oom_killed: the kernel killed a process of it for exceeding its memory limit.
        memory_bytes: its memory limit in bytes, None when unlimited or unknown.
        started: the engine started it at some time (False for one only created).
        ended_at: when it exited, by the engine's clock (ISO 8601 UTC, ``...Z``), else
            None.
        reason: why the engine ended it without an exit status of its process (a swarm
            task that was rejected or failed before its container ran: the task's
            ``Status.Err``), else None.
    """

    id: str
    name: str
    state: str
    exit_code: int | None
    labels: Mapping[str, str]
    image: str
    ran_seconds: float | None = None
    oom_killed: bool = False
    memory_bytes: int | None = None
    started: bool = True
    ended_at: str | None = None
    reason: str | None = None
