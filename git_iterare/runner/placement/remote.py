"""The ``remote`` placement: an engine that sees none of this machine's files
(``ssh://``, ``tcp://``).

The run's branch, worktree and gitdir are made on the host as for a local run (the user's
view of the run, and what the importer imports from), but the worktree stays empty until
the run ends (:func:`git_iterare.runner.workspace.make_run` with ``on_engine``). The
engine gets what it needs in the run's volumes (:mod:`git_iterare.sandbox.volumes`),
through the Engine API only: the objects, the run gitdir and the include files in one
archive, the base checked out there (:mod:`.ship`); the prompt is a file put into the
agent's container before it starts.

Results come out when the run ends (:meth:`Remote.fetch`, by whichever command notices
first): the worktree as its change (:mod:`.delta`: the paths that differ from the base,
applied to the base checked out on the host; the whole worktree when the engine cannot
list them) and the run gitdir as an archive, unpacked into the host's worktree and run
gitdir without trusting them (:func:`.tarball.extract`), then imported and committed by
the same code as a local run's. ``git iterare diff RUN`` of a
live run unpacks the worktree into a scratch folder and diffs a snapshot of it
(:meth:`Remote.live_tree`).
"""

from __future__ import annotations

import contextlib
import re
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from git_iterare import boundedfs
from git_iterare.errors import OperationFailed, UserError
from git_iterare.git.repo import Repo
from git_iterare.runner.placement.base import PlacementKind, RunTrees
from git_iterare.runner.placement.ship import cache_key, checkout_command, ship, tmp_root
from git_iterare.runner.placement.spares import record_volumes, recorded_spare
from git_iterare.runner.placement.tarball import (
    MAX_OUT_FILE_BYTES,
    Counted,
    FetchTooLarge,
    extract,
    members,
    replace_contents,
    write_new,
)
from git_iterare.runs.extra import Fetched, RunExtra
from git_iterare.sandbox.spec import (
    GITDIR_PATH,
    LABEL_REPO,
    LABEL_RUN,
    OUT_PATH,
    SIDECAR,
    WORK_PATH,
    VolumeTrees,
    sandbox_name,
)

if TYPE_CHECKING:
    from git_iterare.git.checkout import Entry
    from git_iterare.runner.workspace import RunWorkspace
    from git_iterare.runs.record import RunRecord
    from git_iterare.sandbox.dockertypes import Container
    from git_iterare.sandbox.spec import Mount


def _labels(repo: Repo, record: RunRecord) -> dict[str, str]:
    """The labels of a run's volumes and porters: its run and repository."""
    return {LABEL_RUN: record.id, LABEL_REPO: str(repo.main_work_tree)}


