"""Values the sandbox refuses whoever sets them (the user's own config and flags too).

These would switch the sandbox off rather than widen it, so no approval makes them
acceptable:

* networks: ``host`` (the sandbox's firewall would replace the host's own), ``none``, and
  every ``<mode>:<target>`` form (``container:<x>``, ``service:<x>``, ``ns:<path>``), which
  join another namespace; only the default bridge and user-defined networks are taken.
  Networks are named, so the engine is asked later whether a name stands for a network
  of the ``host`` or ``null`` driver (:func:`network_driver_problem`).
* mount sources (after ``~`` and variables are expanded and symlinks resolved): ``/``;
  any socket; a directory holding a known engine or agent socket; the user's home or a
  directory above it; the system directories in :data:`SYSTEM_SOURCE_TREES` and anything
  below them, and those in :data:`SYSTEM_SOURCE_DIRS` themselves; and the repository's
  git directory, anything in it or above it (the agent must never write ``.git``).
* mount targets: ``/``, the system paths in :data:`SYSTEM_TARGET_TREES` and anything
  below them, the sandbox's own paths in :data:`SANDBOX_TARGET_TREES` and anything below
  them, and ``/workspace`` itself (a folder below it may be mounted, as in iterare).
"""

from __future__ import annotations

import contextlib
import os
import posixpath
import stat
from collections.abc import Iterable, Mapping
from pathlib import Path

from git_iterare.errors import UserError

#: Source directories refused together with everything below them: kernel and device
#: interfaces, boot files, runtime state (sockets of the engine, of agents
#: and of the init system) and the engines' storage.
SYSTEM_SOURCE_TREES: tuple[str, ...] = (
    "/boot", "/dev", "/etc", "/proc", "/run", "/sys", "/var/run",
    "/var/lib/docker", "/var/lib/containerd", "/var/lib/containers", "/var/lib/kubelet",
)

#: Source directories refused themselves (a file or folder below them may be mounted,
#: e.g. ``/usr/share/dict`` or a folder in ``/tmp``): they hold the system's programs and
#: libraries, everyone's homes (root's too), or other users' sockets (``/tmp/.X11-unix``,
#: ssh-agent's).
SYSTEM_SOURCE_DIRS: tuple[str, ...] = (
    "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/usr", "/usr/bin", "/usr/sbin",
    "/usr/lib", "/usr/local", "/usr/local/bin", "/usr/local/sbin", "/opt", "/srv", "/home",
    "/mnt", "/media", "/root", "/tmp", "/var", "/var/lib", "/var/tmp", "/var/log", "/snap",
)

#: Targets refused together with everything below them: the image's programs,
#: libraries and configuration (the entrypoint lives in ``/usr/local/sbin``), and the
#: kernel interfaces.
SYSTEM_TARGET_TREES: tuple[str, ...] = (
    "/bin", "/boot", "/dev", "/etc", "/lib", "/lib32", "/lib64", "/libx32", "/proc",
    "/root", "/run", "/sbin", "/sys", "/usr", "/var/run",
)

#: The sandbox's own paths, refused with everything below them: the worktree's git
#: file (``/workspace/.git``), the run's gitdir and the sandbox's control files.
SANDBOX_TARGET_TREES: tuple[str, ...] = ("/workspace/.git", "/git", "/run/iterare")

#: The sandbox's paths refused themselves: the worktree. A folder below it may be a
#: target (``./data:/workspace/data``, as in iterare): what is mounted there is kept out
#: of the agent's work (see :func:`workspace_targets`).
SANDBOX_TARGET_DIRS: tuple[str, ...] = ("/workspace",)

#: Where the run's worktree is mounted in the agent's container.
WORKSPACE = "/workspace"


def _where(where: str) -> str:
    return f"{where}: " if where else ""


