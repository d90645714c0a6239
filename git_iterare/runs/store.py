"""The Python API of run records: :class:`RunStore`.

Layout (gititerare-records(5)): ``refs/iterare/runs/<id>`` points to the newest of a chain
of commits, one per change. Each commit's tree holds ``run.json`` (a
:class:`~git_iterare.runs.record.RunRecord`), ``prompt.md`` (the exact prompt text the agent
got) and, once written, ``log.jsonl``. The first parent is the previous record commit; when
the run has a result (``head``) that commit is an extra parent, so the run's work stays
reachable (through gc, and across push/fetch of ``refs/iterare/*``) after its branch is gone.

All writes are compare-and-swap (:mod:`git_iterare.runs.cas`); reads never lock.
"""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from dulwich.objects import Blob, Commit, Tree
from dulwich.repo import Repo as DulwichRepo

from git_iterare.errors import OperationFailed, UserError
from git_iterare.runs import ids
from git_iterare.runs.cas import IDENTITY, Unchanged, add_object, cas_update, oid, read_ref
from git_iterare.runs.record import CorruptRecord, RunRecord
from git_iterare.runs.snapshot import (
    LOG_JSONL,
    PROMPT_MD,
    RUN_JSON,
    Snapshot,
    open_repo,
    read_snapshot,
)
from git_iterare.runs.status import (
    ACTIVE,
    CLEANED,
    ENDED,
    RUNNING,
    STARTING,
    check_transition,
    now_iso,
)

_FILE_MODE = stat.S_IFREG | 0o644


def write_record_commit(
    repo: DulwichRepo,
    record: RunRecord,
    files: Mapping[bytes, bytes],
    parents: Iterable[bytes],
    message: str,
) -> bytes:
    """Write a record commit: ``run.json`` from ``record`` plus ``files`` (name -> blob id).

    Registered secrets (:func:`git_iterare.proc.register_secret`) and their encodings are
    redacted from the fields of ``run.json`` that hold what the agent printed or made
    (:data:`~git_iterare.runs.record.AGENT_FIELDS`).

    ``record.head`` (when set and present) is added as a last parent. Returns the commit id.
    """
    from git_iterare import proc

    store = repo.object_store
    # The agent's error, egress names, paths...: records travel with push, and secrets
    # registered in this process must not.
    run_json = Blob.from_string(record.to_json(proc.redactor().redact_value))
    add_object(repo, run_json)
    tree = Tree()
    for name, sha in files.items():
        if name != RUN_JSON:
            tree.add(name, _FILE_MODE, oid(sha))
    tree.add(RUN_JSON, _FILE_MODE, run_json.id)
    add_object(repo, tree)
    parent_list = [oid(p) for p in dict.fromkeys(parents)]
    head = oid(record.head.encode()) if record.head else None
    if head is not None and head not in parent_list and head in store:
        parent_list.append(head)
    commit = Commit()
    commit.tree = tree.id
    commit.parents = parent_list
    commit.author = commit.committer = IDENTITY
    commit.author_time = commit.commit_time = int(time.time())
    commit.author_timezone = commit.commit_timezone = 0
    commit.encoding = b"UTF-8"
    commit.message = f"iterare: {record.id} {record.status}\n\n{message}\n".encode()
    add_object(repo, commit)
    return commit.id


def add_blob(repo: DulwichRepo, data: bytes) -> bytes:
    """Store ``data`` as a blob and return its id."""
    blob = Blob.from_string(data)
    add_object(repo, blob)
    return blob.id


#: The file of :meth:`RunStore.fetched_ids`, in ``<common dir>/iterare``.
FETCHED_RUNS = "fetched-runs"


