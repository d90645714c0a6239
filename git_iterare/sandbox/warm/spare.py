"""Spare network sidecars: started ahead of a run, locked, claimed by the next run.

Starting a container is most of the engine's share of a run's start (about 0.2 s here),
and a sandbox starts two: its network sidecar, then the agent's container in the
sidecar's network namespace. When runs follow one another in a repository, the run just
launched leaves a *spare*: a sidecar from git-iterare's own image with everything that does
not depend on the run (engine, image, Docker's default bridge, the folders the run trees
live in, its limits), which locks its namespace at once (nothing in or out) and waits, knowing no
policy or agent ids, for a run to claim it (container/sidecar, step 0b). The next run
claims it instead of starting a sidecar of its own, in two steps: :func:`take`, before
the run's trees exist, renames the spare's empty trees to the run's (the spare mounts
those, and nothing beside them), then :func:`give` hands it the run's host folders
(``out`` and ``signal``), policy, tree names and agent ids, from where the sidecar goes on
exactly as one started for that run.

A spare's trees are placeholders beside the runs' trees, named like them with
``.spare-<token>`` for the run id (an empty worktree and run gitdir folder, an empty
gitfile): a run that takes the spare renames them to its own paths, which keeps the
folders the sidecar has mounted.

Trust: a spare runs only git-iterare's image and code, is never joined by an agent
before it is claimed, and learns its policy from the host process of the run that claims
it, after that run was admitted (:func:`git_iterare.runner.guard.admit`), through a
folder mounted read-only in the sidecar and not at all in the agent's container. Unclaimed
it exits after ``docker.spare_seconds`` and the engine removes it (auto-remove).

On the host a spare is the folder ``<state>/spare-<token>/`` beside the runs' state
folders (``spec.out_dir`` is ``<state>/<run id>/out``), holding ``out/``, ``signal/`` and
``spare.json`` (:data:`SPARE_FORMAT`, container id, fingerprint, expiry). Claiming renames
the folder first: of two runs (or a run and ``cleanup``) that reach for one spare, one
gets it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import secrets
import shutil
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from git_iterare.errors import IterareError
from git_iterare.sandbox.spec import (
    LABEL_REPO,
    LABEL_ROLE,
    LABEL_RUN,
    LABEL_SIDECAR,
    SandboxSpec,
)

#: Version of a spare folder and of the claim; spares of another version are not claimed.
SPARE_FORMAT = 1
#: On a spare's container (and still on it once claimed): its token.
LABEL_SPARE = "dev.iterare.spare"
#: ... and the state folder its folder is in (:func:`spare_root`): what makes it this
#: repository's, as a work tree's path (``dev.iterare.repo``) is anyone's to claim
#: (``GIT_WORK_TREE``), and a copy of a ``.git`` names the original's tokens.
LABEL_SPARE_HOME = "dev.iterare.spare-home"
#: A spare is claimed only while it would wait at least this much longer (seconds): it
#: must still be there when it looks for the claim.
CLAIM_MARGIN = 5.0
#: A spare folder is swept this long after its spare gave up, or after it was made when
#: it never got its ``spare.json`` (a ``make`` cut short); a spare container that was made
#: but never started, this long after it was made (seconds).
SWEEP_AFTER = 60.0
#: ``docker.spare_seconds``: 0 (none), or from this many seconds (a spare must wait
#: longer than :data:`CLAIM_MARGIN` to be claimed)...
MIN_SECONDS = 10
#: ... up to an hour.
MAX_SECONDS = 3600
#: Largest ``spare.json`` read (bytes).
MAX_INFO_BYTES = 4096
PREFIX = "spare-"
#: Touched at every launch; a spare is left only when runs follow one another.
LAST_LAUNCH = "last-launch"


def usable(spec: SandboxSpec) -> bool:
    """Whether a spare can serve ``spec``: a local engine (the spare's folders are bind
    mounts) and Docker's default bridge, no ``docker.network`` or ``--docker-network``
    (a spare waiting on a user's network would stop ``docker compose down`` from
    removing it)."""
    return spec.volumes is None and not spec.network and not spec.networks


def spare_root(spec: SandboxSpec) -> Path:
    """The folder spare folders live in: the one holding the runs' state folders."""
    return spec.out_dir.parent.parent


