"""Fast listing of run records.

``git iterare list`` must stay cheap with thousands of runs, so it does not spawn git per
run and does not parse every record each time:

* refs are read with one scan of ``packed-refs`` and of the loose ``refs/iterare/runs``
  folder (:func:`scan_run_refs`), no subprocess;
* each record commit's ``run.json`` is looked up once with dulwich and kept in a cache file,
  ``<common dir>/iterare/list-cache.json``, keyed by run id and record commit id. A ref that
  moved is simply a cache miss; the cache is derived data and can be deleted at any time.
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from git_iterare.runs import ids
from git_iterare.runs.record import CorruptRecord, RunRecord

if TYPE_CHECKING:
    from git_iterare.runs.store import RunStore

CACHE_VERSION = 1


@dataclass(frozen=True)
class Entry:
    """One run as listed: its id, record commit, and its ``run.json`` or what is wrong.

    Attributes:
        run_id: from the ref name.
        commit: record commit id, 40 hex.
        data: the parsed ``run.json`` (already validated once); None when corrupt.
        problem: one line saying why the record cannot be read; None when fine.
    """

    run_id: str
    commit: str
    data: dict[str, Any] | None
    problem: str | None = None

    @functools.cached_property
    def record(self) -> RunRecord | None:
        """The record (built on first use; listing as JSON never needs it); None if corrupt."""
        return None if self.data is None else RunRecord.from_dict(self.data, self.run_id)

    @property
    def status(self) -> str:
        """The run's status, or ``corrupt``."""
        return "corrupt" if self.data is None else str(self.data.get("status"))


def _packed_refs(common_dir: Path, prefix: str) -> dict[str, str]:
    found: dict[str, str] = {}
    try:
        text = (common_dir / "packed-refs").read_text("utf-8", "replace")
    except OSError:
        return found
    for line in text.splitlines():
        if not line or line[0] in "#^":
            continue
        sha, _, name = line.partition(" ")
        if name.startswith(prefix):
            found[name[len(prefix):]] = sha
    return found


def scan_refs(common_dir: Path, prefix: str) -> dict[str, str]:
    """Map ``name-after-prefix -> object id`` for refs under ``prefix`` (loose wins).

    Args:
        common_dir: the repository's common gitdir.
        prefix: e.g. ``"refs/iterare/runs/"`` (with the trailing slash).
    """
    found = _packed_refs(common_dir, prefix)
    top = common_dir / prefix
    if top.is_dir():
        for dirpath, _dirs, names in os.walk(top):
            rel = os.path.relpath(dirpath, top)
            for name in names:
                if name.endswith(".lock"):
                    continue
                try:
                    with open(os.path.join(dirpath, name), "rb") as handle:
                        value = handle.read(100).strip().decode("ascii", "replace")
                except OSError:
                    continue
                key = name if rel == "." else f"{rel}/{name}"
                if len(value) == 40:
                    found[key] = value
    return found


def scan_run_refs(common_dir: Path) -> dict[str, str]:
    """Map ``run id -> record commit id`` for every ``refs/iterare/runs/<id>``."""
    return scan_refs(common_dir, ids.RUNS_PREFIX)


def _cache_path(common_dir: Path) -> Path:
    return common_dir / "iterare" / "list-cache.json"


def _load_cache(common_dir: Path) -> dict[str, list]:
    try:
        data = json.loads(_cache_path(common_dir).read_bytes())
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict) or data.get("v") != CACHE_VERSION:
        return {}
    entries = data.get("entries")
    return entries if isinstance(entries, dict) else {}


def _save_cache(common_dir: Path, entries: dict[str, list]) -> None:
    path = _cache_path(common_dir)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(exist_ok=True)
        tmp.write_text(json.dumps({"v": CACHE_VERSION, "entries": entries},
                                  separators=(",", ":")))
        os.replace(tmp, path)
    except OSError:  # a read-only repository still lists, only slower
        tmp.unlink(missing_ok=True)


def _entry_from_cache(run_id: str, sha: str, cached: object) -> Entry | None:
    if not (isinstance(cached, list) and len(cached) == 2 and cached[0] == sha):
        return None
    payload = cached[1]
    if not isinstance(payload, dict):
        return None
    if "problem" in payload:
        return Entry(run_id, sha, None, str(payload["problem"]))
    return Entry(run_id, sha, payload)


def iter_entries(common_dir: Path, store: RunStore | None = None) -> Iterator[Entry]:
    """Yield an :class:`Entry` for every record ref (in no particular order).

    Args:
        common_dir: the repository's common gitdir.
        store: an open store to read records that are not cached; opened on the first miss
            when None (so a warm listing never imports dulwich).
    """
    refs = scan_run_refs(common_dir)
    cache = _load_cache(common_dir)
    fresh: dict[str, list] = {}
    missed = False
    for run_id, sha in refs.items():
        entry = _entry_from_cache(run_id, sha, cache.get(run_id))
        if entry is None:
            missed = True
            if store is None:
                from git_iterare.runs.store import RunStore

                store = RunStore(common_dir)
            entry = _read_entry(store, run_id, sha)
            payload = entry.data if entry.data is not None else {"problem": entry.problem}
            fresh[run_id] = [sha, payload]
        else:
            fresh[run_id] = cache[run_id]
        yield entry
    if missed or len(fresh) != len(cache):
        _save_cache(common_dir, fresh)


def _read_entry(store: RunStore, run_id: str, sha: str) -> Entry:
    from git_iterare.runs.store import read_snapshot

    try:
        record = read_snapshot(store.repo, run_id, sha.encode()).record
        return Entry(run_id, sha, record.to_dict())
    except CorruptRecord as exc:
        return Entry(run_id, sha, None, exc.problem)


def load_entries(common_dir: Path, store: RunStore | None = None) -> list[Entry]:
    """Every entry, newest first (by created time, then id); corrupt ones last."""
    entries = list(iter_entries(common_dir, store))
    entries.sort(key=lambda e: (e.data is not None,
                                str(e.data.get("created") or "") if e.data else "", e.run_id),
                 reverse=True)
    return entries
