"""Sharing records with a remote: ``git iterare push`` and ``git iterare fetch``.

The transport is git's own (``git fetch`` / ``git push`` through :mod:`git_iterare.proc`), so
remotes, URLs, credentials and SSH work as they do for the user's branches. Fetch lands in a
private namespace, ``refs/iterare-remote/<remote>/runs/<id>`` and
``refs/iterare-remote/<remote>/notes``; each ref is then merged into the local one with
compare-and-swap (dulwich), and the namespace is removed:

* a run only the remote has is created; when one side contains the other, the ref
  fast-forwards (or stays);
* when both changed, a merge commit is written whose parents are both sides (no history is
  lost) and whose ``run.json`` is the side further along (status rank, then newest
  timestamp, then commit time); ``extra`` keys of both sides are kept and ``log.jsonl``
  comes from the winning side, or the other when the winner has none;
* a run that ran here (the caller's ``ours``) keeps its own record whatever the remote's
  says, but for one thing: that a teammate merged the very result recorded here (same
  head and base), which makes its status ``merged``;
* notes are merged per annotated commit by concatenating lines, dropping exact duplicates.

``push`` fetches and merges first, so what it pushes fast-forwards the remote.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from dulwich.graph import can_fast_forward
from dulwich.objects import Commit, Tree

from git_iterare import proc
from git_iterare.errors import ExternalError, OperationFailed, UserError
from git_iterare.runs import ids
from git_iterare.runs.cas import Unchanged, cas_update, oid, read_ref, refname
from git_iterare.runs.record import CorruptRecord, RunRecord
from git_iterare.runs.snapshot import LOG_JSONL, Snapshot, read_snapshot
from git_iterare.runs.status import ENDED, MERGED, STATUS_RANK
from git_iterare.runs.store import RunStore, write_record_commit

REMOTE_NS = "refs/iterare-remote/"


@dataclass
class SyncResult:
    """What a fetch or push did.

    Attributes:
        remote: the remote name or URL.
        outcomes: run id -> ``new``, ``fast-forward``, ``merged`` or ``up-to-date``.
        notes: ``new``, ``fast-forward``, ``merged``, ``up-to-date`` or None (no notes).
        pushed: whether a push was made.
        skipped: run id -> reason, for remote records that could not be merged (corrupt).
        branchless: ``(run id, result commit)`` of runs this fetch brought that have a
            result but no branch here (branches stay where a run ran), newest
            first.
    """

    remote: str
    outcomes: dict[str, str] = field(default_factory=dict)
    notes: str | None = None
    pushed: bool = False
    skipped: dict[str, str] = field(default_factory=dict)
    branchless: list[tuple[str, str]] = field(default_factory=list)


def default_remote(store: RunStore, *, for_push: bool = False) -> str:
    """The remote git would use: the branch's (push) remote, ``remote.pushDefault`` for
    pushes, else ``origin``."""
    from git_iterare.proc import read_git_config

    branch = proc.git("symbolic-ref", "--short", "-q", "HEAD", check=False).stdout.strip()
    values = {e.key: e.value for e in read_git_config(r"^(branch\..*\.(remote|pushremote)|"
                                                      r"remote\.pushdefault)$")}
    order = []
    if for_push:
        order += [f"branch.{branch}.pushremote", "remote.pushdefault"]
    order.append(f"branch.{branch}.remote")
    for key in order:
        if values.get(key.lower()) and values[key.lower()] != ".":
            return values[key.lower()]
    return "origin"


def namespace(remote: str) -> str:
    """``refs/iterare-remote/<name>/`` for a remote name; a URL gets ``url-<12 hex>``."""
    if ids.name_problem(remote) is None:
        return f"{REMOTE_NS}{remote}/"
    return f"{REMOTE_NS}url-{hashlib.sha1(remote.encode()).hexdigest()[:12]}/"


def _git(store: RunStore, *args: str) -> str:
    return str(proc.git("--git-dir", str(store.common_dir), *args, scrub_git_env=True).stdout)


def _remote_refs(store: RunStore, remote: str) -> dict[str, str]:
    try:
        out = _git(store, "ls-remote", remote, ids.RUNS_PREFIX + "*", ids.NOTES_REF)
    except ExternalError as exc:
        raise OperationFailed(f"cannot reach remote {remote!r}: {exc.message}",
                              hint="check `git remote -v`") from None
    refs = {}
    for line in out.splitlines():
        sha, _, name = line.partition("\t")
        refs[name] = sha
    return refs


def fetch(store: RunStore, remote: str, ours: Ours | None = None) -> SyncResult:
    """Fetch the remote's records and notes and merge them into the local ones.

    Args:
        store: the local records.
        remote: a remote name or URL.
        ours: tells the runs that ran here (this machine, this repository): their local
            record is the truth, and what a remote says of them never replaces it (see
            :func:`merge_record`).

    Raises:
        OperationFailed: the remote cannot be reached or a local ref kept changing.
        ExternalError: git fetch failed.
    """
    result = SyncResult(remote)
    advertised = _remote_refs(store, remote)
    if not advertised:
        return result
    ns = namespace(remote)
    specs = [f"+{ids.RUNS_PREFIX}*:{ns}runs/*"]
    if ids.NOTES_REF in advertised:
        specs.append(f"+{ids.NOTES_REF}:{ns}notes")
    _git(store, "fetch", "--quiet", "--no-tags", "--no-write-fetch-head", remote, *specs)
    from git_iterare.runs.index import scan_refs

    fetched = scan_refs(store.common_dir, ns)
    for name, sha in sorted(fetched.items()):
        if name.startswith("runs/"):
            run_id = name[len("runs/"):]
            try:
                result.outcomes[run_id] = merge_record(store, run_id, sha.encode(), ours)
            except CorruptRecord as exc:
                result.skipped[run_id] = exc.problem
            except UserError as exc:
                result.skipped[run_id] = exc.message
        elif name == "notes":
            result.notes = merge_notes(store, sha.encode())
        store.repo.refs.remove_if_equals(refname(ns + name), oid(sha.encode()))
    new = [rid for rid, how in result.outcomes.items() if how == "new"]
    store.mark_fetched(new)
    result.branchless = _branchless(store, new)
    return result


def _branchless(store: RunStore, run_ids: list[str]) -> list[tuple[str, str]]:
    """``(id, head)`` of those runs with a result and no local branch, newest first."""
    found = []
    for run_id in run_ids:
        try:
            record = store.get(run_id)
        except (CorruptRecord, UserError, OperationFailed):
            continue
        if not record.head or record.status == "cleaned":
            continue
        branch = record.branch or ids.run_branch(run_id)
        if read_ref(store.repo, f"refs/heads/{branch}".encode()) is None:
            found.append((record.created or "", run_id, record.head))
    return [(run_id, head) for _, run_id, head in sorted(found, reverse=True)]


def push(store: RunStore, remote: str, ours: Ours | None = None) -> SyncResult:
    """Merge the remote's records first (see :func:`fetch`, ``ours`` as there), then push
    ours.

    Raises:
        OperationFailed: nothing to push, the remote cannot be reached, or it changed
            between our fetch and push (run the command again).
        ExternalError: git push failed for another reason.
    """
    result = fetch(store, remote, ours)
    result.branchless = []  # what fetch would advise is not what a push is about
    specs = []
    if store.run_ids():
        specs.append(f"{ids.RUNS_PREFIX}*:{ids.RUNS_PREFIX}*")
    if read_ref(store.repo, ids.NOTES_REF.encode()) is not None:
        specs.append(f"{ids.NOTES_REF}:{ids.NOTES_REF}")
    if not specs:
        raise OperationFailed("there are no run records to push")
    try:
        _git(store, "push", "--quiet", remote, *specs)
    except ExternalError as exc:
        if "rejected" in exc.stderr or "non-fast-forward" in exc.stderr:
            raise OperationFailed(f"{remote} changed while pushing: {exc.message}",
                                  hint="run `git iterare push` again") from None
        raise
    result.pushed = True
    return result


#: Tells whether a run's local record is of a run that ran here.
Ours = Callable[[RunRecord], bool]


def _easy_merge(repo: Any, old: bytes | None, theirs: bytes, outcome: list[str]
                ) -> bytes | None:
    """Handle the merges that need no new commit.

    Returns ``theirs`` for a new ref or a fast-forward, None when a real merge is needed;
    raises :class:`Unchanged` when ``old`` already contains ``theirs``. Sets ``outcome[0]``.
    """
    if old is None:
        outcome[:] = ["new"]
        return theirs
    _stop_if_contained(repo, old, theirs, outcome)
    if can_fast_forward(repo, oid(old), oid(theirs)):
        outcome[:] = ["fast-forward"]
        return theirs
    return None


def _stop_if_contained(repo: Any, old: bytes, theirs: bytes, outcome: list[str]) -> None:
    """Raise :class:`Unchanged` (``outcome[0]`` ``up-to-date``) when ``old`` already
    contains ``theirs``."""
    if old == theirs or can_fast_forward(repo, oid(theirs), oid(old)):
        outcome[:] = ["up-to-date"]
        raise Unchanged


def _rank(snap: Snapshot, repo_commit: Commit) -> tuple[Any, ...]:
    rec = snap.record
    latest = max(x or "" for x in (rec.created, rec.started, rec.finished))
    return (STATUS_RANK.get(rec.status, 0), latest, repo_commit.commit_time)


def merge_record(store: RunStore, run_id: str, theirs: bytes, ours: Ours | None = None
                 ) -> str:
    """Merge the record commit ``theirs`` into ``refs/iterare/runs/<id>``.

    A run that ran here (``ours`` says so of its local record) keeps its local record
    whole: whoever can push to a shared remote could otherwise rewrite it (``merged``,
    its head its base) and make this machine's ``cleanup`` and ``forget`` drop its work.
    Theirs is then only joined as a parent, so both sides can fast-forward again.

    Returns:
        ``new``, ``up-to-date``, ``fast-forward``, ``merged`` or ``kept`` (theirs differed
        from a record of a run that ran here, which stays as it is).

    Raises:
        UserError: ``run_id`` is not a valid run id.
        CorruptRecord: a side cannot be read.
    """
    ids.validate_run_id(run_id)
    repo = store.repo
    outcome: list[str] = []

    def build(old: bytes | None) -> bytes:
        mine = None
        if old is not None and ours is not None:
            mine = read_snapshot(repo, run_id, old)
            if ours(mine.record):
                _stop_if_contained(repo, old, theirs, outcome)
                their_record = read_snapshot(repo, run_id, theirs).record  # not corrupt
                outcome[:] = ["kept"]
                kept = mine.record
                # All a teammate may tell of it: that they merged this very result.
                if (their_record.status == MERGED and kept.status in ENDED and kept.head
                        and (their_record.head, their_record.base_commit)
                        == (kept.head, kept.base_commit)):
                    kept = kept.replace(status=MERGED)
                return write_record_commit(repo, kept, dict(mine.files),
                                           [old, theirs],
                                           f"merge {run_id} from a remote; it ran here: "
                                           "this record stands")
        easy = _easy_merge(repo, old, theirs, outcome)
        if easy is not None:
            read_snapshot(repo, run_id, theirs)  # refuse to import a corrupt record
            return easy
        assert old is not None
        mine_snap = mine or read_snapshot(repo, run_id, old)
        their_snap = read_snapshot(repo, run_id, theirs)
        mine_commit, their_commit = repo[old], repo[theirs]
        assert isinstance(mine_commit, Commit) and isinstance(their_commit, Commit)
        if _rank(their_snap, their_commit) > _rank(mine_snap, mine_commit):
            win, lose = their_snap, mine_snap
        else:
            win, lose = mine_snap, their_snap
        record = win.record.replace(extra={**lose.record.extra, **win.record.extra})
        files = dict(win.files)
        if LOG_JSONL not in files and LOG_JSONL in lose.files:
            files[LOG_JSONL] = lose.files[LOG_JSONL]
        outcome[:] = ["merged"]
        return write_record_commit(repo, record, files, [old, theirs],
                                   f"merge {run_id} from a remote")

    cas_update(repo, ids.run_ref(run_id).encode(), build, f"iterare: merge {run_id}")
    return outcome[0]


def union_lines(*texts: str) -> str:
    """Concatenate note texts line by line, dropping blank lines and exact duplicates."""
    seen: list[str] = []
    for text in texts:
        for line in text.splitlines():
            if line.strip() and line not in seen:
                seen.append(line)
    return "".join(f"{line}\n" for line in seen)


def _note_map(store: RunStore, commit_id: bytes) -> dict[bytes, bytes]:
    from dulwich.notes import NotesTree

    commit = store.repo[commit_id]
    assert isinstance(commit, Commit)
    tree = store.repo[commit.tree]
    assert isinstance(tree, Tree)
    notes = NotesTree(tree, store.repo.object_store)
    return {obj: store.repo[blob].as_raw_string() for obj, blob in notes.list_notes()}


def merge_notes(store: RunStore, theirs: bytes) -> str:
    """Merge the notes commit ``theirs`` into ``refs/notes/iterare``.

    Returns:
        ``new``, ``up-to-date``, ``fast-forward`` or ``merged``.
    """
    from dulwich.notes import NotesTree

    from git_iterare.runs.notes import write_notes_commit

    repo = store.repo
    outcome: list[str] = []

    def build(old: bytes | None) -> bytes:
        easy = _easy_merge(repo, old, theirs, outcome)
        if easy is not None:
            return easy
        assert old is not None
        mine, other = _note_map(store, old), _note_map(store, theirs)
        commit = repo[old]
        assert isinstance(commit, Commit)
        base_tree = repo[commit.tree]
        assert isinstance(base_tree, Tree)
        notes = NotesTree(base_tree, repo.object_store)
        tree = base_tree
        for obj, text in other.items():
            merged = union_lines(mine.get(obj, b"").decode("utf-8", "replace"),
                                 text.decode("utf-8", "replace")).encode()
            if merged != mine.get(obj):
                tree = notes.set_note(obj, merged)
        outcome[:] = ["merged"]
        return write_notes_commit(repo, tree.id, [old, theirs], "Merge iterare notes")

    cas_update(repo, ids.NOTES_REF.encode(), build, "iterare: merge notes")
    return outcome[0]


def describe(result: SyncResult) -> Iterable[str]:
    """Lines summarising a :class:`SyncResult` for the user."""
    counts: dict[str, int] = {}
    for outcome in result.outcomes.values():
        counts[outcome] = counts.get(outcome, 0) + 1
    parts = [f"{n} {k}" for k, n in sorted(counts.items())]
    yield f"runs from {result.remote}: " + (", ".join(parts) if parts else "none")
    if result.notes:
        yield f"notes: {result.notes}"
    for run_id, problem in sorted(result.skipped.items()):
        yield f"skipped corrupt remote record {run_id}: {problem}"
    if result.branchless:
        run_id, head = result.branchless[0]
        count = len(result.branchless)
        yield (f"{count} run{'' if count == 1 else 's'} fetched without a branch here (a "
               "run's branch stays where it ran); diff, merge and --reuse work by run id; "
               f"to get a branch: git branch {ids.run_branch(run_id)} {head}")
    if result.pushed:
        yield f"pushed run records and notes to {result.remote}"


def check_remote_arg(remote: str) -> str:
    """Refuse a remote argument that git would read as an option."""
    if not remote or remote.startswith("-"):
        raise UserError(f"invalid remote {remote!r}", hint="give a remote name or URL")
    return remote
