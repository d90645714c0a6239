"""Importing the run history of iterare (PyPI ``iterare-llm``).

iterare kept its runs in ``<cache>/runs/runs-<hash>.json``, where ``<cache>`` is
platformdirs' user cache dir for ``iterare`` (on Linux ``$XDG_CACHE_HOME/iterare``, by
default ``~/.cache/iterare``) and ``<hash>`` is the first 16 hex digits of the SHA-256 of
the resolved project path. The file maps a run name to
``{"prompt_name": str, "timestamp": float (Unix seconds), "project_dir": str}``; the run's
work was on the branch ``<run name>`` in the worktree ``<project>/workspaces/<run name>``.

iterare did not record how a run ended, so an imported run gets status ``lost`` while its
branch still exists (the branch tip becomes the record's ``head``, so that work stays
reachable), and ``cleaned`` once its branch is gone. Its prompt text was not kept either:
``prompt.md`` is empty. Re-importing skips runs that already have a record.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from git_iterare.errors import UserError
from git_iterare.runs import ids
from git_iterare.runs.cas import read_ref
from git_iterare.runs.record import CLEANED, LOST
from git_iterare.runs.store import RunStore

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


def project_hash(project_dir: Path) -> str:
    """First 16 hex digits of SHA-256 of the resolved project path, as iterare names it."""
    return hashlib.sha256(str(project_dir.resolve()).encode()).hexdigest()[:PROJECT_HASH_LENGTH]


def runs_file(project_dir: Path) -> Path:
    """Where iterare kept the runs of ``project_dir``."""
    return cache_dir() / "runs" / f"runs-{project_hash(project_dir)}.json"


def load(path: Path) -> dict[str, dict[str, Any]]:
    """Read a legacy runs file.

    Raises:
        UserError: missing, unreadable, not JSON, or not ``{name: {...}}``.
    """
    try:
        data = json.loads(path.read_bytes())
    except FileNotFoundError:
        raise UserError(f"no iterare run history at {path}",
                        hint="give the file with --file PATH") from None
    except OSError as exc:
        raise UserError(f"cannot read {path}: {exc.strerror}") from None
    except ValueError as exc:
        raise UserError(f"{path} is not valid JSON ({exc})") from None
    if not isinstance(data, dict) or not all(isinstance(v, dict) for v in data.values()):
        raise UserError(f"{path} is not an iterare runs file",
                        hint="expected {\"run name\": {\"prompt_name\": ..., ...}}")
    return data


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
    for legacy_name, info in sorted(data.items(), key=lambda kv: str(kv[1].get("timestamp"))):
        run_id = record_id(legacy_name)
        if run_id is None:
            results.append(Imported(legacy_name, None, "skipped", "not a usable run name"))
            continue
        if run_id in existing:
            results.append(Imported(legacy_name, run_id, "exists", store.get(run_id).status))
            continue
        project = Path(str(info.get("project_dir") or project_dir))
        worktree = project / "workspaces" / legacy_name
        head = read_ref(store.repo, f"refs/heads/{legacy_name}".encode()) \
            if ids.name_problem(legacy_name) is None else None
        status = LOST if head else CLEANED
        created = _iso(info.get("timestamp"))
        prompt_name = info.get("prompt_name") if isinstance(info.get("prompt_name"), str) \
            else None
        times = {"created": created} if created else {}
        store.create(
            ids.validate_name(run_id.rsplit("-", 1)[0]), run_id=run_id,
            prompt_name=prompt_name, prompt_path=None, prompt_text="",
            base_commit=None, base_branch=None, agent="claude", status=status,
            branch=legacy_name, head=head.decode() if head else None,
            worktree=str(worktree) if head and worktree.is_dir() else None,
            extra={"legacy": {"run_name": legacy_name, "timestamp": info.get("timestamp"),
                              "project_dir": info.get("project_dir"), "file": str(source)}},
            **times,
        )
        existing.add(run_id)
        results.append(Imported(legacy_name, run_id, "created", status))
    return results