class RunStore:
    """Create, read, update and list run records of one repository.

    Args:
        repo_path: the repository: a worktree path, a gitdir, or a
            :class:`git_iterare.git.repo.Repo` (its common dir is used, so all worktrees share
            the records).

    Raises:
        UserError: ``repo_path`` is not a git repository.
    """

    def __init__(self, repo_path: str | os.PathLike[str] | Any):
        self.repo = open_repo(repo_path)
        self.common_dir = Path(self.repo.commondir())

    # -- reading -----------------------------------------------------------------------

    def snapshot(self, run_id: str) -> Snapshot:
        """The newest record commit of ``run_id``.

        Raises:
            OperationFailed: no such run (exit status 1).
            CorruptRecord: the record cannot be read.
        """
        commit_id = read_ref(self.repo, ids.run_ref(run_id).encode())
        if commit_id is None:
            raise OperationFailed(f"no run {run_id!r}", hint="see `git iterare list --all`")
        return read_snapshot(self.repo, run_id, commit_id)

    def get(self, run_id: str) -> RunRecord:
        """The record of ``run_id``.

        Raises:
            OperationFailed: no such run. CorruptRecord: it cannot be read.
        """
        return self.snapshot(run_id).record

    def _blob(self, run_id: str, name: bytes) -> bytes | None:
        snap = self.snapshot(run_id)
        sha = snap.files.get(name)
        if sha is None:
            return None
        try:
            return self.repo[sha].as_raw_string()
        except KeyError:
            raise CorruptRecord(run_id, f"the {name.decode()} blob is missing") from None

    def read_prompt(self, run_id: str) -> str:
        """The exact prompt text the run's agent got (``prompt.md``)."""
        data = self._blob(run_id, PROMPT_MD)
        return (data or b"").decode("utf-8", "replace")

    def read_log(self, run_id: str) -> bytes:
        """The run's ``log.jsonl`` (empty when none was written yet)."""
        return self._blob(run_id, LOG_JSONL) or b""

    def fetched_ids(self) -> set[str]:
        """Ids of the runs whose records came in with ``git iterare fetch`` and were
        not here before (``<common dir>/iterare/fetched-runs``, one a line; host-only):
        what a remote says a run is can be anything, so no default choice (the most
        recent run, a group's best attempt) takes one of them."""
        try:
            text = (self.common_dir / "iterare" / FETCHED_RUNS).read_text()
        except OSError:
            return set()
        return set(text.split())

    def mark_fetched(self, run_ids: Iterable[str]) -> None:
        """Add ``run_ids`` to :meth:`fetched_ids`.

        Raises:
            OSError: the file cannot be written.
        """
        ids = sorted(set(run_ids))
        if not ids:
            return
        path = self.common_dir / "iterare" / FETCHED_RUNS
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a") as out:
            out.write("".join(f"{i}\n" for i in ids))

    def run_ids(self) -> list[str]:
        """Ids of every run with a record ref, sorted."""
        from git_iterare.runs import index

        return sorted(index.scan_run_refs(self.common_dir))

    def list(self, statuses: Iterable[str] | None = None, include_cleaned: bool = False
             ) -> list[RunRecord]:
        """Records, newest first; corrupt records are left out (see :mod:`index`).

        Args:
            statuses: keep only these statuses; None keeps all but ``cleaned``.
            include_cleaned: also return cleaned runs (implied when ``statuses`` names it).
        """
        from git_iterare.runs import index

        wanted = set(statuses) if statuses is not None else None
        out = []
        for entry in index.load_entries(self.common_dir, self.repo):
            rec = entry.record
            if rec is None:
                continue
            if wanted is not None:
                if rec.status in wanted:
                    out.append(rec)
            elif include_cleaned or rec.status != CLEANED:
                out.append(rec)
        return out

    def resolve(self, arg: str | None) -> RunRecord:
        """Find the run a user means.

        Args:
            arg: a full run id, a unique id prefix, or a prompt name that exactly one run
                used; None means the most recently created run.

        Raises:
            UserError: ``arg`` matches several runs (exit 2; the message lists them).
            OperationFailed: nothing matches, or there are no runs (exit 1).
            CorruptRecord: the run found cannot be read.
        """
        from git_iterare.runs import index

        def readable() -> list[index.Entry]:
            return [e for e in index.load_entries(self.common_dir, self.repo) if e.ok]

        if arg is None:
            entries = readable()
            if not entries:
                raise OperationFailed("there are no runs yet", hint="start one with "
                                      "`git iterare execute PROMPT`")
            fetched = self.fetched_ids()
            own = [e for e in entries if e.run_id not in fetched]
            if not own:
                raise OperationFailed("every run here came in with `git iterare fetch`",
                                      hint="name the one you mean")
            return self.get(own[0].run_id)
        all_ids = self.run_ids()
        if arg in all_ids:
            return self.get(arg)
        by_prefix = [i for i in all_ids if i.startswith(arg)]
        if len(by_prefix) == 1:
            return self.get(by_prefix[0])
        by_name = [e.run_id for e in readable() if arg in (e.get("prompt_name"), e.get("name"))]
        if len(by_name) == 1:
            return self.get(by_name[0])
        matches = by_name or by_prefix
        if not matches:
            raise OperationFailed(f"no run matches {arg!r}", hint="see `git iterare list --all`")
        raise UserError(f"{arg!r} matches {len(matches)} runs: {', '.join(sorted(matches))}",
                        hint="give more of the run id")

    # -- writing -----------------------------------------------------------------------

    def create(
        self,
        name: str,
        *,
        prompt_name: str | None,
        prompt_path: str | None,
        prompt_text: str,
        base_commit: str | None,
        base_branch: str | None,
        agent: str | None,
        run_id: str | None = None,
        **fields: Any,
    ) -> RunRecord:
        """Create a new run record with status ``created`` (or ``fields['status']``).

        Args:
            name: run name (validated, see :func:`ids.validate_name`); the id gets 8 random
                hex digits appended.
            prompt_name, prompt_path: the prompt's name and path relative to the repository.
            prompt_text: the exact text the agent will get; stored as ``prompt.md``.
            base_commit: 40-hex commit the run starts from; base_branch its branch name.
            agent: agent name (``claude``, ``shell``, ...).
            run_id: use this id instead of a fresh one (imports); refused when it exists.
            fields: any other :class:`RunRecord` field (image, policy, extra, ...).

        Returns:
            The stored record (``created`` set to now, ``branch`` to ``iterare/<id>``).

        Raises:
            UserError: bad name or unknown field. OperationFailed: ``run_id`` exists.
        """
        ids.validate_name(name)
        fixed_id = run_id is not None
        for _ in range(16):
            rid = ids.validate_run_id(run_id) if run_id else ids.new_run_id(name)
            values: dict[str, Any] = dict(
                id=rid, name=name, prompt_name=prompt_name, prompt_path=prompt_path,
                base_commit=base_commit, base_branch=base_branch, agent=agent,
                branch=ids.run_branch(rid), created=now_iso())
            values.update(fields)
            try:
                record = RunRecord(**values)
            except TypeError as exc:
                raise UserError(f"bad run record field: {exc}") from None
            prompt_blob = add_blob(self.repo, prompt_text.encode("utf-8"))
            commit = write_record_commit(self.repo, record, {PROMPT_MD: prompt_blob}, [],
                                         "create")

            def build(old: bytes | None, commit: bytes = commit) -> bytes:
                if old is not None:
                    raise Unchanged
                return commit

            if cas_update(self.repo, ids.run_ref(rid).encode(), build,
                          f"iterare: create {rid}") == commit:
                return record
            if fixed_id:
                raise OperationFailed(f"run {rid} already exists")
            run_id = None
        raise OperationFailed(f"could not find a free run id for {name!r}")

    def _change(
        self,
        run_id: str,
        fn: Callable[[RunRecord], RunRecord],
        message: str,
        files: Callable[[Snapshot], Mapping[bytes, bytes]] | None = None,
    ) -> RunRecord:
        """Apply ``fn`` (and ``files``: new file name -> blob id) in a CAS loop."""
        ref = ids.run_ref(run_id).encode()
        result: list[RunRecord] = []

        def build(old: bytes | None) -> bytes:
            if old is None:
                raise OperationFailed(f"no run {run_id!r}", hint="see `git iterare list --all`")
            snap = read_snapshot(self.repo, run_id, old)
            new = fn(snap.record)
            if new.id != run_id:
                raise OperationFailed(f"an update tried to change the id of run {run_id}")
            check_transition(snap.record.status, new.status)
            new_files = dict(snap.files)
            if files is not None:
                new_files.update(files(snap))
            result[:] = [new]
            if new == snap.record and new.unknown == snap.record.unknown \
                    and new_files == dict(snap.files):
                raise Unchanged
            return write_record_commit(self.repo, new, new_files, [old], message)

        final = cas_update(self.repo, ref, build, f"iterare: {message}")
        if final is None:  # pragma: no cover - build raised before
            raise OperationFailed(f"no run {run_id!r}")
        return result[0] if result else self.get(run_id)

    def update(self, run_id: str, fn: Callable[[RunRecord], RunRecord], message: str
               ) -> RunRecord:
        """Change a record: ``fn(current) -> new``, written with compare-and-swap.

        ``fn`` is called again with the newer record whenever another process wrote first,
        so it must only depend on its argument. A status change in ``fn`` is checked
        against the transition table.

        Returns:
            The record as written.

        Raises:
            OperationFailed: no such run, or the update timed out. InvalidTransition: the
                status change is not allowed. CorruptRecord: the record cannot be read.
        """
        return self._change(run_id, fn, message)

    def transition(self, run_id: str, status: str, **fields: Any) -> RunRecord:
        """Move a run to ``status`` and set ``fields`` at the same time.

        ``started`` is set when entering starting/running and ``finished`` when the run
        ends (succeeded, failed, stopped, timed-out, lost), unless already set or given.

        Raises:
            InvalidTransition: ``status`` cannot follow the current one (exit 1).
            OperationFailed / CorruptRecord: as :meth:`update`.
        """
        def fn(rec: RunRecord) -> RunRecord:
            check_transition(rec.status, status)
            values = dict(fields)
            if status in (STARTING, RUNNING) and not rec.started:
                values.setdefault("started", now_iso())
            if status in ENDED and not rec.finished:
                values.setdefault("finished", now_iso())
            return rec.replace(status=status, **values)

        return self._change(run_id, fn, f"{run_id} -> {status}")

    def set_head(self, run_id: str, commit: str, changes: Mapping[str, int] | None = None
                 ) -> RunRecord:
        """Record the run's result commit; it becomes reachable from the record ref.

        Args:
            commit: 40-hex id of the newest commit on the run's branch.
            changes: ``{"files", "insertions", "deletions"}`` of base..commit; computed
                with one ``git diff --numstat`` when None.

        Raises:
            UserError: ``commit`` is not an object of this repository.
        """
        if oid(commit.encode()) not in self.repo.object_store:
            raise UserError(f"commit {commit} is not in this repository")
        if changes is None:
            base = self.get(run_id).base_commit
            changes = diff_changes(self.common_dir, base, commit) if base else None
        return self._change(run_id, lambda r: r.replace(
            head=commit, changes=dict(changes) if changes is not None else r.changes),
            f"{run_id} head {commit[:12]}")

    def set_log(self, run_id: str, data: bytes) -> RunRecord:
        """Replace the run's ``log.jsonl`` with ``data`` (bytes, JSON lines); registered
        secrets are redacted (:meth:`~git_iterare.redaction.Redactor.redact_log`)."""
        from git_iterare import proc

        blob = add_blob(self.repo, proc.redactor().redact_log(data))
        return self._change(run_id, lambda r: r, f"{run_id} log",
                            files=lambda snap: {LOG_JSONL: blob})

    def append_log(self, run_id: str, data: bytes) -> RunRecord:
        """Append ``data`` to the run's ``log.jsonl`` (a newline is added if missing);
        registered secrets are redacted (:meth:`~git_iterare.redaction.Redactor.redact_log`)."""
        from git_iterare import proc

        data = proc.redactor().redact_log(data)
        if data and not data.endswith(b"\n"):
            data += b"\n"

        def files(snap: Snapshot) -> dict[bytes, bytes]:
            old = b""
            if LOG_JSONL in snap.files:
                old = self.repo[snap.files[LOG_JSONL]].as_raw_string()
            return {LOG_JSONL: add_blob(self.repo, old + data)}

        return self._change(run_id, lambda r: r, f"{run_id} log", files=files)

    def add_note(self, commits: Iterable[str], entry: Mapping[str, Any]) -> None:
        """Annotate ``commits`` in ``refs/notes/iterare`` (see :func:`notes.add_note`)."""
        from git_iterare.runs import notes

        notes.add_note(self.repo, commits, entry)


def is_active(record: RunRecord) -> bool:
    """Whether the run may still be working (created, starting, running)."""
    return record.status in ACTIVE


def diff_changes(repo_dir: Path, base: str, head: str) -> dict[str, int] | None:
    """``{"files", "insertions", "deletions"}`` of ``base..head`` via one ``git diff``.

    Returns None when git cannot compare them (an object is missing).
    """
    from git_iterare import proc

    result = proc.git("--git-dir", str(repo_dir), "diff", "--numstat", "-z", "--no-renames",
                      base, head, check=False, scrub_git_env=True)
    if result.returncode != 0:
        return None
    files = ins = dels = 0
    for item in result.stdout.split("\0"):
        parts = item.split("\t")
        if len(parts) < 3:
            continue
        files += 1
        ins += int(parts[0]) if parts[0].isdigit() else 0
        dels += int(parts[1]) if parts[1].isdigit() else 0
    return {"files": files, "insertions": ins, "deletions": dels}