class Remote:
    """Trees in engine volumes, shipped in and fetched out through the Engine API."""

    @property
    def kind(self) -> PlacementKind:
        return "remote"

    def check(self, repo: Repo, base: str, mounts: Sequence[Mount]) -> None:
        """Refuse what a run on a remote engine cannot do: mounts of host paths
        (``[mounts] volumes``), and an initialized submodule whose path holds a tab or a
        newline (the engine's checkout reads their list a line each).

        Raises:
            UserError: naming the first mount or submodule.
        """
        for mount in mounts:
            raise UserError(f"the mount of {mount.host_path} cannot be used: the Docker "
                            "engine is remote and sees none of this machine's files",
                            hint="drop it from [mounts] volumes, or use a local Docker engine")
        from git_iterare.git.checkout import submodules

        for sub in submodules(repo.common_dir, base):
            if sub.gitdir is not None and ("\n" in sub.path or "\t" in sub.path):
                raise UserError(f"submodule {sub.path!r} has a tab or newline in its path, "
                                "which runs on a remote Docker engine cannot check out",
                                hint="use a local Docker engine for this repository")

    def check_host_folder(self, what: str) -> None:
        """Refuse: a remote engine sees none of this machine's folders.

        Raises:
            UserError: always, naming ``what`` and the engine.
        """
        from git_iterare.sandbox.engine import current

        raise UserError(f"{what} needs a local Docker engine; {current().label} is remote "
                        "and sees none of this machine's files")

    def make(self, repo: Repo, record: RunRecord, files: dict[str, bytes]) -> RunTrees:
        """The run's branch, worktree and gitdir on the host (empty: the engine checks the
        base out), and its volumes on the engine (a spare worktree's when its record names
        one); :attr:`RunTrees.fill` ships the run's code in (its ``facts`` then hold
        ``shipped``, what crossed the wire).

        Raises:
            as :func:`git_iterare.runner.workspace.make_run`; OperationFailed: the engine
                refused.
        """
        from git_iterare.runner import workspace as wsp
        from git_iterare.sandbox import volumes as engine

        base = str(record.base_commit)
        spare = recorded_spare(record) is not None
        work, git = record_volumes(record)
        key = cache_key(repo)
        trees = VolumeTrees(work=work, git=git, cache=engine.cache_volume(key), files=files)
        workspace = wsp.make_run(repo, record.id, base, on_engine=True)
        labels = _labels(repo, record)
        make_volumes(repo, trees, labels, spare=spare)
        facts = RunExtra()
        image = str((record.extra or {}).get("sidecar_image") or "")
        ids = (workspace.agent_uid, workspace.agent_gid)

        def fill() -> None:
            shipped = ship(repo, record.id, base, trees, image, labels, ids, spare=spare)
            facts["shipped"] = shipped.to_json()
            if shipped.converted:
                _note_converted(repo, workspace, shipped.converted)

        return RunTrees(workspace=workspace, fill=fill, volumes=trees,
                        wrapper=tuple(checkout_command("agent")), facts=facts)

    def release(self, repo: Repo, record: RunRecord) -> None:
        """Nothing: the host's copies of a remote run's trees are always the user's."""

    def fetch(self, repo: Repo, record: RunRecord, workspace: RunWorkspace) -> list[str]:
        """Bring the run's trees back: its worktree as its change (:func:`_fetch_change`;
        recorded in ``extra.fetched``), or when the engine cannot list it, its whole
        worktree; its gitdir on the engine replaces the host's copy
        (:func:`.tarball.extract`: nested repositories disabled, the
        worktree's files larger than :data:`~git_iterare.limits.MAX_OBJECT_BYTES`, which
        the automatic commit leaves out anyway, not written but kept as not committed:
        :func:`~git_iterare.runner.workspace.keep_not_fetched`), the run gitdir made inert
        (:func:`~git_iterare.runner.livetree.inert_gitdir`), and the sidecar's output
        lands in the run's state folder. A tree over
        :data:`~git_iterare.limits.MAX_FETCH_BYTES` is not fetched: for the worktree,
        the host's copy stays marked as on the engine
        (:func:`~git_iterare.runner.workspace.worktree_on_engine`: the agent's commits are
        imported, nothing is committed from it); the run gitdir stays as it was made.
        Call with the run's lock held, on the run's engine.

        Returns:
            Notes for the user (special files left out; trees that are gone or too large).

        Raises:
            OperationFailed: the engine cannot be reached or refused; a bad archive.
        """
        from git_iterare.limits import MAX_OBJECT_BYTES
        from git_iterare.runner.livetree import inert_gitdir
        from git_iterare.runner.workspace import (
            fill_worktree,
            keep_not_fetched,
            on_engine_path,
            run_gitdir_config,
            worktree_on_engine,
        )

        _fetch_out(repo, record)
        agent = _agent_container(record)
        if agent is not None and not _started(agent):
            # Its trees on the engine may be empty (the checkout runs beside the launch):
            # the base is the run's result, checked out here if it was not.
            if worktree_on_engine(workspace):
                fill_worktree(repo, workspace)
            return ["its agent never started; its base is kept"]
        with _source(record) as source:
            if source is None:
                if worktree_on_engine(workspace):  # the host's copy was never filled
                    fill_worktree(repo, workspace)
                return ["its files on the Docker engine are gone; what the host has is kept"]
            from git_iterare.sandbox.volumes import get_archive

            container, work_path, git_path = source
            notes = []
            fetched = True  # the worktree: when not, only the agent's commits are kept
            change = _fetch_change(repo, record, workspace)
            brought = Fetched(bytes=0, worktree="none", changed=0, deleted=0)
            if change is not None:
                notes += change.notes
                fetched = change.fetched
                brought = Fetched(bytes=change.size, changed=change.changed,
                                  deleted=change.deleted,
                                  worktree="change" if change.fetched else "none")
            for host, path, what in ((Path(workspace.worktree), work_path, "worktree"),
                                     (Path(workspace.gitdir), git_path, "git directory")):
                work = what == "worktree"
                if work and change is not None:
                    continue
                skip = (".git",) if work else ()
                scratch = Path(tempfile.mkdtemp(prefix=f".{record.id}.fetch-",
                                                dir=host.parent))
                counted = Counted(get_archive(container, path))
                try:
                    got = extract(counted, scratch, skip_top=skip,
                                  max_file=MAX_OBJECT_BYTES if work else None)
                except FetchTooLarge as exc:
                    notes.append(_not_fetched(what, exc))
                    fetched = fetched and not work
                    continue
                else:
                    notes += got.notes
                    if work:
                        brought["worktree"] = "whole"
                        keep_not_fetched(workspace, got.left_out)
                    else:
                        inert_gitdir(scratch, run_gitdir_config(repo))
                    replace_contents(host, scratch, keep=skip)
                finally:
                    brought["bytes"] += counted.size
                    if scratch.exists():
                        boundedfs.remove_tree(scratch)
            if fetched:
                on_engine_path(workspace).unlink(missing_ok=True)
        from git_iterare.runs.store import RunStore

        RunStore(repo).update(record.id, lambda r: r.with_extra(fetched=brought),
                              f"{record.id} fetched from its engine")
        return notes[:100]

    def give_back(self, repo: Repo, record: RunRecord, workspace: RunWorkspace,
                  sandbox: str | None = None) -> None:
        """Nothing: its trees came back as the user's, inert (:meth:`fetch`)."""

    def give_again(self, repo: Repo, record: RunRecord, workspace: RunWorkspace,
                   sandbox: str, head: str | None) -> None:
        """The round's ``head`` into the run's gitdir on the engine: what
        :func:`~git_iterare.runner.importer.hand_round` gives the host's copy (the pack of
        the run's commits, the branch, ``HEAD``, the index), put into its volume as the
        agent's files. The engine's worktree is as the agent left it.

        Raises:
            OperationFailed: the engine refused or cannot be reached.
            ExternalError: git failed to pack.
        """
        import io
        import tarfile

        from git_iterare.runner.importer import hand_round
        from git_iterare.runner.placement.ship import add_file
        from git_iterare.sandbox import volumes as engine

        if not head:
            return
        written = hand_round(repo, workspace, head)
        owner = (workspace.agent_uid, workspace.agent_gid)
        buffer = io.BytesIO()
        top = GITDIR_PATH.strip("/")
        with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
            for rel in written:
                add_file(tar, f"{top}/{rel}", (workspace.gitdir / rel).read_bytes(),
                         owner=owner)
        _, git = record_volumes(record)
        image = str((record.extra or {}).get("sidecar_image") or "")
        with engine.Porter(image, {git: (GITDIR_PATH, False)}, {LABEL_RUN: record.id}) as porter:
            porter.put("/", buffer.getvalue())

    def ended_by_engine(self, record: RunRecord) -> bool:
        """Whether the run's network sidecar, which only git-iterare removes, is not
        running: the engine restarted, or the sandbox was killed there."""
        from git_iterare.sandbox.volumes import find_container

        sidecar = find_container(f"{sandbox_name(record.id)}-net")
        return sidecar is None or sidecar.status != "running"

    def clear(self, record: RunRecord) -> bool:
        """Remove the run's volumes, and whatever still mounts them (porters, or a
        sidecar a launch cut short left).

        Raises:
            OperationFailed: the engine refused or cannot be reached.
        """
        from git_iterare.sandbox.volumes import remove_volumes_and_users

        remove_volumes_and_users(record_volumes(record))
        return True

    def note_where(self, repo: Repo, record: RunRecord) -> None:
        """Nothing: the run's engine is all there is to know, recorded at its start."""

    def live_tree(self, repo: Repo, record: RunRecord) -> str | None:
        """The tree of the live run's worktree as it is now: fetched into a scratch
        folder and snapshot as its end would commit it (the host's copy is left as it
        is).

        Raises:
            OperationFailed: the run's files are gone, or the engine cannot be reached.
        """
        from git_iterare.git import checkout, safegit
        from git_iterare.limits import MAX_OBJECT_BYTES
        from git_iterare.runner.ownership import engine_of
        from git_iterare.runner.workspace import checkout_map_path, not_fetched_skips, open_run
        from git_iterare.sandbox.engine import using
        from git_iterare.sandbox.volumes import get_archive

        ws = open_run(repo, record.id, str(record.base_commit))
        scratch = Path(tempfile.mkdtemp(prefix=f"live-{record.id}-", dir=tmp_root(repo)))
        try:
            with using(engine_of(record)), _source(record) as source:
                if source is None:
                    raise OperationFailed(f"run {record.id}'s files on the Docker engine are "
                                          "gone")
                got = extract(get_archive(source[0], source[1]), scratch, skip_top=(".git",),
                              max_file=MAX_OBJECT_BYTES)
            plan = checkout.plan_snapshot(repo.common_dir, scratch, ws.base_commit,
                                          checkout_map_path(ws), ws.ref, commit=False)
            with safegit.safe_git(repo.common_dir, scratch, attributes=plan.attributes,
                                  filters=plan.filter_text,
                                  skipped=not_fetched_skips(got.left_out),
                                  scan=plan.scan) as view:
                return str(view.snapshot(ws.base_commit, drop=ws.included,
                                         drop_blobs=ws.included_blobs,
                                         unchanged=plan.unchanged, gitlinks=plan.gitlinks))
        finally:
            boundedfs.remove_tree(scratch)