def fingerprint(spec: SandboxSpec) -> str:
    """What a spare shares with every sandbox it may serve, as a sha256 hex digest: the
    engine, git-iterare's image id, the network, the repository, and the folders the run
    trees live in (mounted into the sidecar: by path and by inode, as a folder replaced
    since is not what the spare has mounted), and :data:`SPARE_FORMAT`."""
    from git_iterare.sandbox.engine import current

    parents = []
    # In the order the sidecar numbers them (/trees/0, /trees/1, ...).
    for parent in dict.fromkeys(Path(t).parent.resolve() for t in spec.owned):
        try:
            found = os.stat(parent)
            parents.append([str(parent), found.st_dev, found.st_ino])
        except OSError:
            parents.append([str(parent), None, None])
    data = {"v": SPARE_FORMAT, "engine": current().url, "image": spec.sidecar_image,
            "network": spec.network, "repo": spec.repo_path, "parents": parents}
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()


def _read_info(folder: Path) -> dict[str, Any] | None:
    """``spare.json`` of ``folder``, or None when missing, too large or malformed."""
    try:
        with open(folder / "spare.json", "rb") as fh:
            raw = fh.read(MAX_INFO_BYTES + 1)
        data = json.loads(raw) if len(raw) <= MAX_INFO_BYTES else None
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("v") != SPARE_FORMAT \
            or not isinstance(data.get("container"), str) \
            or not isinstance(data.get("fingerprint"), str) \
            or not isinstance(data.get("expires"), (int, float)):
        return None
    return data


def _spares(root: Path) -> Iterator[tuple[Path, dict[str, Any] | None]]:
    """Every spare folder in ``root`` with its ``spare.json`` (None while it is made, or
    when unreadable)."""
    try:
        entries = [e for e in os.scandir(root)
                   if e.name.startswith(PREFIX) and e.is_dir(follow_symlinks=False)]
    except OSError:
        return
    for entry in sorted(entries, key=lambda e: e.name):
        folder = Path(entry.path)
        yield folder, _read_info(folder)


def take_folder(folder: Path, as_name: str) -> Path | None:
    """Rename the spare ``folder`` to ``as_name`` beside it (only one caller can); the new
    path, or None when another caller took it first."""
    taken = folder.with_name(as_name)
    try:
        os.rename(folder, taken)
    except OSError:
        return None
    return taken


def waiting(spec: SandboxSpec) -> bool:
    """Whether a spare that a run like ``spec`` might claim waits in its state folder
    (one that will wait long enough; its fingerprint is not compared)."""
    now = time.time()
    return any(info is not None and info["expires"] - CLAIM_MARGIN > now
               for _folder, info in _spares(spare_root(spec)))


def placeholders(spec: SandboxSpec, token: str) -> list[Path]:
    """The placeholder trees of spare ``token`` for runs like ``spec``: its trees
    (``spec.owned``) named with ``.spare-<token>`` for the run id."""
    return [Path(tree).with_name(Path(tree).name.replace(spec.run_id, f".{PREFIX}{token}", 1))
            for tree in spec.owned]


@dataclass(frozen=True)
class Taken:
    """A spare taken for a run (:func:`take`): give it its run (:func:`give`) or drop it
    (:func:`drop`).

    Attributes:
        container: its container's id.
        token: its token.
        folder: its folder, renamed (``claim-<run>-spare-<token>``).
        trees: its sidecar's names of the trees it mounts (``ITERARE_TREES``), now the
            run's.
    """

    container: str
    token: str
    folder: Path
    trees: str


def take(spec: SandboxSpec) -> Taken | None:
    """Take a waiting spare for ``spec``'s run before its trees exist: its placeholder
    trees are renamed to the run's (``spec.owned``), so the run's trees are the folders
    its sidecar mounts. None when no spare can serve.

    A spare whose container is gone or not running is dropped and the next one tried.
    Never raises for a spare that cannot serve: the caller then starts a sidecar of its
    own.
    """
    from git_iterare.sandbox.sidecar import tree_mounts

    if not usable(spec) or any(os.path.lexists(t) for t in spec.owned):
        return None
    root, wanted, now = spare_root(spec), fingerprint(spec), time.time()
    for folder, info in _spares(root):
        if info is None or info["fingerprint"] != wanted \
                or info["expires"] - CLAIM_MARGIN < now:
            continue
        taken = take_folder(folder, f"claim-{spec.run_id}-{folder.name}")
        if taken is None:
            continue
        token = folder.name[len(PREFIX):]
        mine = placeholders(spec, token)
        try:
            if _running_spare(info["container"], token, root):
                for placeholder, tree in zip(mine, spec.owned, strict=True):
                    os.rename(placeholder, tree)
                return Taken(str(info["container"]), token, taken, tree_mounts(mine)[1])
        except OSError:
            _remove_spare_container(token, root)
        except BaseException:  # Ctrl-C meanwhile: the caller never learns of it
            _remove_spare_container(token, root)
            _remove_placeholders(taken)
            shutil.rmtree(taken, ignore_errors=True)
            raise
        _remove_placeholders(taken)
        shutil.rmtree(taken, ignore_errors=True)
    return None


