"""Importing the run history of iterare (PyPI ``iterare-llm``).

iterare kept its runs in ``<cache>/runs/runs-<hash>.json``, where ``<cache>`` is
platformdirs' user cache dir for ``iterare`` (on Linux ``$XDG_CACHE_HOME/iterare``, by
default ``~/.cache/iterare``) and ``<hash>`` is the first 16 hex digits of the SHA-256 of
the resolved project path. The file maps a run name to
``{"prompt_name": str, "timestamp": float (Unix seconds), "project_dir": str}``; the run's
work was on the branch ``<run name>`` in the worktree ``<project>/workspaces/<run name>``,
made by ``git worktree add -b <run name> <worktree> <base branch>``, and Claude Code's
stream-json output went to ``<data>/logs/<run name>.log`` (platformdirs' user data dir,
``$XDG_DATA_HOME/iterare``, by default ``~/.local/share/iterare``).

An imported run:

* gets the base commit the branch was created from (the first entry of its reflog,
  "branch: Created from X"), else the merge base of the branch and ``HEAD``; when neither
  is known it stays None and ``diff``/``merge`` say so (see :func:`base_of`);
* gets iterare's log as its ``log.jsonl`` (at most :data:`MAX_LEGACY_LOG_BYTES`);
* has, while its branch exists, the status its log's final report gives (``succeeded``
  or ``failed``, with the cost, tokens and turns; ``lost`` without one, see
  :mod:`git_iterare.runs.legacy_outcome`), and ``cleaned`` once it is gone; its ``head``
  follows the branch until cleanup (:func:`follow`), and ``cleanup`` removes iterare's
  worktree and, when that worktree has it checked out, its branch (:func:`cleanup`),
  iterare's own files in it being no work;
* gets as ``prompt.md`` the prompt text iterare left in its worktree
  (``.claude-prompt.md``), else an empty one.

Re-importing skips runs that already have a record, giving a ``lost`` one the outcome its
log tells.

The file may be a teammate's (``--file``) or otherwise hostile: it is read only as a
regular file (never through a symlink, never blocking on a FIFO), at most
:data:`MAX_LEGACY_FILE_BYTES` and :data:`MAX_LEGACY_RUNS` runs, and every field it gives
is checked and capped. Branch, worktree, reflog and log are looked up only for a run name
that is a run id as iterare made them (``<name>-<8 hex>``): every path comes from that
cleaned id and this repository, never from the file, so a name such as ``../../x`` or a
``project_dir`` reaches no other file.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import math
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from git_iterare.errors import OperationFailed, UserError
from git_iterare.runs import ids, legacy_outcome
from git_iterare.runs.cas import read_ref
from git_iterare.runs.record import RunRecord
from git_iterare.runs.status import CLEANED, LOST
from git_iterare.runs.store import RunStore

#: Largest iterare log imported, in bytes (the first part of a longer one is kept).
MAX_LEGACY_LOG_BYTES = 10 * 1024 * 1024

#: Largest runs file read, in bytes (iterare writes about 150 bytes a run).
MAX_LEGACY_FILE_BYTES = 8 * 1024 * 1024

#: Most runs imported from one file.
MAX_LEGACY_RUNS = 10_000

#: Longest run name, prompt name (characters) and project path (bytes) taken from the file;
#: a longer run name is skipped, a longer prompt name or path left out.
MAX_LEGACY_NAME = 255
MAX_LEGACY_PATH = 4096

#: Length of the project hash in the file name (iterare's PROJECT_HASH_LENGTH).
PROJECT_HASH_LENGTH = 16


@dataclass(frozen=True)
class Imported:
    """One legacy run and what the import did: ``created`` or ``exists`` or ``skipped``.

    Attributes:
        legacy_name: the run name in iterare's file.
        run_id: the record id (equal to the legacy name when that is already a run id).
        outcome: ``created``, ``exists`` or ``skipped``.
        status: the status given (``lost`` or ``cleaned``), or the reason when skipped.
    """

    legacy_name: str
    run_id: str | None
    outcome: str
    status: str


def cache_dir() -> Path:
    """iterare's cache directory (platformdirs' ``user_cache_dir("iterare")``)."""
    try:
        from platformdirs import user_cache_dir
    except ImportError:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
        return Path(base) / "iterare"
    return Path(user_cache_dir("iterare", ensure_exists=False))


def data_dir() -> Path:
    """iterare's data directory (platformdirs' ``user_data_dir("iterare")``), which holds
    ``logs/<run name>.log``."""
    try:
        from platformdirs import user_data_dir
    except ImportError:
        base = os.environ.get("XDG_DATA_HOME") or os.path.expanduser("~/.local/share")
        return Path(base) / "iterare"
    return Path(user_data_dir("iterare", ensure_exists=False))


def log_file(legacy_name: str) -> Path:
    """Where iterare wrote the log of run ``legacy_name``."""
    return data_dir() / "logs" / f"{legacy_name}.log"


def read_log(path: Path) -> bytes | None:
    """The log at ``path`` (its first :data:`MAX_LEGACY_LOG_BYTES`), or None when there is
    none, it cannot be read, or it is a symlink or no regular file (a FIFO is not waited
    on)."""
    from git_iterare import boundedfs

    try:
        return boundedfs.read_regular(path, MAX_LEGACY_LOG_BYTES, cut=True)
    except (OSError, OperationFailed):
        return None


def base_of(common_dir: Path, branch: str, project: Path) -> tuple[str | None, str | None]:
    """The commit (and branch name) iterare created ``branch`` from.

    The first line of the branch's reflog (``logs/refs/heads/<branch>``) holds the commit
    it was created at and, from ``git worktree add -b``, "branch: Created from <base>".
    Without a reflog, the merge base of the branch and the project's ``HEAD``.

    Returns:
        ``(commit, base branch)``; either may be None when unknown.
    """
    from git_iterare import proc

    reflog = common_dir / "logs" / "refs" / "heads" / branch
    try:
        with reflog.open("rb") as handle:
            first = handle.readline(4096).decode("utf-8", "replace")
    except OSError:
        first = ""
    fields = first.split(" ", 2)
    if len(fields) >= 2 and re.fullmatch(r"0{40}", fields[0]) and re.fullmatch(
            r"[0-9a-f]{40}", fields[1]):
        message = first.split("\t", 1)[1].strip() if "\t" in first else ""
        created = re.fullmatch(r"branch: Created from (\S+)", message)
        name = created.group(1) if created and created.group(1) != "HEAD" else None
        return fields[1], name
    done = proc.git("merge-base", "--", f"refs/heads/{branch}", "HEAD", cwd=project,
                    check=False)
    found = done.stdout.strip()
    return (found if re.fullmatch(r"[0-9a-f]{40}", found) else None), None


def is_legacy(record: RunRecord) -> bool:
    """Whether ``record`` was imported from iterare."""
    return isinstance(record.extra.get("legacy"), dict)


def follow(store: RunStore, record: RunRecord) -> RunRecord:
    """Move an imported run's ``head`` to its branch's tip, which iterare's worktree may
    have moved since; other records are returned as they are.

    Until cleanup the record follows the branch; a branch gone leaves the record as it is.
    """
    if not is_legacy(record) or record.status == CLEANED or not record.branch:
        return record
    if ids.name_problem(record.branch) is not None and not ids.is_run_id(record.branch):
        return record
    tip = read_ref(store.repo, f"refs/heads/{record.branch}".encode())
    if tip is None or tip.decode() == record.head:
        return record
    return store.set_head(record.id, tip.decode())


def cleanup(repo: Any, record: RunRecord, *, force: bool) -> list[str]:
    """Remove iterare's worktree (``workspaces/<name>``) of an imported run, and its
    branch when that worktree has it checked out.

    The record did not create the branch: iterare did, by ``git worktree add -b <name>
    workspaces/<name>``. Only that layout, found in the repository now, shows the branch
    is iterare's; a branch of the same name anywhere else (the user's own, which a runs
    file can claim) is kept, and said so. Refuses, unless ``force``, when removing them
    would drop work: the branch is not merged into any other local branch, or the
    worktree has changes not committed. The commits stay reachable from the record.

    Args:
        repo: a :class:`git_iterare.git.repo.Repo`.
        record: an imported run (see :func:`is_legacy`).
        force: drop unmerged and uncommitted work.

    Returns:
        Notes for the user (a branch kept).

    Raises:
        OperationFailed: work would be lost and not ``force``.
    """
    from git_iterare import proc

    top = Path(repo.main_work_tree)
    # Only iterare's own layout is touched: the branch is the run id (iterare's run name
    # <name>-<8 hex>), checked out in <main worktree>/workspaces/<run id>. A record that
    # says otherwise (fetched from elsewhere, say) has its record cleaned only.
    branch = record.branch or ""
    if branch != record.id or not ids.is_run_id(branch):
        return []
    worktree = top / "workspaces" / branch
    ref = f"refs/heads/{branch}"
    exists = bool(branch) and proc.git("show-ref", "--verify", "--quiet", ref, cwd=top,
                                       check=False).returncode == 0
    checked_out = _worktree_branch(top, worktree)
    registered = checked_out is not None
    theirs = exists and checked_out == ref
    if not force:
        problems = []
        if theirs:
            holders = proc.git("for-each-ref", f"--contains={ref}", "--format=%(refname)",
                               "refs/heads/", cwd=top).stdout.split()
            if not [h for h in holders if h != ref and not h.startswith("refs/heads/iterare/")]:
                problems.append(f"branch {branch} is not merged into any local branch")
        if registered and worktree.is_dir():
            status = proc.git("-C", str(worktree), "status", "--porcelain", "-z",
                              "--untracked-files=normal", cwd=top, check=False)
            # iterare's own files, written by its execute, are not the run's work.
            ours = {f"?? {name}" for name in legacy_outcome.PREDECESSOR_FILES}
            if status.returncode != 0 or [entry for entry in status.stdout.split("\0")
                                          if entry and entry not in ours]:
                problems.append(f"{worktree} has uncommitted changes")
        if problems:
            raise OperationFailed(
                f"run {record.id} has work that would be lost: {'; '.join(problems)}",
                hint=f"`git iterare merge {record.id}` first, or "
                     f"`git iterare cleanup --force {record.id}`")
    if registered:
        proc.git("worktree", "remove", "--force", "--force", str(worktree), cwd=top,
                 check=False)
    if theirs:
        proc.git("branch", "-D", "--", branch, cwd=top, check=False)
        return []
    if exists:
        return [f"kept branch {branch}: it is not checked out in iterare's worktree "
                f"{worktree}, so nothing shows iterare made it (delete it yourself with "
                f"`git branch -D {branch}` if it was)"]
    return []


def _settle_lost(store: RunStore, record: RunRecord) -> RunRecord:
    """An earlier import's ``lost`` run given the outcome its stored log tells
    (:func:`legacy_outcome.outcome`); other records as they are."""
    if not is_legacy(record) or record.status != LOST:
        return record
    ended = legacy_outcome.outcome(store.read_log(record.id))
    if ended.status == LOST:
        return record
    fields = ended.fields()
    return store.transition(record.id, str(fields.pop("status")), finished=record.finished,
                            **fields)


def _worktree_branch(top: Path, worktree: Path) -> str | None:
    """The ref checked out in the linked worktree at ``worktree`` ("" for a detached
    one), or None when no worktree of the repository is there."""
    from git_iterare import proc

    listed = proc.git("worktree", "list", "--porcelain", "-z", cwd=top, check=False).stdout
    want = str(worktree.resolve()) if worktree.exists() else str(worktree)
    found: str | None = None
    for item in listed.split("\0"):
        if item.startswith("worktree "):
            if found is not None:
                return found
            found = "" if item == f"worktree {want}" else None
        elif found is not None and item.startswith("branch "):
            found = item[len("branch "):]
    return found


def project_hash(project_dir: Path) -> str:
    """First 16 hex digits of SHA-256 of the resolved project path, as iterare names it."""
    return hashlib.sha256(str(project_dir.resolve()).encode()).hexdigest()[:PROJECT_HASH_LENGTH]


def runs_file(project_dir: Path) -> Path:
    """Where iterare kept the runs of ``project_dir``."""
    return cache_dir() / "runs" / f"runs-{project_hash(project_dir)}.json"


def load(path: Path) -> dict[str, dict[str, Any]]:
    """Read a legacy runs file: a regular file (never through a symlink, never waiting on a
    FIFO) of at most :data:`MAX_LEGACY_FILE_BYTES` holding at most :data:`MAX_LEGACY_RUNS`
    runs.

    Raises:
        UserError: missing, unreadable, a symlink or no regular file, too large, not JSON
            (or nested too deep to read), not ``{name: {...}}``, or too many runs.
    """
    from git_iterare import boundedfs

    try:
        raw = boundedfs.read_regular(path, MAX_LEGACY_FILE_BYTES)
    except FileNotFoundError:
        raise UserError(f"no iterare run history at {path}",
                        hint="give the file with --file PATH") from None
    except boundedfs.TooLarge:
        raise UserError(f"{path} is larger than {MAX_LEGACY_FILE_BYTES // (1024 * 1024)} MiB: "
                        "no runs file of iterare's") from None
    except OperationFailed as exc:
        raise UserError(exc.message, hint="give the runs file itself with --file PATH"
                        ) from None
    except OSError as exc:
        raise UserError(f"cannot read {path}: {exc.strerror}") from None
    try:
        data = json.loads(raw)
    except RecursionError:
        raise UserError(f"{path} is not an iterare runs file (JSON nested too deep)") from None
    except ValueError as exc:
        raise UserError(f"{path} is not valid JSON ({exc})") from None
    if not isinstance(data, dict) or not all(isinstance(v, dict) for v in data.values()):
        raise UserError(f"{path} is not an iterare runs file",
                        hint="expected {\"run name\": {\"prompt_name\": ..., ...}}")
    if len(data) > MAX_LEGACY_RUNS:
        raise UserError(f"{path} holds {len(data)} runs, more than the {MAX_LEGACY_RUNS} an "
                        "import takes")
    return data


def _text(value: Any, most: int) -> str | None:
    """``value`` when it is a string of at most ``most`` characters, else None."""
    return value if isinstance(value, str) and len(value) <= most else None


def _timestamp(value: Any) -> float | int | None:
    """``value`` when it is a finite Unix time in seconds (before the year 5000), else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return value if math.isfinite(value) and 0 <= value < 1e11 else None


