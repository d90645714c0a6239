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

import datetime as _dt
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from git_iterare.runs import ids
from git_iterare.runs.status import ACTIVE, parse_iso

if TYPE_CHECKING:
    from dulwich.repo import Repo as DulwichRepo

    from git_iterare.runs.record import RunRecord

CACHE_VERSION = 2
#: Keys of ``run.json`` stored positionally in the cache (arrays decode much faster than
#: objects); any other key of a record is kept in a per-entry object.
#: (Spelled out so listing needs not import the record module; a test checks it.)
CACHE_KEYS = ["v", "id", "name", "status", "prompt_name", "prompt_path", "base_commit",
              "base_branch", "branch", "agent", "image", "image_digest", "policy", "exit_code",
              "created", "started", "finished", "cost_usd", "tokens", "turns", "error",
              "container", "worktree", "head", "egress", "changes", "extra"]


class Entry:
    """One run as listed: its id, record commit, and its ``run.json`` or what is wrong.

    A plain class with slots rather than a dataclass: ``list`` makes one per run, and a
    cached entry keeps ``run.json`` as the positional values of the cache until asked.

    Attributes:
        run_id: from the ref name.
        commit: record commit id, 40 hex.
        problem: one line saying why the record cannot be read; None when fine.
        item_json: this run's object in ``list --format json``, kept in the cache for runs
            that ended (it no longer depends on the time); None otherwise.
    """

    __slots__ = ("_data", "_others", "_record", "_values", "commit", "item_json", "problem",
                 "run_id")

    def __init__(self, run_id: str, commit: str, data: dict[str, Any] | None,
                 problem: str | None = None, item_json: str | None = None, *,
                 values: list | None = None, others: dict[str, Any] | None = None):
        self.run_id = run_id
        self.commit = commit
        self.problem = problem
        self.item_json = item_json
        self._data = data
        self._values = values
        self._others = others
        self._record: RunRecord | None = None

    def __repr__(self) -> str:
        return f"Entry({self.run_id!r}, {self.commit!r}, status={self.status!r})"

    @property
    def ok(self) -> bool:
        """Whether the record could be read."""
        return self._data is not None or self._values is not None

    @property
    def data(self) -> dict[str, Any] | None:
        """The parsed ``run.json`` (validated when it was read); None when corrupt."""
        if self._data is None and self._values is not None:
            self._data = dict(zip(CACHE_KEYS, self._values, strict=True))
            if self._others:
                self._data.update(self._others)
        return self._data

    def get(self, key: str) -> Any:
        """One ``run.json`` field (None when absent or corrupt), without building the dict."""
        if self._values is not None and key in _KEY_INDEX:
            return self._values[_KEY_INDEX[key]]
        data = self.data
        return None if data is None else data.get(key)

    @property
    def record(self) -> RunRecord | None:
        """The record, built on first use (``list --format json`` never needs it)."""
        data = self.data
        if self._record is None and data is not None:
            from git_iterare.runs.record import RunRecord

            self._record = RunRecord.from_dict(data, self.run_id)
        return self._record

    @property
    def status(self) -> str:
        """The run's status, or ``corrupt``."""
        return str(self.get("status")) if self.ok else "corrupt"


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
    _scan_loose(os.path.join(common_dir, prefix), "", found)
    return found


def _scan_loose(folder: str, rel: str, found: dict[str, str]) -> None:
    # os.scandir and raw os.read: this loop runs once per run on every `list`.
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return
    for entry in entries:
        if entry.is_dir(follow_symlinks=False):
            _scan_loose(entry.path, f"{rel}{entry.name}/", found)
            continue
        if entry.name.endswith(".lock"):
            continue
        try:
            fd = os.open(entry.path, os.O_RDONLY)
        except OSError:
            continue
        try:
            value = os.read(fd, 64)
        finally:
            os.close(fd)
        if len(value) >= 40 and not value.startswith(b"ref:"):
            found[rel + entry.name] = value[:40].decode("ascii", "replace")


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
    if not isinstance(data, dict) or data.get("v") != CACHE_VERSION \
            or data.get("keys") != CACHE_KEYS:
        return {}
    entries = data.get("entries")
    return entries if isinstance(entries, dict) else {}


def _save_cache(common_dir: Path, entries: dict[str, list]) -> None:
    path = _cache_path(common_dir)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(exist_ok=True)
        tmp.write_text(json.dumps({"v": CACHE_VERSION, "keys": CACHE_KEYS, "entries": entries},
                                  separators=(",", ":"), ensure_ascii=False))
        os.replace(tmp, path)
    except OSError:  # a read-only repository still lists, only slower
        tmp.unlink(missing_ok=True)


# -- the listing's items: the JSON object of each run in ``list --format json`` (kept in the
# cache for runs that ended, so a warm listing only joins strings).