def make_volumes(repo: Repo, trees: VolumeTrees, labels: Mapping[str, str], *,
                 spare: bool = False) -> None:
    """Make a new run's volumes (and the repository's object cache when it has none)
    before any container names them (the engine would make them unlabelled); a spare's
    (``spare``) exist already.

    Raises:
        OperationFailed: the engine refused or cannot be reached.
    """
    from git_iterare.sandbox import volumes as engine

    engine.ensure_volume(trees.cache, {engine.LABEL_VOLUME: "cache",
                                       engine.LABEL_CACHE: cache_key(repo),
                                       LABEL_REPO: str(repo.main_work_tree)})
    if not spare:
        engine.ensure_volume(trees.work, {**labels, engine.LABEL_VOLUME: "work"})
        engine.ensure_volume(trees.git, {**labels, engine.LABEL_VOLUME: "git"})


def _not_fetched(what: str, exc: FetchTooLarge) -> str:
    """The note of a run's ``what`` (``worktree``, ``git directory``) too large to fetch."""
    return (f"its {what} was not fetched from the Docker engine: {exc.message}; "
            + ("only its commits are kept" if what == "worktree" else
               "its commits are not imported, its files are committed"))


@dataclass
class _Change:
    """What :func:`_fetch_change` brought: notes for the user, whether the worktree came
    back, bytes read, paths brought back and removed."""

    notes: list[str]
    fetched: bool
    size: int = 0
    changed: int = 0
    deleted: int = 0