def check_network(value: str, where: str = "docker.network") -> str:
    """Refuse a network mode that leaves the sandbox's network namespace.

    Args:
        value: the configured network ("" for the sandbox's own bridge network).
        where: the config key, for the message.

    Returns:
        ``value`` with surrounding white space removed.

    Raises:
        UserError: ``host``, ``none`` or any ``mode:target`` form (compared without case
            and surrounding white space).
    """
    name = value.strip()
    lowered = name.lower()
    if lowered == "host":
        why = "the sandbox would share, and rewrite the firewall of, the host's own network"
    elif lowered == "none":
        why = "the sandbox needs a network of its own for its firewall"
    elif ":" in lowered:
        why = (f"{lowered.split(':', 1)[0]}: joins another container's or namespace's "
               f"network, whose firewall the sandbox would rewrite")
    else:
        return name
    raise UserError(f"{_where(where)}network {name!r} is refused: {why}",
                    hint="leave docker.network unset or name a user-defined Docker network")


def network_driver_problem(name: str, driver: str) -> str | None:
    """Why the engine's network ``name`` of ``driver`` cannot be used, or None.

    A user-defined name (or an id) may still stand for the engine's ``host`` or ``none``
    network; ``driver`` is what the engine reports for it.
    """
    if driver.lower() in ("host", "null", "none"):
        return (f"network {name!r} is the engine's {driver} network, which would take the "
                f"sandbox out of its own firewalled network namespace")
    return None


def _under(path: str, top: str) -> bool:
    """``path`` is ``top`` or below it (both normalized absolute POSIX paths)."""
    return path == top or path.startswith(top.rstrip("/") + "/")


def normalize_target(target: str) -> str:
    """A container path without ``.``/``..`` parts, repeated or trailing slashes."""
    norm = posixpath.normpath("/" + target.lstrip("/"))
    return "/" + norm.lstrip("/")


def check_target(target: str, where: str = "mounts.volumes") -> str:
    """Refuse a mount target over the sandbox's own or the system's paths.

    Args:
        target: absolute path in the container.
        where: names the entry in messages (``mounts.volumes entry '...'``).

    Returns:
        The normalized target.

    Raises:
        UserError: the target is ``/``, a system path or a sandbox path (or below one).
    """
    norm = normalize_target(target)
    if norm == "/":
        raise UserError(f"{_where(where)}mounting over / is refused",
                        hint="mount to a folder of its own such as /data")
    for top in SANDBOX_TARGET_TREES:
        if _under(norm, top) or norm in SANDBOX_TARGET_DIRS:
            raise UserError(f"{_where(where)}{norm} is reserved for the sandbox",
                            hint="mount to a folder of its own such as /data")
    for top in SYSTEM_TARGET_TREES:
        if _under(norm, top):
            raise UserError(f"{_where(where)}mounting over the system path {norm} is refused "
                            f"(it could replace the sandbox's own programs)",
                            hint="mount to a folder of its own such as /data")
    return norm


def workspace_targets(targets: Iterable[str]) -> list[str]:
    """The mount targets below the worktree, as paths relative to it (``data/cache``).

    Args:
        targets: normalized container paths (see :func:`check_target`).
    """
    prefix = WORKSPACE + "/"
    return [t[len(prefix):] for t in targets if t.startswith(prefix)]


def known_sockets(env: Mapping[str, str] | None = None) -> list[Path]:
    """Sockets that give control over the engine or the user's agents, where they exist:
    the Docker, Podman and containerd sockets (system-wide and rootless), the one
    ``DOCKER_HOST`` names, and ``SSH_AUTH_SOCK``; symlinks resolved."""
    env = os.environ if env is None else env
    candidates = ["/var/run/docker.sock", "/run/docker.sock", "/run/podman/podman.sock",
                  "/run/containerd/containerd.sock", f"/run/user/{os.getuid()}/docker.sock",
                  f"/run/user/{os.getuid()}/podman/podman.sock"]
    runtime = env.get("XDG_RUNTIME_DIR")
    if runtime:
        candidates += [f"{runtime}/docker.sock", f"{runtime}/podman/podman.sock"]
    host = env.get("DOCKER_HOST", "")
    if host.startswith("unix://"):
        candidates.append(host[len("unix://"):])
    if env.get("SSH_AUTH_SOCK"):
        candidates.append(env["SSH_AUTH_SOCK"])
    found = []
    for candidate in candidates:
        try:
            path = Path(candidate).resolve(strict=True)
        except (OSError, RuntimeError):
            continue
        found.append(path)
    return found