def record_id(legacy_name: str) -> str | None:
    """The run id for a legacy run name: itself when it is ``<name>-<8 hex>``, else a
    cleaned-up name with 8 hex digits of its hash; None when nothing usable remains."""
    if ids.is_run_id(legacy_name, new=True):
        return legacy_name
    name = re.sub(r"[^A-Za-z0-9._-]+", "-", legacy_name).strip("-.")[:ids.MAX_NAME_LENGTH]
    if ids.name_problem(name) is not None:
        return None
    return f"{name}-{hashlib.sha256(legacy_name.encode()).hexdigest()[:8]}"


def _iso(timestamp: Any) -> str | None:
    if not isinstance(timestamp, (int, float)):
        return None
    try:
        when = _dt.datetime.fromtimestamp(float(timestamp), _dt.timezone.utc)
    except (OverflowError, OSError, ValueError):
        return None
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


def import_runs(store: RunStore, project_dir: Path, path: Path | None = None) -> list[Imported]:
    """Create records for the runs in iterare's file (idempotent).

    Args:
        store: the records of this repository.
        project_dir: the main worktree (what iterare called the project).
        path: the runs file; :func:`runs_file` of ``project_dir`` when None.

    Returns:
        One :class:`Imported` per legacy run, in file order sorted by time.

    Raises:
        UserError: see :func:`load`.
    """
    source = path or runs_file(project_dir)
    data = load(source)
    existing = set(store.run_ids())
    results = []
    for legacy_name, info in sorted(data.items(), key=lambda kv: str(_timestamp(
            kv[1].get("timestamp")))):
        run_id = record_id(legacy_name) if len(legacy_name) <= MAX_LEGACY_NAME else None
        if run_id is None:
            results.append(Imported(legacy_name[:MAX_LEGACY_NAME], None, "skipped",
                                    "not a usable run name"))
            continue
        if run_id in existing:
            results.append(Imported(legacy_name, run_id, "exists",
                                    _settle_lost(store, store.get(run_id)).status))
            continue
        # iterare named every run <prompt>-<8 hex>, its branch and worktree after it: only
        # such a name is looked up, and every path is made from the cleaned id.
        own = run_id == legacy_name
        worktree = project_dir / "workspaces" / run_id
        head = read_ref(store.repo, f"refs/heads/{run_id}".encode()) if own else None
        log = read_log(log_file(run_id)) if own else None
        ended = legacy_outcome.outcome(log) if head else None
        status = ended.status if ended else CLEANED
        base_commit, base_branch = (base_of(store.common_dir, run_id, project_dir)
                                    if head else (None, None))
        timestamp = _timestamp(info.get("timestamp"))
        created = _iso(timestamp)
        times = {"created": created} if created else {}
        has_worktree = bool(head) and worktree.is_dir()
        store.create(
            ids.validate_name(run_id.rsplit("-", 1)[0]), run_id=run_id,
            prompt_name=_text(info.get("prompt_name"), MAX_LEGACY_NAME), prompt_path=None,
            prompt_text=legacy_outcome.prompt_text(worktree) if has_worktree else "",
            base_commit=base_commit, base_branch=base_branch, agent="claude",
            **(ended.fields() if ended else {"status": status}),
            branch=run_id if own else None, head=head.decode() if head else None,
            worktree=str(worktree) if has_worktree else None,
            extra={"legacy": {"run_name": legacy_name, "timestamp": timestamp,
                              "project_dir": _text(info.get("project_dir"), MAX_LEGACY_PATH),
                              "file": str(source)}},
            **times,
        )
        if log:
            store.set_log(run_id, log)
        if head and base_commit:
            store.set_head(run_id, head.decode())  # its changes against the base
        existing.add(run_id)
        results.append(Imported(legacy_name, run_id, "created", status))
    return results