def _fetch_change(repo: Repo, record: RunRecord, workspace: RunWorkspace) -> _Change | None:
    """Bring the run's worktree back as its change (:mod:`.delta`): the base checked out
    into the host's worktree, the change applied. Its worktree does not come back when
    the change is over the fetch limits (then only the agent's commits are kept). None
    when the engine could not list the change (the caller fetches the whole worktree).

    Raises:
        OperationFailed: the engine refused or cannot be reached; a bad archive; the
            worktree is not registered with git.
        ExternalError: git (or a filter of the user's) failed to check the base out.
    """
    from git_iterare.limits import MAX_OBJECT_BYTES
    from git_iterare.runner.placement import delta
    from git_iterare.runner.placement.repack import reading
    from git_iterare.runner.placement.ship import known_cache_key
    from git_iterare.runner.workspace import fill_worktree, keep_not_fetched
    from git_iterare.sandbox import volumes as engine

    key, image = known_cache_key(repo), str((record.extra or {}).get("sidecar_image") or "")
    if key is None or not image or not record.base_commit:
        return None
    work, git = record_volumes(record)
    base = str(record.base_commit)
    host = Path(workspace.worktree)
    try:
        volumes = delta.porter_volumes(work, git, engine.cache_volume(key))
        with reading(repo), engine.Porter(image, volumes, {LABEL_RUN: record.id},
                                          command=delta.command(base, MAX_OBJECT_BYTES,
                                                                _shipped_submodules(record)),
                                          user=f"{workspace.agent_uid}:{workspace.agent_gid}",
                                          keep=True) as porter:
            delta.put_converted(porter, _converted(repo, workspace))
            change = delta.collect(porter, host.parent)
    except delta.NoChange:
        return None
    except FetchTooLarge as exc:
        return _Change([_not_fetched("worktree", exc)], False)
    try:
        fill_worktree(repo, workspace)
        delta.apply(host, change)
    finally:
        if change.staged.exists():
            boundedfs.remove_tree(change.staged)
    keep_not_fetched(workspace, change.left_out)
    return _Change(change.notes, True, change.fetched_bytes, change.changed,
                   len(change.deleted))


def _note_converted(repo: Repo, workspace: RunWorkspace, converted: Sequence[Entry]
                    ) -> None:
    """Record in the run's checkout map the bytes the engine was sent for the files the
    host's filters convert (their ``raw``), as what its checkout wrote."""
    import dataclasses

    from git_iterare.git import checkout
    from git_iterare.runner.workspace import checkout_map_path

    path = checkout_map_path(workspace)
    found = checkout.read_map(path, repo.common_dir)
    if found is None:
        return
    raws = {e.path: e for e in converted}
    entries = [dataclasses.replace(e, raw=raws.pop(e.path).raw) if e.path in raws else e
               for e in found.entries]
    # (the submodules' files are not in an engine's map: theirs are added)
    checkout.write_map(path, dataclasses.replace(found, entries=(*entries, *raws.values())))


