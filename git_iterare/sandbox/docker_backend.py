"""The Docker Engine API backend (Docker and Podman, through the docker SDK).

A sandbox is two containers (invariant 3 of DESIGN.md):

* the network sidecar ``<name>-net`` (:mod:`git_iterare.sandbox.sidecar`), from
  git-iterare's own image, holds the run's network namespace, resolver and firewall, and
  gives the run's trees to the agent's uid before it starts and back after;
* the agent's container ``<name>``, from the agent's image (possibly a project's), joins
  the sidecar's namespace (``network_mode: container:<sidecar>``) with no capabilities,
  no-new-privileges and Docker's init as PID 1, as the agent's uid from the start. Nothing
  in it runs as root, so no layer of its image and nothing the agent runs can change the
  firewall. Its account, secrets and start script are put in before it starts
  (:mod:`git_iterare.sandbox.accounts`).

:meth:`DockerBackend.start` makes the sidecar and starts it in a thread while the agent's
container is made and the trees are filled; the agent's container starts once the
sidecar has locked the namespace, and its command runs once the firewall is up.
Containers are never auto-removed, so the exit status survives until the caller has read
it; :meth:`DockerBackend.remove` removes all of a run's.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import re
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path

from git_iterare.errors import OperationFailed
from git_iterare.sandbox.accounts import agent_files, image_accounts
from git_iterare.sandbox.docker_errors import docker_errors
from git_iterare.sandbox.dockertypes import Container, Json, field, text
from git_iterare.sandbox.engine_client import client
from git_iterare.sandbox.hostnet import with_dns
from git_iterare.sandbox.sidecar import (
    LOCKED_LINE,
    LOG_CONFIG,
    READY_LINE,
    READY_TIMEOUT,
    SidecarLog,
    bind,
    create_sidecar,
    policy_lines,
    tree_mounts,
)
from git_iterare.sandbox.spec import (
    AGENT_HOME,
    AGENT_START,
    CA_PATH,
    CACHE_PATH,
    GITDIR_PATH,
    LABEL_ORIGIN,
    LABEL_REPO,
    LABEL_ROLE,
    LABEL_RUN,
    LABEL_SIDECAR,
    OUT_PATH,
    SIDECAR,
    WORK_PATH,
    ContainerInfo,
    SandboxSpec,
    memory_bytes,
    sandbox_name,
)


def container_info(container: Container) -> ContainerInfo:
    """What the engine's inspect answer of ``container`` says, as a
    :class:`~git_iterare.sandbox.spec.ContainerInfo`."""
    attrs = container.attrs
    status = text(attrs, "State", "Status") or "unknown"
    ended = status in ("exited", "dead")
    code = field(attrs, "State", "ExitCode")
    labels = field(attrs, "Config", "Labels")
    memory = field(attrs, "HostConfig", "Memory")
    return ContainerInfo(
        id=container.id,
        name=container.name,
        state=status,
        exit_code=code if ended and isinstance(code, int) else None,
        labels={str(k): str(v) for k, v in labels.items()} if isinstance(labels, dict) else {},
        image=text(attrs, "Config", "Image"),
        ran_seconds=ran_seconds(attrs) if ended else None,
        oom_killed=field(attrs, "State", "OOMKilled") is True,
        memory_bytes=memory if isinstance(memory, int) and memory > 0 else None,
        started=_time(text(attrs, "State", "StartedAt")) is not None,
        ended_at=_iso(_time(text(attrs, "State", "FinishedAt"))) if ended else None,
    )


def _iso(when: float | None) -> str | None:
    """A POSIX timestamp as the records write times (ISO 8601 UTC, whole seconds)."""
    import datetime as dt

    if when is None:
        return None
    return dt.datetime.fromtimestamp(int(when), dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _time(value: str) -> float | None:
    """A time of the Engine API (RFC 3339 with nanoseconds) as a POSIX timestamp; None for
    none (Docker writes ``0001-01-01T00:00:00Z`` for a time that never was)."""
    import datetime as dt

    match = re.match(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(\.\d+)?(Z|[+-]\d\d:\d\d)$", value)
    if not match or value.startswith("0001-"):
        return None
    fraction = (match[2] or ".0")[:7]  # Docker gives nanoseconds; Python takes micro
    zone = "+00:00" if match[3] == "Z" else match[3]
    return dt.datetime.fromisoformat(match[1] + fraction + zone).timestamp()


def ran_seconds(attrs: Mapping[str, object]) -> float | None:
    """``FinishedAt - StartedAt`` of a container's inspect answer, in seconds; None when
    either is unknown."""
    started = _time(text(attrs, "State", "StartedAt"))
    finished = _time(text(attrs, "State", "FinishedAt"))
    if started is None or finished is None or finished < started:
        return None
    return finished - started


def _drop(container: Container) -> None:
    """Remove a container a start that failed made. What went wrong matters more than a
    failed removal (the runner removes what is left of the run afterwards), and one gone
    already (a claimed spare removes itself) is no error."""
    from docker.errors import NotFound

    with contextlib.suppress(OperationFailed), docker_errors(f"remove {container.name}"), \
            contextlib.suppress(NotFound):
        container.remove(force=True, v=True)


def _limits(spec: SandboxSpec) -> dict[str, object]:
    """The agent container's limits as ``containers.create`` takes them. Its ``/tmp`` is
    a tmpfs as large as its memory limit, whose pages count against that limit (the
    kernel charges tmpfs to the writer's memory cgroup): what the agent writes there is
    bounded, where the container's own layer on the engine's disk is not. Programs may
    run from it (Docker's default tmpfs options say ``noexec``)."""
    limits: dict[str, object] = {}
    if spec.limits.cpus:
        limits["nano_cpus"] = int(spec.limits.cpus * 1e9)
    if spec.limits.memory:
        limits["mem_limit"] = spec.limits.memory
        size = memory_bytes(spec.limits.memory)
        limits["tmpfs"] = {"/tmp": f"rw,exec,nosuid,nodev,size={size},mode=1777"}
    if spec.limits.pids:
        limits["pids_limit"] = spec.limits.pids
    return limits


def sidecar_environment(spec: SandboxSpec) -> dict[str, str]:
    """The environment of a sidecar made for ``spec``'s run: the agent's ids and the
    policy (its DNS servers and host addresses completed,
    :func:`git_iterare.sandbox.hostnet.with_dns`).

    Raises:
        UserError: the policy is too long to hand over.
    """
    return {"ITERARE_AGENT_UID": str(spec.agent_uid), "ITERARE_AGENT_GID": str(spec.agent_gid),
            # Not a secret (the record keeps it too); in the configuration it needs no
            # call before the start.
            "ITERARE_POLICY": policy_lines(with_dns(spec))}


def _agent_mounts(spec: SandboxSpec) -> list[Json]:
    """The agent container's mounts: its trees' volumes (the object cache read-only), or
    the spec's bind mounts."""
    if spec.volumes is not None:
        trees = spec.volumes
        return [{"Target": WORK_PATH, "Source": trees.work, "Type": "volume"},
                {"Target": GITDIR_PATH, "Source": trees.git, "Type": "volume"},
                {"Target": CACHE_PATH, "Source": trees.cache, "Type": "volume",
                 "ReadOnly": True}]
    return [bind(m.container_path, Path(m.host_path), m.read_only) for m in spec.mounts]


class DockerBackend:
    """Runs sandboxes on the Docker engine in use (:mod:`git_iterare.sandbox.engine`)."""

    def start(self, spec: SandboxSpec, fill: Callable[[], object] | None = None) -> str:
        """Start the sandbox ``spec`` describes; return its agent container's id.

        The sidecar is made and started (in a thread) while the agent's container is made
        and ``fill`` runs; see :meth:`start_in` for the rest.

        Raises:
            UserError: an image does not exist; the policy is too long to hand over.
            OperationFailed: the engine is unreachable, a name is taken, it refused, or
                the sidecar could not set up the firewall (nothing is left behind).
        """
        sidecar = create_sidecar(spec, sidecar_environment(spec), name=f"{spec.name}-net",
                                 labels={**spec.all_labels(), LABEL_ROLE: "sidecar"})
        with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="sidecar") as pool:
            try:
                for extra in spec.networks:
                    with docker_errors(f"attach the sandbox {spec.name} to {extra}"):
                        client().networks.get(extra).connect(sidecar)
                starting = pool.submit(self._start_container, sidecar,
                                       f"start the network sidecar of {spec.name}")
            except BaseException:
                _drop(sidecar)
                raise
            return self.start_in(spec, fill, sidecar, starting)

    def start_in(self, spec: SandboxSpec, fill: Callable[[], object] | None,
                 sidecar: Container,
                 starting: concurrent.futures.Future[None] | None = None) -> str:
        """Start ``spec``'s sandbox in the network sidecar ``sidecar``, made for it (and
        being started, ``starting``) or a claimed spare that was given its run; return
        the agent container's id. Removed, with the agent's container, when the sandbox
        does not start.

        The agent's container is made (and its files put in) and ``fill`` runs; then the
        sidecar is told the trees are ready (a host file, or on engine volumes the last
        file ``fill`` put there), the agent's container starts once the sidecar has locked
        the namespace, and this returns once the firewall is up. With ``spec.tty`` the
        agent's container is left created, for the caller to start with the terminal
        attached (``docker start --attach --interactive``), so none of its first output
        is lost.

        Raises:
            as :meth:`start`.
        """
        made = [sidecar]
        try:
            agent = self._create_agent(spec, sidecar.id)
            made.append(agent)
            if fill is not None:
                fill()
            if starting is not None:
                starting.result()
            if spec.volumes is None:  # the trees are ready: the sidecar may hand them over
                (spec.signal_dir() / "go").touch(mode=0o600)
            # Nothing gets in or out once the sidecar locked the namespace; the agent's
            # command waits for the firewall (container/agent-start).
            log, deadline = SidecarLog(sidecar), time.monotonic() + READY_TIMEOUT
            log.wait_for(LOCKED_LINE, deadline)
            if not spec.tty:
                self._start_container(agent, f"start the sandbox {spec.name}")
            log.wait_for(READY_LINE, deadline)
        except BaseException:
            if starting is not None:  # a start still under way makes what is removed
                with contextlib.suppress(BaseException):
                    starting.exception()
            for container in reversed(made):
                _drop(container)
            raise
        return agent.id

    @staticmethod
    def _start_container(container: Container, what: str) -> None:
        with docker_errors(what):
            container.start()

    def _create_agent(self, spec: SandboxSpec, sidecar_id: str) -> Container:
        """The agent's container (created, not started) in the namespace of the sidecar
        ``sidecar_id``, with its files put in (:func:`~git_iterare.sandbox.accounts.agent_files`).

        Raises:
            UserError: the image does not exist.
            OperationFailed: the engine refused (then nothing is left behind).
        """
        from docker.types import LogConfig

        env = {**spec.env, "HOME": AGENT_HOME, "USER": "agent", "LOGNAME": "agent"}
        if spec.ca_bundle is not None:
            env.update(NODE_EXTRA_CA_CERTS=CA_PATH, GIT_SSL_CAINFO=CA_PATH,
                       CURL_CA_BUNDLE=CA_PATH)
        with docker_errors(f"create the sandbox {spec.name}"):
            agent = client().containers.create(
                spec.image, command=list(spec.command), name=spec.name,
                entrypoint=["/bin/sh", AGENT_START],
                user=f"{spec.agent_uid}:{spec.agent_gid}", working_dir=spec.workdir,
                labels={**spec.all_labels(), LABEL_ROLE: "agent", LABEL_SIDECAR: sidecar_id,
                        LABEL_ORIGIN: ""},
                environment=env, mounts=_agent_mounts(spec),
                network_mode=f"container:{sidecar_id}", cap_drop=["ALL"],
                security_opt=["no-new-privileges:true"], init=True, tty=spec.tty,
                stdin_open=spec.stdin, log_config=LogConfig(**LOG_CONFIG), detach=True,
                **_limits(spec))
        try:
            with docker_errors(f"prepare the sandbox {spec.name}"):
                passwd, group = image_accounts(agent, spec.image)
                agent.put_archive("/", agent_files(spec, passwd, group))
        except BaseException:
            _drop(agent)
            raise
        return agent

    def output(self, container: str, *, follow: bool = False) -> Iterator[bytes]:
        """Yield its output as lines (bytes, newline kept), streamed: lines longer than
        :data:`~git_iterare.limits.MAX_LINE_BYTES` come in pieces of that size. With
        ``follow``, until it exits; else what it printed so far."""
        from git_iterare.loglimit import split_lines

        with docker_errors(f"read the output of the sandbox {container[:12]}"):
            found = client().containers.get(container)
            stream = found.logs(stream=True, follow=follow, stdout=True, stderr=True)
            # Inside: a connection that drops while following is one line too.
            yield from split_lines(stream)

    def wait(self, container: str, timeout: float | None = None) -> int | None:
        """Return the exit status, or None when ``timeout`` seconds pass first."""
        import requests.exceptions

        with docker_errors(f"wait for the sandbox {container[:12]}"):
            try:
                result = client().api.wait(container, timeout=timeout)
            except (requests.exceptions.ReadTimeout, requests.exceptions.ConnectionError):
                return None
        code = result.get("StatusCode", -1)
        return code if isinstance(code, int) else -1

    def stop(self, container: str, grace_seconds: float = 10) -> None:
        """SIGTERM to the agent (Docker's init passes it on), SIGKILL after
        ``grace_seconds``. The sidecar stays until :meth:`remove`."""
        with docker_errors(f"stop the sandbox {container[:12]}"):
            client().containers.get(container).stop(timeout=max(0, round(grace_seconds)))

    def _sidecar(self, container: str) -> Container | None:
        """The sidecar of an agent's container (by label, else by name), or None."""
        import docker.errors

        engine = client()
        try:
            agent = engine.containers.get(container)
            ref = (agent.labels or {}).get(LABEL_SIDECAR) or f"{agent.name}-net"
        except docker.errors.NotFound:
            ref = f"{container}-net"
        try:
            sidecar = engine.containers.get(ref)
        except docker.errors.NotFound:
            return None
        return sidecar if (sidecar.labels or {}).get(LABEL_ROLE) == "sidecar" else None

    def reclaim(self, container: str, trees: Sequence[Path], uid: int, gid: int,
                image: str, out_dir: Path | None = None) -> list[str]:
        """After the agent ended: record the refused connections, then strip set-uid and
        set-gid bits and special files from ``trees`` and give them to ``uid``:``gid``.

        Runs in the sandbox's sidecar while it is up; otherwise in a new container from
        ``image`` (git-iterare's own) that mounts ``trees`` and is removed afterwards.

        Args:
            container: the agent's container id or name.
            trees: host paths the agent owned (worktree, run gitdir, gitfile); missing
                ones are skipped.
            uid: owner to give them to (the user running git iterare).
            gid: its group.
            image: git-iterare's own image, for when the sidecar is gone.
            out_dir: the sidecar's host output folder (which it made root's), given back
                too when the sidecar is gone; None to leave it.

        Returns:
            Notes to show the user (special files removed), at most 100.

        Raises:
            OperationFailed: the engine refused, or the trees could not be given back.
        """
        sidecar = self._sidecar(container)
        argv = [SIDECAR, "reclaim", str(uid), str(gid)]
        with docker_errors(f"give the trees of {container[:24]} back"):
            if sidecar is not None and sidecar.status == "running":
                sidecar.exec_run([SIDECAR, "report"], user="0:0")
                code, output = sidecar.exec_run(argv, user="0:0")
            else:
                present = [p for p in trees if Path(p).exists()]
                out_dir = out_dir if out_dir is not None and out_dir.is_dir() else None
                if not present and out_dir is None:
                    return []
                mounts, names = tree_mounts(present)
                if out_dir is not None:
                    mounts.append(bind(OUT_PATH, out_dir, read_only=False))
                helper = client().containers.create(
                    image, command=argv[1:], entrypoint=[SIDECAR], user="0:0",
                    environment={"ITERARE_TREES": names},
                    mounts=mounts, network_mode="none", cap_drop=["ALL"],
                    cap_add=["CHOWN", "DAC_OVERRIDE", "FOWNER"],
                    security_opt=["no-new-privileges:true"], labels={LABEL_ROLE: "reclaim"},
                    detach=True)
                try:
                    helper.start()
                    status = helper.wait(timeout=600).get("StatusCode", -1)
                    code = status if isinstance(status, int) else -1
                    output = b"".join(helper.logs(stream=True, stdout=True, stderr=True))
                finally:
                    helper.remove(force=True, v=True)
        said = bytes(output or b"").decode("utf-8", "replace")
        if code != 0:
            raise OperationFailed(f"could not give the run's files back to uid {uid} "
                                  f"(status {code}): {said.strip()[-300:]}")
        return [line for line in said.splitlines() if line.strip()][:100]

    def again(self, container: str, *, name: str, role: str, command: Sequence[str],
              env: Mapping[str, str], files: Mapping[str, bytes],
              pristine: bool = False) -> str:
        """Start another container in the sandbox of the exited agent's container
        ``container``, with its user, entrypoint (the agent start script), environment
        plus ``env``, mounts, limits and network namespace (the sidecar's, so the same
        firewall), named ``name`` and labelled ``role``, running ``command``; ``files``
        (absolute path -> content, root's, mode 0644) are put in first. Return its id.

        Its file system is the one the agent left (committed to an image labelled as the
        run's, removed with the run's containers by :meth:`remove`; ``container`` is
        removed when ``name`` is its name) or, with ``pristine``, that of the image the
        sandbox's first agent container ran, with the agent's account, start script and
        CA bundle put in again (:func:`~git_iterare.sandbox.accounts.fresh_files`): no
        secret, home file or anything else the agent left but in the run's trees.

        Raises:
            OperationFailed: the engine refused (nothing is left but the image), or the
                sandbox's sidecar is no longer running.
        """
        from git_iterare.sandbox.accounts import file_archive, fresh_files

        engine = client()
        with docker_errors(f"start another container in the sandbox of {container[:24]}"):
            old = engine.containers.get(container)
            sidecar = self._sidecar(container)
            if sidecar is None or sidecar.status != "running":
                raise OperationFailed(f"the network sidecar of {old.name} is not running")
            labels = old.labels or {}
            origin = labels.get(LABEL_ORIGIN) or str(old.attrs["Image"])
            config = old.attrs["Config"]
            if pristine:
                image = origin
            else:
                image = str(engine.api.commit(old.id, conf={"Labels": {
                    **labels, LABEL_ROLE: "round"}})["Id"])
            if name == old.name:  # its name goes to the next round's container
                old.remove(force=True, v=True)
            added = {f"{k}=" for k in env}
            kept = [e for e in config.get("Env") or [] if not any(map(e.startswith, added))]
            # The Engine API's create body: what made the sandbox's containers what they
            # are (user, entrypoint, host config: mounts, limits, namespace), the rest new.
            made = engine.api.create_container_from_config({
                "Image": image, "Cmd": list(command), "User": config.get("User"),
                "Entrypoint": config.get("Entrypoint"), "WorkingDir": config.get("WorkingDir"),
                "Env": [*kept, *(f"{k}={v}" for k, v in env.items())],
                "Labels": {**labels, LABEL_ROLE: role, LABEL_ORIGIN: origin},
                "HostConfig": _host_config(old.attrs["HostConfig"])}, name)
            new = engine.containers.get(str(made["Id"]))
            try:
                if pristine:
                    uid, _, gid = str(config.get("User") or "").partition(":")
                    new.put_archive("/", fresh_files(new, old, int(uid), int(gid or uid)))
                if files:
                    new.put_archive("/", file_archive(files))
                new.start()
            except BaseException:
                _drop(new)
                raise
        return str(new.id)

    def remove(self, run_id: str, repo_path: str) -> None:
        """Remove every container labelled as run ``run_id``'s of the repository at
        ``repo_path`` (agent, sidecar, helpers; made or started) and the sidecar each
        agent's container names (a claimed spare keeps a spare's labels). A running
        sidecar writes its refused-connection report first."""
        import docker.errors

        labels = [f"{LABEL_RUN}={run_id}", f"{LABEL_REPO}={repo_path}"]
        with docker_errors(f"remove the sandbox of run {run_id}"):
            # A container removed between the listing and its inspection (by a loop's
            # driver finishing the same run) is one less to remove, not an error.
            found = client().containers.list(all=True, filters={"label": labels},
                                             ignore_removed=True)
            # A claimed spare keeps a spare's labels: it is named by the agent's container
            # (or, with that gone, by the run's name it was given).
            named = {c.labels.get(LABEL_SIDECAR) or "" for c in found}
            named.add(f"{sandbox_name(run_id)}-net")
            ids = {c.id for c in found} | {c.name for c in found}
            for sidecar_id in sorted(named - ids - {""}):
                with contextlib.suppress(docker.errors.NotFound):
                    sidecar = client().containers.get(sidecar_id)
                    if sidecar.labels.get(LABEL_ROLE) == "sidecar" \
                            and sidecar.labels.get(LABEL_REPO) == repo_path \
                            and sidecar.id not in ids:
                        found.append(sidecar)
            # Sidecars last: they hold the network namespace of the others (the agent's
            # container, a loop's checks), and Podman refuses to remove them before.
            for container in sorted(found, key=lambda c: c.labels.get(LABEL_ROLE) == "sidecar"):
                if container.labels.get(LABEL_ROLE) == "sidecar" \
                        and container.status == "running":
                    with contextlib.suppress(docker.errors.APIError):
                        container.exec_run([SIDECAR, "report"], user="0:0")
                _remove_container(container)
            _remove_round_images(run_id, repo_path)

    def inspect(self, container: str) -> ContainerInfo | None:
        """State, exit status and labels; None when there is no such container."""
        import docker.errors

        with docker_errors(f"inspect the sandbox {container[:12]}"):
            try:
                return container_info(client().containers.get(container))
            except docker.errors.NotFound:
                return None

    def list_sandboxes(self, repo_path: str | None = None) -> list[ContainerInfo]:
        """Every git-iterare agent container, or those of the repository at ``repo_path``."""
        label = f"{LABEL_REPO}={repo_path}" if repo_path is not None else LABEL_RUN
        with docker_errors("list sandboxes"):
            found = client().containers.list(all=True, filters={"label": label},
                                             ignore_removed=True)
        return [container_info(c) for c in found
                if (c.labels or {}).get(LABEL_ROLE, "agent") == "agent"]


def _host_config(inspected: Mapping[str, object]) -> dict[str, object]:
    """The ``HostConfig`` of an inspected container as a create body takes it. Podman
    reports the CPU limit both as ``NanoCpus`` and as the ``CpuPeriod`` and ``CpuQuota``
    it became, and ulimits by their kernel names (``RLIMIT_NOFILE``), and refuses a
    create that gives either so."""
    host = dict(inspected)
    if host.get("NanoCpus"):
        host.pop("CpuPeriod", None)
        host.pop("CpuQuota", None)
    ulimits = host.get("Ulimits")
    if isinstance(ulimits, list):
        host["Ulimits"] = [
            {**u, "Name": str(u.get("Name") or "").lower().removeprefix("rlimit_")}
            for u in ulimits if isinstance(u, dict)]
    return host


#: Seconds to wait for what another process is removing (two commands that finish one run
#: at once), and between two tries of the round images the engine still holds.
GONE_SECONDS = 30.0
RETRY_SECONDS = 0.5


def _remove_container(container: Container) -> None:
    """Remove ``container`` with its anonymous volumes; when another process is already
    removing it, wait (at most :data:`GONE_SECONDS`) until it is gone.

    Raises:
        docker.errors.APIError: the engine refused.
    """
    import docker.errors

    try:
        container.remove(force=True, v=True)
    except docker.errors.NotFound:
        return
    except docker.errors.APIError as exc:
        if "already in progress" not in str(exc.explanation or exc):
            raise
        deadline = time.monotonic() + GONE_SECONDS
        while time.monotonic() < deadline:
            try:
                container.reload()
            except docker.errors.NotFound:
                return
            time.sleep(RETRY_SECONDS)
        raise


def _remove_round_images(run_id: str, repo_path: str) -> None:
    """Remove the images a loop's rounds of run ``run_id`` of the repository at
    ``repo_path`` started from (:meth:`DockerBackend.again`). Each round's image is its
    last's child, which the engine removes first: what it refuses is tried again while
    the others go, and all of them again a while (:data:`GONE_SECONDS`) while another
    process still removes a container of them. (Listed by the run's label alone, the
    repository's read from each image: Podman 4 lists no image for two label filters.)

    Raises:
        OperationFailed: one could not be removed (it holds what the agent's home held,
            its secret files too).
    """
    import docker.errors

    engine = client()
    left = [str(i.id) for i in engine.images.list(filters={"label": f"{LABEL_RUN}={run_id}"})
            if (engine.images.get(str(i.id)).labels or {}).get(LABEL_REPO) == repo_path]
    failed: dict[str, str] = {}
    deadline = time.monotonic() + GONE_SECONDS
    while left:
        failed = {}
        for image in left:
            try:
                engine.images.remove(image, force=True)
            except docker.errors.NotFound:
                pass
            except docker.errors.APIError as exc:
                failed[image] = str(exc.explanation or exc)
        if len(failed) == len(left):  # no progress: a container still being removed?
            if time.monotonic() >= deadline:
                break
            time.sleep(RETRY_SECONDS)
        left = list(failed)
    if failed:
        named = ", ".join(f"{image[7:19]}: {why}" for image, why in failed.items())
        raise OperationFailed(f"could not remove the round images {named}",
                              hint="remove them with `docker image rm`, or run "
                                   "`git iterare cleanup` again")