def start(spec: SandboxSpec, fill: Callable[[], object], taken: Taken) -> str | None:
    """Start ``spec``'s sandbox in the spare ``taken`` for it: given its run
    (:func:`give`), then the agent's container made in its namespace and started
    (:meth:`git_iterare.sandbox.docker_backend.DockerBackend.start_in`); return the agent's
    container id, or None when the run's folders hold something (the spare is dropped:
    the caller starts a sandbox of its own).

    Raises:
        as :meth:`~git_iterare.sandbox.docker_backend.DockerBackend.start` (the spare is
        removed).
    """
    from git_iterare.sandbox.docker_backend import DockerBackend
    from git_iterare.sandbox.engine_client import client

    try:
        give(spec, taken, lambda container: _rename(container, f"{spec.name}-net"))
    except OSError:
        drop(taken)
        return None
    except BaseException:
        drop(taken)
        raise
    sidecar = client().containers.prepare_model({"Id": taken.container,
                                                 "Name": f"/{spec.name}-net"})
    return DockerBackend().start_in(spec, fill, sidecar)


def _rename(container_id: str, name: str) -> None:
    """Give a claimed spare its run's sidecar name; best effort."""
    import docker.errors

    from git_iterare.sandbox.engine_client import client

    with contextlib.suppress(docker.errors.DockerException, IterareError, OSError):
        client().api.rename(container_id, name)


def give(spec: SandboxSpec, taken: Taken, rename: Callable[[str], None]) -> None:
    """Give the spare ``taken`` for ``spec``'s run its run: its ``out`` and ``signal``
    folders become the run's, and the run's policy text (its DNS servers and host
    addresses completed), tree names and agent ids go into ``signal/claim``, all at once;
    ``rename`` then gives its container the run's name (while its ``claim-*`` folder still
    says it is being claimed: no sweep takes it for an orphan).

    Raises:
        OSError: a folder cannot be moved or written (the run's own folders hold
            something).
        UserError: the policy is too long to hand over.
    """
    from git_iterare.sandbox.hostnet import with_dns
    from git_iterare.sandbox.sidecar import policy_lines

    for mine, spares in ((spec.out_dir, taken.folder / "out"),
                         (spec.signal_dir(), taken.folder / "signal")):
        with contextlib.suppress(FileNotFoundError):
            mine.rmdir()  # made empty by the caller; anything in it stops the claim
        mine.parent.mkdir(parents=True, exist_ok=True)
        os.rename(spares, mine)
    policy = policy_lines(with_dns(spec))
    hand = spec.signal_dir() / "claim.new"
    hand.mkdir(mode=0o700)
    (hand / "policy").write_text(policy, encoding="utf-8")
    (hand / "trees").write_text(taken.trees, encoding="utf-8")
    (hand / "agent").write_text(f"{spec.agent_uid} {spec.agent_gid}\n")
    os.rename(hand, hand.with_name("claim"))  # the sidecar sees all three at once
    rename(taken.container)
    shutil.rmtree(taken.folder, ignore_errors=True)


def drop(taken: Taken) -> None:
    """Remove the spare ``taken`` that its run did not use; best effort. By its id:
    :func:`take` checked it is this repository's spare, and :func:`give` may have renamed
    it already."""
    _remove_container(taken.container)
    shutil.rmtree(taken.folder, ignore_errors=True)


def new_folder(spec: SandboxSpec) -> tuple[str, Path, SandboxSpec]:
    """A new spare's token, its folder (made, 0700, without ``spare.json``: nobody claims
    it yet), its placeholder trees (made empty, like ``spec``'s trees) and the spec its
    sidecar is made from (:func:`labels`, :func:`environment`).

    Raises:
        OSError: the folder or a placeholder cannot be made.
    """
    token = secrets.token_hex(6)
    folder = spare_root(spec) / f"{PREFIX}{token}"
    folder.mkdir(mode=0o700, parents=True)
    trees = placeholders(spec, token)
    (folder / "trees").write_text("".join(f"{t}\n" for t in trees), encoding="utf-8")
    for tree, like in zip(trees, spec.owned, strict=True):
        if Path(like).is_dir():
            tree.mkdir()
        else:
            tree.touch(exist_ok=False)
    spare_spec = dataclasses.replace(spec, out_dir=folder / "out", owned=tuple(trees),
                                     name=f"iterare-{PREFIX}{token}", run_id="")
    return token, folder, spare_spec