def _converted(repo: Repo, workspace: RunWorkspace) -> list[Entry]:
    """The entries of the run's checkout map whose bytes on the engine are not their
    blob's (:func:`_note_converted`)."""
    from git_iterare.git import checkout
    from git_iterare.runner.workspace import checkout_map_path

    found = checkout.read_map(checkout_map_path(workspace), repo.common_dir)
    return [e for e in found.entries if e.raw not in (e.blob, "-")] if found else []


def _shipped_submodules(record: RunRecord) -> list[tuple[str, str]]:
    """``(commit, path)`` of the submodules the run's engine checked out (its record's
    ``extra.shipped.submodules``; those of a bad shape left out)."""
    from git_iterare.git.runrefs import HEX40

    shipped = (record.extra or {}).get("shipped")
    listed = shipped.get("submodules") if isinstance(shipped, dict) else None
    return [(sub[0], sub[1]) for sub in listed or () if isinstance(sub, list) and len(sub) == 2
            and all(isinstance(s, str) for s in sub) and HEX40.fullmatch(sub[0])
            and sub[1] and not sub[1].startswith("-")] if isinstance(listed, list) else []


def _started(container: Container) -> bool:
    """Whether the engine ever started ``container``."""
    from git_iterare.sandbox.docker_backend import container_info

    return container_info(container).started


def _agent_container(record: RunRecord) -> Container | None:
    """The run's agent container on its engine when it is this run's (labels), or None."""
    from git_iterare.sandbox.volumes import find_container

    for name in filter(None, (record.container, sandbox_name(record.id))):
        found = find_container(name)
        if found is not None and (found.labels or {}).get(LABEL_RUN) == record.id:
            return found
    return None


@contextlib.contextmanager
def _source(record: RunRecord) -> Iterator[tuple[Container, str, str] | None]:
    """Where the run's trees can be read: (container, worktree path, gitdir path) -- the
    agent's container, else a porter over the run's volumes; None when both are gone."""
    from git_iterare.sandbox import volumes as engine

    agent = _agent_container(record)
    if agent is not None:
        yield agent, WORK_PATH, GITDIR_PATH
        return
    work, git = record_volumes(record)
    if not (engine.volume_exists(work) and engine.volume_exists(git)):
        yield None
        return
    image = str((record.extra or {}).get("sidecar_image") or "")
    with engine.Porter(image, {work: ("/work", True), git: ("/git", True)},
                       {LABEL_RUN: record.id}) as porter:
        yield porter.made, "/work", "/git"


def _fetch_out(repo: Repo, record: RunRecord) -> None:
    """The sidecar's output (status, DNS log, refused connections) into the run's state
    folder, after asking a running sidecar for its report."""
    from git_iterare.runner.paths import state_dir
    from git_iterare.sandbox.volumes import exec_in, find_container, get_archive

    sidecar = find_container(f"{sandbox_name(record.id)}-net")
    if sidecar is None or (sidecar.labels or {}).get(LABEL_RUN) != record.id:
        return
    if sidecar.status == "running":
        exec_in(sidecar, [SIDECAR, "report"])
    out = state_dir(repo, record.id) / "out"
    out.mkdir(parents=True, exist_ok=True)
    for member, tar in members(get_archive(sidecar, OUT_PATH)):
        name = member.name.rsplit("/", 1)[-1]
        if (member.isfile() and member.size <= MAX_OUT_FILE_BYTES
                and re.fullmatch(r"[a-z]+\.(json|log)", name)):
            target = out / name
            with contextlib.suppress(FileNotFoundError):
                target.unlink()
            write_new(target, tar.extractfile(member), 0o644)


def remove_cache(repo: Repo) -> list[str]:
    """``git iterare cleanup --cache``: remove this repository's object cache on the
    current engine, and its spare worktrees there. Runs still using the cache keep it
    (the engine refuses), which is an error.

    Returns:
        The names of the volumes removed (none when there was no cache).

    Raises:
        OperationFailed: the engine refused (a run uses it) or cannot be reached.
    """
    from git_iterare.runner.placement.ship import known_cache_key
    from git_iterare.runner.placement.spares import drop_all
    from git_iterare.sandbox.volumes import cache_volumes, remove_volumes

    key = known_cache_key(repo)
    if key is None:
        return []
    drop_all(repo, key)  # a spare's maker reads the cache
    return remove_volumes(cache_volumes(key))