def homes(env: Mapping[str, str] | None = None) -> list[Path]:
    """The user's home directories: ``$HOME`` and the account's, symlinks resolved."""
    import pwd

    env = os.environ if env is None else env
    paths = [env.get("HOME", "")]
    with contextlib.suppress(KeyError):
        paths.append(pwd.getpwuid(os.getuid()).pw_dir)
    out = []
    for p in paths:
        if p and os.path.isabs(p):
            out.append(Path(p).resolve())
    return out


def check_source(source: Path, *, where: str = "mounts.volumes",
                 protected: Iterable[Path] = (), home_dirs: Iterable[Path] | None = None,
                 sockets: Iterable[Path] | None = None) -> Path:
    """Refuse a mount source that would hand the sandbox the host.

    Args:
        source: the host path, ``~`` and variables already expanded; it must exist.
        where: names the entry in messages.
        protected: directories that must not be mounted, nor anything in them or above
            them (the repository's git directory).
        home_dirs: the user's home directories (default :func:`homes`).
        sockets: known engine and agent sockets (default :func:`known_sockets`).

    Returns:
        The source with symlinks resolved.

    Raises:
        UserError: the source does not exist, or is refused (one line saying why).
    """
    try:
        real = Path(source).resolve(strict=True)
        mode = real.stat().st_mode
    except FileNotFoundError:
        raise UserError(f"{_where(where)}{source} does not exist") from None
    except (OSError, RuntimeError) as exc:
        raise UserError(f"{_where(where)}{source}: cannot resolve: {exc}") from None
    text = str(real)
    shown = f"{source}" + (f" (-> {real})" if str(source) != text else "")
    hint = "mount only the folder or file the agent needs"
    if text == "/":
        raise UserError(f"{_where(where)}mounting / is refused", hint=hint)
    if stat.S_ISSOCK(mode):
        raise UserError(f"{_where(where)}{shown} is a socket; mounting sockets is refused "
                        f"(a socket such as Docker's hands over control of the host)",
                        hint=hint)
    for sock in known_sockets() if sockets is None else sockets:
        if _under(str(sock), text):
            raise UserError(f"{_where(where)}{shown} holds the socket {sock}; mounting it "
                            f"is refused", hint=hint)
    for home in homes() if home_dirs is None else home_dirs:
        if _under(str(home), text):
            what = "your home directory" if str(home) == text else "a parent of your home"
            raise UserError(f"{_where(where)}{shown} is {what}; mounting it is refused",
                            hint="mount only the folder or file the agent needs")
    for top in SYSTEM_SOURCE_TREES:
        if _under(text, top):
            raise UserError(f"{_where(where)}{shown} is in the system directory {top}; "
                            f"mounting it is refused", hint=hint)
    if text in SYSTEM_SOURCE_DIRS:
        raise UserError(f"{_where(where)}{shown} is a system directory; mounting it is "
                        f"refused", hint=hint)
    for guarded in protected:
        guarded_text = str(Path(guarded).resolve())
        if _under(text, guarded_text) or _under(guarded_text, text):
            raise UserError(f"{_where(where)}{shown} holds or is in the repository's git "
                            f"directory {guarded_text}; the agent must never write it",
                            hint=hint)
    return real


def engine_network_driver(name: str) -> str | None:
    """The driver of the engine's network ``name`` (``bridge``, ``host``, ``null``, ...),
    or None when the engine knows no such network. One API call; creates nothing.

    Raises:
        OperationFailed: the engine cannot be reached or answered an error.
    """
    import docker.errors

    from git_iterare.sandbox.docker_errors import docker_errors
    from git_iterare.sandbox.engine_client import client

    with docker_errors(f"inspect the network {name}"):
        try:
            network = client().networks.get(name)
        except docker.errors.NotFound:
            return None
        return str(network.attrs.get("Driver") or "")
