"""The checks every sandbox start goes through before anything is created.

:func:`admit` refuses dangerous values whoever set them (the network and the extra mounts,
see :mod:`git_iterare.sandbox.safety`), then requires the user's approval of what the
repository asks for (:func:`git_iterare.runner.trust.require_approval`). It asks nothing
of the Docker engine; :func:`check_network_on_engine` does the one check that needs it
(a user-defined name standing for the engine's host network) once the engine is reached.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from git_iterare.config import Config
from git_iterare.errors import UserError
from git_iterare.git.repo import Repo

if TYPE_CHECKING:
    from git_iterare.sandbox.policy import EgressPolicy
    from git_iterare.sandbox.spec import Mount


@dataclass(frozen=True)
class Admitted:
    """What the checks let through.

    Attributes:
        mounts: ``[mounts] volumes`` as :class:`git_iterare.sandbox.Mount` values (sources
            resolved, targets normalized).
        network: ``docker.network`` without surrounding white space ("" for the default).
    """

    mounts: tuple[Mount, ...]
    network: str


def checked_network(config: Config) -> str:
    """``docker.network``, refused when it would leave the sandbox's namespace.

    Raises:
        UserError: ``host``, ``none``, ``container:<x>`` and the like.
    """
    from git_iterare.sandbox.safety import check_network

    return check_network(config["docker.network"], f"docker.network (from "
                                                   f"{config.origin('docker.network')})")


def extra_mounts(config: Config, repo: Repo | None = None) -> list[Mount]:
    """``[mounts] volumes`` (iterare's SOURCE:TARGET[:ro|rw]) as sandbox mounts, each
    checked by :func:`git_iterare.sandbox.safety.check_source` and ``check_target``.

    Args:
        config: the effective configuration.
        repo: the repository, whose git directory may not be mounted; None outside one.

    Raises:
        UserError: a malformed entry, a missing source, or a refused source or target.
    """
    from git_iterare.sandbox import Mount
    from git_iterare.sandbox.safety import check_source, check_target

    protected = [repo.common_dir, repo.git_dir] if repo is not None else []
    mounts = []
    for spec in config["mounts.volumes"]:
        parts = spec.split(":")
        mode = "rw"
        if len(parts) >= 3 and parts[-1] in ("ro", "rw"):
            mode = parts.pop()
        if len(parts) < 2 or not parts[-1].startswith("/") or not parts[0]:
            raise UserError(f"mounts.volumes: bad entry {spec!r}",
                            hint="write SOURCE:TARGET[:ro|rw] with an absolute TARGET")
        where = f"mounts.volumes entry {spec!r}"
        source = Path(os.path.expandvars(":".join(parts[:-1]))).expanduser()
        target = check_target(parts[-1], where)
        real = check_source(source, where=where, protected=protected)
        mounts.append(Mount(real, target, read_only=mode == "ro"))
    return mounts


def admit(repo: Repo | None, config: Config, *, prompt_env: Sequence[str] = (),
          agent: str | None = None) -> Admitted:
    """Refuse dangerous values, then require approval of the repository's requests.

    Call it before anything is created (record, branch, worktree, container, image) and
    before the Docker engine is contacted.

    Args:
        repo: the repository, or None outside one.
        config: the effective configuration.
        prompt_env: variable names the prompt's frontmatter passes into the sandbox
            (names also given with ``--env`` left out: those are the user's own).
        agent: the agent the sandbox runs, whose repository settings count (HEAD's);
            every agent's when None.

    Returns:
        The checked mounts and network.

    Raises:
        UserError: a refused value (one line saying why), a malformed mount, or settings
            the user has not approved (see
            :func:`git_iterare.runner.trust.require_approval`).
    """
    from git_iterare import ui
    from git_iterare.runner.trust import require_approval

    network = checked_network(config)
    mounts = extra_mounts(config, repo)
    require_approval(repo, config, prompt_env, agents=None if agent is None else [agent])
    for line in unwritable_mounts(config["mounts.volumes"], mounts):
        ui.warn(line)
    return Admitted(tuple(mounts), network)


def unwritable_mounts(specs: Sequence[str], mounts: Sequence[Mount]) -> list[str]:
    """One line for each read-write mount the agent cannot write: it runs as a uid and gid
    no host account or group has (:func:`git_iterare.sandbox.agent_ids`), so only the
    permission bits for others let it write in the mounted folder (``o+wx``) or file
    (``o+w``). Giving the tree to the agent for the run, as its worktree is, would change
    the owner and modes of the user's own files (and of any other user's among them) and
    clash with other runs that mount them; so the line says why and what to do instead.

    Args:
        specs: ``[mounts] volumes`` as written, in the order of ``mounts``.
        mounts: what :func:`extra_mounts` made of them.
    """
    import stat

    lines = []
    for spec, mount in zip(specs, mounts, strict=True):
        if mount.read_only:
            continue
        try:
            info = mount.host_path.stat()
        except OSError:
            continue  # the launch names a source that went away
        needed = (stat.S_IWOTH | stat.S_IXOTH) if stat.S_ISDIR(info.st_mode) else stat.S_IWOTH
        if info.st_mode & needed == needed:
            continue
        owner = "yours" if info.st_uid == os.getuid() else f"uid {info.st_uid}'s"
        lines.append(
            f"mounts.volumes entry {spec!r}: the agent cannot write in {mount.host_path} "
            f"({owner}, mode {stat.S_IMODE(info.st_mode):04o}): it runs as a uid of its own, "
            f"which owns nothing there; mount it :ro, or let every user write there "
            f"(chmod o+w{'x' if stat.S_ISDIR(info.st_mode) else ''} {mount.host_path})")
    return lines


def check_network_on_engine(network: str) -> None:
    """Refuse a network name the engine resolves to its host or none network.

    Asks the engine; nothing is created. A network the engine does not know is left to
    the launch, which reports it.

    Raises:
        UserError: the name (or id) stands for a network of the ``host`` or ``null``
            driver.
        OperationFailed: the engine cannot be reached.
    """
    if not network:
        return
    from git_iterare.sandbox.safety import engine_network_driver, network_driver_problem

    driver = engine_network_driver(network)
    problem = network_driver_problem(network, driver) if driver is not None else None
    if problem:
        raise UserError(f"docker.network: {problem}",
                        hint="leave docker.network unset or name a user-defined Docker network")


def workspace_mounts(repo: Repo, mounts: Sequence[Mount], base_commit: str) -> tuple[str, ...]:
    """Mount targets below ``/workspace`` that the base commit does not track, relative to
    the worktree: what is mounted there is not the agent's work.

    The run's git (in the sandbox) ignores them, and the automatic commit at finish leaves
    them out (Docker may leave an empty mount point in the worktree). Targets over paths
    the base tracks keep the base's content on the host, so nothing of the mount reaches
    the automatic commit there either.

    Args:
        repo: the repository.
        mounts: admitted mounts (:class:`git_iterare.sandbox.Mount`).
        base_commit: the run's base commit (hex).
    """
    from git_iterare import proc
    from git_iterare.sandbox.safety import workspace_targets

    rels = workspace_targets(m.container_path for m in mounts)
    if not rels:
        return ()
    tracked = proc.git("ls-tree", "--name-only", base_commit, "--", *rels,
                       cwd=repo.common_dir).stdout.split("\n")
    return tuple(r for r in rels if r not in tracked)


def exclude_in_run(gitdir: Path, mounts: Sequence[Mount]) -> None:
    """Add the targets of ``mounts`` below ``/workspace`` to the run gitdir's
    ``info/exclude``, so git inside the sandbox does not take them as the agent's work."""
    from git_iterare.sandbox.safety import workspace_targets

    rels = workspace_targets(m.container_path for m in mounts)
    if not rels:
        return
    exclude = gitdir / "info" / "exclude"
    exclude.parent.mkdir(parents=True, exist_ok=True)
    with exclude.open("a", encoding="utf-8") as out:
        out.write("# mounted by [mounts] volumes, not the agent's work\n")
        for rel in rels:
            escaped = "".join("\\" + c if c in "*?[\\ #!" else c for c in rel)
            out.write(f"/{escaped}\n")


def requested_networks(repo: Repo | None, names: Sequence[str], compose: bool,
                       env: Mapping[str, str]) -> tuple[str, ...]:
    """The networks ``--docker-network`` and ``--docker-compose`` attach the run to (the
    user's own request: no approval), each refused when it would leave the sandbox's
    namespace (:func:`git_iterare.sandbox.safety.check_network`); the compose network also
    when it is not this checkout's (:func:`check_compose_owner`, which asks the engine).

    Args:
        repo: the repository; its main worktree holds the compose project.
        names: ``--docker-network`` values.
        compose: ``--docker-compose``: add the compose project's default network (with a
            warning, and nothing added, when there is no compose file).
        env: the environment (``COMPOSE_PROJECT_NAME``).

    Raises:
        UserError: a refused network name, or a compose network of another directory.
        OperationFailed: the engine cannot be reached (``--docker-compose`` only).
    """
    from git_iterare import ui
    from git_iterare.sandbox.networks import compose_network
    from git_iterare.sandbox.safety import check_network

    found = [check_network(n, f"--docker-network {n}") for n in names]
    if compose:
        top = repo.main_work_tree if repo is not None else None
        name = compose_network(Path(top), env) if top is not None else None
        if name is None:
            ui.warn("--docker-compose: no compose file in the project; no network added")
        else:
            found.append(check_network(name, f"--docker-compose network {name}"))
            if repo is not None:  # always, as the name came from its work tree
                check_compose_owner(repo, name)
    return tuple(dict.fromkeys(n for n in found if n))


def with_networks(policy: EgressPolicy, networks: Sequence[str]) -> EgressPolicy:
    """``policy`` with the networks the user attached the sandbox to: their subnets
    (``networks``, which never open the Docker host), their gateways (closed as the
    host's, in ``hosts``) and their containers' names (``local_names``); ``policy``
    itself when there are none.

    Raises:
        UserError: a network the engine does not have, or of a refused driver.
        OperationFailed: the engine cannot be reached.
    """
    if not networks:
        return policy
    import dataclasses

    from git_iterare.sandbox.networks import network_gateways

    return dataclasses.replace(
        policy, networks=network_cidrs(networks),
        hosts=tuple(dict.fromkeys((*policy.hosts, *(
            g for net in networks for g in network_gateways(net))))),
        local_names=attached_names(networks, policy.domains))


def check_compose_owner(repo: Repo, network: str) -> None:
    """Refuse the ``--docker-compose`` network ``network`` unless Docker Compose's labels
    say it belongs to this checkout: every directory they name
    (:func:`git_iterare.sandbox.networks.compose_owner_dirs`) is the repository's main work
    tree or current work tree, or inside one (symlinks resolved). The repository chooses
    the compose project's name; without this check it could name another project's
    network. Asks the engine; nothing is created. A network the engine does not have is
    left to :func:`network_cidrs`, which reports it.

    Raises:
        UserError: no label names a directory, or one names a directory outside the
            checkout.
        OperationFailed: the engine cannot be reached.
    """
    from git_iterare.sandbox.networks import compose_owner_dirs

    owners = compose_owner_dirs(network)
    if owners is None:
        return
    trees = [t.resolve() for t in (repo.main_work_tree, repo.work_tree) if t is not None]
    hint = f"attach a network you choose with `--docker-network {network}`"
    if not owners:
        raise UserError(f"--docker-compose network {network}: Docker Compose's labels name "
                        "no directory it belongs to, so it may be another project's",
                        hint=hint)
    for owner in owners:
        real = Path(owner).resolve() if os.path.isabs(owner) else None
        if real is None or not any(real == t or t in real.parents for t in trees):
            raise UserError(f"--docker-compose network {network} belongs to the compose "
                            f"project in {owner}, not to this checkout ({trees[0]})",
                            hint=hint)


def network_cidrs(networks: Sequence[str]) -> tuple[str, ...]:
    """The subnets of ``networks``, each network checked on the engine first (not its
    ``host`` or ``null`` network).

    Raises:
        UserError: a network the engine does not have, or of a refused driver.
        OperationFailed: the engine cannot be reached.
    """
    from git_iterare.sandbox.networks import network_subnets
    from git_iterare.sandbox.safety import engine_network_driver, network_driver_problem

    cidrs: list[str] = []
    for name in networks:
        driver = engine_network_driver(name)
        problem = network_driver_problem(name, driver) if driver is not None else None
        if problem:
            raise UserError(f"--docker-network {name}: {problem}",
                            hint="name a user-defined Docker network")
        cidrs += network_subnets(name)
    return tuple(dict.fromkeys(cidrs))



def attached_names(networks: Sequence[str], domains: Sequence[str]) -> tuple[str, ...]:
    """The names of containers on ``networks`` the sandbox's resolver may answer
    (:func:`git_iterare.sandbox.networks.network_names`), without those that would shadow
    an allowlisted or public name
    (:func:`git_iterare.sandbox.networks.split_local_names`); one warning names what was
    left out.

    Args:
        networks: the networks the run is attached to.
        domains: the run's allowlist entries.

    Raises:
        OperationFailed: the engine cannot be reached.
    """
    from git_iterare import ui
    from git_iterare.sandbox.networks import network_names, split_local_names

    kept, dropped = split_local_names(
        [n for net in networks for n in network_names(net)], domains)
    if dropped:
        ui.warn("names of containers on the attached networks that look like public or "
                f"allowlisted names do not resolve in the sandbox: {', '.join(dropped)} "
                "(use their addresses, or single-label names such as db)")
    return kept