def _remove_placeholders(folder: Path) -> None:
    """Remove the placeholder trees a spare's folder (in the state folder ``<iterare>/state``)
    names (``trees``), where they are still empty: a spare nobody took. Each is looked for
    by its folder's and its own name in that ``<iterare>`` folder (where run trees live):
    a copy of a repository's ``.git`` names the original's placeholders, which are the
    original's spare's, and holds copies of its own."""
    try:
        listed = (folder / "trees").read_text(encoding="utf-8").splitlines()
    except OSError:
        return
    home = folder.absolute().parent.parent
    for line in listed:
        named = Path(line)
        if not named.name.startswith(f".{PREFIX}") or named.parent.name in ("", ".", ".."):
            continue
        if (home / named.parent.name).is_symlink():
            continue  # a copy's folder that leads elsewhere: not this spare's
        _remove_if_empty(home / named.parent.name / named.name)


def _remove_if_empty(path: Path) -> None:
    """Remove the placeholder ``path`` when it is still as made: an empty folder or an
    empty file (never a symlink, never followed); best effort."""
    with contextlib.suppress(OSError):
        if path.is_dir() and not path.is_symlink():
            path.rmdir()  # only when empty
        elif path.is_file() and not path.is_symlink() and path.stat().st_size == 0:
            path.unlink()


def labels(spec: SandboxSpec, token: str) -> dict[str, str]:
    """The labels of spare ``token``'s container (no run's, until claimed)."""
    return {LABEL_RUN: "", LABEL_REPO: spec.repo_path, LABEL_ROLE: "sidecar",
            LABEL_SPARE: token, LABEL_SPARE_HOME: str(spare_root(spec))}


def environment(seconds: int) -> dict[str, str]:
    """A spare sidecar's environment: it waits ``seconds`` for its claim."""
    return {"ITERARE_SPARE": str(seconds), "ITERARE_TREES": ""}


#: A ``claim-*`` or ``sweep-*`` folder this old (seconds) was left by a process killed
#: while it claimed or removed a spare (either takes well under a second).
LEFTOVER_AGE = 10.0


def _sweep_leftovers(root: Path) -> None:
    """Remove what a killed process left while it claimed or removed a spare in the state
    folder ``root``: the
    ``claim-<run>-spare-<token>`` or ``sweep-spare-<token>`` folder and the spare's
    container (the run it was claimed for never learnt of it, nor started its agent)."""
    now = time.time()
    try:
        entries = [e for e in os.scandir(root) if e.name.startswith(("claim-", "sweep-"))
                   and PREFIX in e.name and e.is_dir(follow_symlinks=False)]
    except OSError:
        return
    for entry in entries:
        try:
            # ctime: a rename sets it (the mtime of a spare taken after it waited a while
            # would be that of when it was made).
            if entry.stat(follow_symlinks=False).st_ctime > now - LEFTOVER_AGE:
                continue
        except OSError:
            continue
        _remove_spare_container(entry.name.rsplit(PREFIX, 1)[1], root)
        _remove_placeholders(Path(entry.path))
        shutil.rmtree(entry.path, ignore_errors=True)


def _ours(labels: dict[str, str] | None, token: str, root: Path) -> bool:
    """Whether a container with ``labels`` is the spare ``token`` whose folder is in the
    state folder ``root`` (:data:`LABEL_SPARE_HOME`): a copy of a repository's ``.git``
    (another user's, say) names the same tokens as the original, whose spares it must
    never claim or remove."""
    labels = labels or {}
    return bool(token) and labels.get(LABEL_SPARE) == token \
        and labels.get(LABEL_SPARE_HOME) == str(root)


def _running_spare(container_id: str, token: str, root: Path) -> bool:
    """Whether ``container_id`` runs and is the spare ``token`` of the state folder
    ``root`` (a stopped one is removed; another's is never touched)."""
    import docker.errors

    from git_iterare.sandbox.engine_client import client

    try:
        state = client().api.inspect_container(container_id)
    except (docker.errors.DockerException, IterareError, OSError):
        return False
    if not _ours((state.get("Config") or {}).get("Labels"), token, root):
        return False  # not the spare: never removed here
    if (state.get("State") or {}).get("Running"):
        return True
    _remove_container(container_id)
    return False