#: Keys of each run in ``list --format json``, in order.
LIST_JSON_KEYS = ("id", "status", "name", "prompt_name", "agent", "branch", "base_branch",
                  "base_commit", "head", "created", "started", "finished", "duration_s",
                  "cost_usd", "changes", "problem")

#: The status shown for a record that cannot be read.
CORRUPT = "corrupt"


def span(status: str, started: str | None, finished: str | None, now: _dt.datetime
         ) -> float | None:
    """Seconds from ``started`` to ``finished`` (or ``now`` for an active ``status``)."""
    start = parse_iso(started)
    if start is None:
        return None
    end = parse_iso(finished) or (now if status in ACTIVE else None)
    return max(0.0, (end - start).total_seconds()) if end else None


def list_item(entry: Entry, now: _dt.datetime) -> dict[str, Any]:
    """One run of ``list --format json`` (keys :data:`LIST_JSON_KEYS`)."""
    data = entry.data
    if data is None:
        item: dict[str, Any] = dict.fromkeys(LIST_JSON_KEYS)
        item.update(id=entry.run_id, status=CORRUPT, problem=entry.problem)
        return item
    item = {k: data.get(k) for k in LIST_JSON_KEYS}
    duration = span(data.get("status", ""), data.get("started"), data.get("finished"), now)
    item["duration_s"] = round(duration, 3) if duration is not None else None
    item["problem"] = None
    return item


def fixed_item_json(entry: Entry) -> str | None:
    """The JSON text of :func:`list_item` when it no longer changes with time (the run is
    not active), for the listing cache; None for active runs."""
    if entry.data is not None and entry.data.get("status") in ACTIVE:
        return None
    return json.dumps(list_item(entry, _EPOCH), ensure_ascii=False)


_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.timezone.utc)


def _to_cache(entry: Entry) -> list:
    """``[commit, values in CACHE_KEYS order, other keys, item JSON]``, or
    ``[commit, None, problem, item JSON]``."""
    item = fixed_item_json(entry)
    entry.item_json = item  # so the listing does not build it again
    if entry.data is None:
        return [entry.commit, None, entry.problem, item]
    others = {k: v for k, v in entry.data.items() if k not in _KEY_SET}
    return [entry.commit, [entry.data.get(k) for k in CACHE_KEYS], others or None, item]


_KEY_SET = frozenset(CACHE_KEYS)
_KEY_INDEX = {key: i for i, key in enumerate(CACHE_KEYS)}


def _entry_from_cache(run_id: str, sha: str, cached: object) -> Entry | None:
    if not (isinstance(cached, list) and len(cached) == 4 and cached[0] == sha):
        return None
    values, extra, item = cached[1], cached[2], cached[3]
    item = item if isinstance(item, str) else None
    if values is None:
        return Entry(run_id, sha, None, str(extra), item)
    if not isinstance(values, list) or len(values) != len(CACHE_KEYS):
        return None
    return Entry(run_id, sha, None, None, item, values=values,
                 others=extra if isinstance(extra, dict) else None)


#: With more uncached records than this, they are read with one ``git cat-file`` process
#: instead of dulwich (which costs about 0.6 ms per record in pure Python).
BATCH_THRESHOLD = 16


def iter_entries(common_dir: Path, repo: DulwichRepo | None = None) -> Iterator[Entry]:
    """Yield an :class:`Entry` for every record ref (in no particular order).

    Args:
        common_dir: the repository's common gitdir.
        repo: the open repository to read records that are not cached from (a
            :class:`~git_iterare.runs.store.RunStore`'s ``repo``); opened on the first miss
            when None (so a warm listing never imports dulwich).
    """
    refs = scan_run_refs(common_dir)
    cache = _load_cache(common_dir)
    fresh: dict[str, list] = {}
    entries: dict[str, Entry | None] = {}
    misses: dict[str, str] = {}
    for run_id, sha in refs.items():
        entries[run_id] = _entry_from_cache(run_id, sha, cache.get(run_id))
        if entries[run_id] is None:
            misses[run_id] = sha
    batch = _read_batch(common_dir, misses) if len(misses) > BATCH_THRESHOLD else {}
    for run_id, sha in refs.items():
        entry = entries[run_id] or batch.get(run_id)
        if entry is None:
            if repo is None:
                from git_iterare.runs.snapshot import open_repo

                repo = open_repo(common_dir)
            entry = _read_entry(repo, run_id, sha)
        fresh[run_id] = cache[run_id] if run_id not in misses else _to_cache(entry)
        yield entry
    if misses or len(fresh) != len(cache):
        _save_cache(common_dir, fresh)