def _remove_container(container_id: str) -> None:
    """Remove a spare's container; best effort (auto-remove takes one that exited)."""
    import docker.errors

    from git_iterare.sandbox.engine_client import client

    with contextlib.suppress(docker.errors.DockerException, IterareError, OSError):
        client().api.remove_container(container_id, force=True, v=True)


def container_name(token: str) -> str:
    """The name of the spare ``token``'s container (until a run claims it)."""
    return f"iterare-{PREFIX}{token}-net"


def _remove_spare_container(token: str, root: Path) -> bool:
    """Remove the container of spare ``token`` of the state folder ``root`` (found by
    name, checked by its labels: :func:`_ours`); whether there was one. Best effort."""
    import docker.errors

    from git_iterare.sandbox.engine_client import client

    try:
        state = client().api.inspect_container(container_name(token))
    except (docker.errors.DockerException, IterareError, OSError):
        return False
    if not _ours((state.get("Config") or {}).get("Labels"), token, root):
        return False
    _remove_container(str(state.get("Id")))
    return True


def wanted(spec: SandboxSpec, seconds: int, claimed: bool) -> bool:
    """Whether the run just launched for ``spec`` should leave a spare: spares are on
    (``seconds``), and this run claimed one or another run launched in this repository
    within ``seconds`` (runs follow one another). Notes this launch's time."""
    if seconds <= 0 or not usable(spec):
        return False
    mark = spare_root(spec) / LAST_LAUNCH
    try:
        recent = time.time() - mark.stat().st_mtime < seconds
    except OSError:
        recent = False
    with contextlib.suppress(OSError):
        mark.touch()
    return claimed or recent


def make(spec: SandboxSpec, seconds: int) -> str | None:
    """Start a spare sidecar that sandboxes like ``spec`` (a run's just started: its
    trees exist) can claim for ``seconds``; return its container id, or None when one is
    waiting already.

    Also sweeps spare folders that gave up, and spare containers of this repository that
    never started (a ``make`` cut short).

    Raises:
        UserError, OperationFailed: the engine refused (then nothing is left behind).
        OSError: the folder cannot be made.
    """
    from git_iterare.sandbox.docker_errors import docker_errors
    from git_iterare.sandbox.sidecar import create_sidecar

    root, wanted_print, now = spare_root(spec), fingerprint(spec), time.time()
    for folder, info in list(_spares(root)):
        if info is not None and info["fingerprint"] == wanted_print \
                and info["expires"] - CLAIM_MARGIN > now + 1:
            return None
        try:
            # Cut short while made, gave up a while ago, or made for settings that are
            # no longer these (another image or network): nobody will claim it.
            stale = folder.stat().st_mtime < now - SWEEP_AFTER if info is None else \
                info["expires"] + SWEEP_AFTER < now or info["fingerprint"] != wanted_print
        except OSError:  # another process took it meanwhile
            continue
        if stale and (taken := take_folder(folder, f"sweep-{folder.name}")) is not None:
            _remove_spare_container(folder.name[len(PREFIX):], root)
            _remove_placeholders(taken)
            shutil.rmtree(taken, ignore_errors=True)
    _sweep_unstarted(root)
    _sweep_leftovers(root)
    container = None
    token, folder, spare_spec = new_folder(spec)
    try:
        container = create_sidecar(spare_spec, environment(seconds), name=container_name(token),
                                   auto_remove=True, labels=labels(spec, token))
        with docker_errors(f"start the spare sidecar {spare_spec.name}"):
            container.start()
        info = {"v": SPARE_FORMAT, "container": container.id, "fingerprint": wanted_print,
                "expires": time.time() + seconds}
        (folder / "spare.json.new").write_text(json.dumps(info), encoding="utf-8")
        os.rename(folder / "spare.json.new", folder / "spare.json")
    except BaseException:
        if container is not None:
            _remove_container(container.id)
        _remove_placeholders(folder)
        shutil.rmtree(folder, ignore_errors=True)
        raise
    return str(container.id)


def _sweep_unstarted(root: Path) -> None:
    """Remove spare containers of the state folder ``root`` that were made but never
    started (a :func:`make` cut short; one that ran and ended is removed by the engine,
    and a claimed one is a run's sidecar, never left merely created)."""
    import docker.errors

    from git_iterare.sandbox.engine_client import client

    with contextlib.suppress(docker.errors.DockerException, IterareError, OSError):
        for found in client().api.containers(all=True, filters={
                "label": [LABEL_SPARE, f"{LABEL_SPARE_HOME}={root}"],
                "status": ["created"]}):
            if time.time() - float(found.get("Created") or 0) > SWEEP_AFTER:  # not being made
                _remove_container(found["Id"])


def remove_all(root: Path, repo_path: str) -> int:
    """Remove every spare waiting in ``root`` (folders, and their containers, found by
    name and checked by label), and the spare containers of the repository at
    ``repo_path`` whose folder is gone (nobody can claim them); return how many
    containers were removed. Spares already claimed are runs' sidecars and stay; nothing
    is removed when ``root`` is not this user's (another user's repository, reached
    through ``GIT_DIR`` or ``GIT_COMMON_DIR``: its spares are its owner's)."""
    try:
        owner = os.stat(root).st_uid
    except FileNotFoundError:
        owner = os.getuid()  # none waits; the orphan sweep checks each spare's label
    except OSError:
        return 0
    if owner != os.getuid():
        return 0
    _sweep_leftovers(root)
    removed = 0
    for folder, _info in list(_spares(root)):
        taken = take_folder(folder, f"sweep-{folder.name}")
        if taken is None:
            continue
        removed += _remove_spare_container(folder.name[len(PREFIX):], root)
        _remove_placeholders(taken)
        shutil.rmtree(taken, ignore_errors=True)
    _remove_stray_placeholders(root)
    return removed + _remove_orphans(root, repo_path)


def _remove_stray_placeholders(root: Path) -> None:
    """Remove the empty placeholder trees (``.spare-<token>``) beside the state folder
    ``root`` that no spare folder in it names by its token any more (``spare-<token>``, or
    being claimed or swept): left when a spare's folder was removed by hand or by a
    process killed meanwhile. A spare's folder is made before its placeholders, and its
    placeholders are renamed or removed before its folder goes; one made after ``root``
    was read is younger than :data:`SWEEP_AFTER`, and left."""
    try:
        tokens = {e.name.rsplit(PREFIX, 1)[1] for e in os.scandir(root) if PREFIX in e.name}
    except OSError:
        return
    folders: list[str] = []
    with contextlib.suppress(OSError):
        folders = [e.path for e in os.scandir(root.parent)  # where run trees live
                   if e.is_dir(follow_symlinks=False) and e.name != root.name]
    for folder in folders:
        with contextlib.suppress(OSError):
            for entry in os.scandir(folder):
                token = entry.name[len(f".{PREFIX}"):].split(".", 1)[0]
                if not entry.name.startswith(f".{PREFIX}") or token in tokens:
                    continue
                with contextlib.suppress(OSError):  # gone meanwhile: the next one
                    if entry.stat(follow_symlinks=False).st_ctime < time.time() - SWEEP_AFTER:
                        _remove_if_empty(Path(entry.path))


def _remove_orphans(root: Path, repo_path: str) -> int:
    """Remove the unclaimed spare containers of the repository at ``repo_path`` that no
    folder in ``root`` names (deleted by hand); return how many. One an agent's container
    names as its sidecar is a run's, whatever its name (its renaming failed)."""
    import docker.errors

    from git_iterare.sandbox.engine_client import client

    try:
        names = {e.name for e in os.scandir(root)}
    except OSError:
        names = set()
    removed = 0
    with contextlib.suppress(docker.errors.DockerException, IterareError, OSError):
        found_spares = client().api.containers(all=True, filters={
            "label": [LABEL_SPARE, f"{LABEL_REPO}={repo_path}"]})
        joined = {(c.get("Labels") or {}).get(LABEL_SIDECAR) for c in client().api.containers(
            all=True, filters={"label": [LABEL_SIDECAR, f"{LABEL_REPO}={repo_path}"]})}
        for found in found_spares:
            token = ((found.get("Labels") or {}).get(LABEL_SPARE) or "")
            named = [n.lstrip("/") for n in found.get("Names") or ()]
            if not _ours(found.get("Labels"), token, root):
                continue  # another state folder's (a copy of this .git, or GIT_DIR)
            if container_name(token) not in named or found["Id"] in joined:
                continue  # claimed: a run's sidecar now
            if any(n.endswith(f"{PREFIX}{token}") for n in names):
                continue  # its folder is there: waiting, or being claimed
            _remove_container(found["Id"])
            removed += 1
    return removed