def _read_batch(common_dir: Path, misses: dict[str, str]) -> dict[str, Entry]:
    """Read many records with ``git cat-file --batch-command``: one process for their
    commits, one for their trees, one for their ``run.json`` blobs, so each object is read
    once.

    Returns entries only for records read without trouble or with a bad ``run.json``;
    anything else (a missing object, a commit that is not one, a tree without ``run.json``
    or ``prompt.md``, a ``run.json`` that is not a blob) is left to dulwich, which names the
    exact problem.
    """
    from git_iterare.errors import ExternalError
    from git_iterare.runs.record import CorruptRecord, validate_dict

    order = [(run_id, sha) for run_id, sha in misses.items() if _is_hex40(sha)]
    try:
        commits = _cat_objects(common_dir, [sha for _, sha in order])
        trees = _cat_objects(common_dir, [_tree_of(obj) for obj in commits])
        blobs = _cat_objects(common_dir, [_run_json_of(obj) for obj in trees])
    except ExternalError:
        return {}  # an old git without --batch-command: dulwich reads them one by one
    found: dict[str, Entry] = {}
    for (run_id, sha), blob in zip(order, blobs, strict=True):
        if blob is None or blob[0] != b"blob":
            continue
        try:
            data = json.loads(blob[1])
            validate_dict(data, run_id)
        except ValueError:
            continue  # bad JSON or UTF-8: dulwich's read names the problem
        except CorruptRecord as exc:
            found[run_id] = Entry(run_id, sha, None, exc.problem)
            continue
        if data["id"] == run_id:
            found[run_id] = Entry(run_id, sha, data)
    return found


def _is_hex40(text: str) -> bool:
    return len(text) == 40 and all(c in "0123456789abcdef" for c in text)


def _cat_objects(common_dir: Path, names: list[str | None]
                 ) -> list[tuple[bytes, bytes] | None]:
    """``(type, content)`` of each object id in ``names`` (40 hex), in order; None for
    None, for a missing object and for anything git does not answer as expected.

    Raises:
        ExternalError: git failed (an old git without ``--batch-command``).
    """
    from git_iterare import proc

    wanted = [name for name in names if name is not None]
    if not wanted:
        return [None] * len(names)
    commands = "".join(f"contents {name}\n" for name in wanted).encode()
    out = proc.git("--git-dir", str(common_dir), "cat-file", "--batch-command", "--buffer",
                   input=commands, text=False, scrub_git_env=True).stdout
    answers: list[tuple[bytes, bytes] | None] = []
    pos = 0
    for name in names:
        if name is None:
            answers.append(None)
            continue
        header, pos = _line(out, pos)
        parts = header.split(b" ")
        if len(parts) == 3 and parts[2].isdigit():  # "<oid> <type> <size>", then the object
            size = int(parts[2])
            answers.append((parts[1], out[pos:pos + size]) if parts[0] == name.encode()
                           else None)
            pos += size + 1
        else:
            answers.append(None)  # "<name> missing" or "ambiguous"
    return answers


def _tree_of(commit: tuple[bytes, bytes] | None) -> str | None:
    """The tree id of a commit object, or None when it is not a well-formed commit."""
    if commit is None or commit[0] != b"commit" or not commit[1].startswith(b"tree "):
        return None
    tree = commit[1][5:45].decode("ascii", "replace")
    return tree if commit[1][45:46] == b"\n" and _is_hex40(tree) else None


def _run_json_of(tree: tuple[bytes, bytes] | None) -> str | None:
    """The blob id of ``run.json`` in a record tree, or None when the tree is not one, is
    malformed, or lacks ``run.json`` or ``prompt.md``."""
    if tree is None or tree[0] != b"tree":
        return None
    raw, pos, found = tree[1], 0, {}
    while pos < len(raw):  # entries: "<mode> <name>\0<20-byte id>"
        space = raw.find(b" ", pos)
        nul = raw.find(b"\0", space + 1)
        if space < 0 or nul < 0 or nul + 21 > len(raw):
            return None
        found[raw[space + 1:nul]] = raw[nul + 1:nul + 21]
        pos = nul + 21
    if b"run.json" not in found or b"prompt.md" not in found:
        return None
    return found[b"run.json"].hex()


def _line(data: bytes, pos: int) -> tuple[bytes, int]:
    end = data.find(b"\n", pos)
    end = len(data) if end < 0 else end
    return data[pos:end], end + 1


def _read_entry(repo: DulwichRepo, run_id: str, sha: str) -> Entry:
    from git_iterare.runs.record import CorruptRecord
    from git_iterare.runs.snapshot import read_snapshot

    try:
        record = read_snapshot(repo, run_id, sha.encode()).record
        return Entry(run_id, sha, record.to_dict())
    except CorruptRecord as exc:
        return Entry(run_id, sha, None, exc.problem)


def load_entries(common_dir: Path, repo: DulwichRepo | None = None) -> list[Entry]:
    """Every entry, newest first (by created time, then id); corrupt ones last (``repo``:
    as for :func:`iter_entries`)."""
    entries = list(iter_entries(common_dir, repo))
    entries.sort(key=lambda e: (e.ok, str(e.get("created") or ""), e.run_id), reverse=True)
    return entries
