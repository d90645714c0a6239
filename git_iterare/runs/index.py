"""Fast listing of run records.

``git iterare list`` must stay cheap with thousands of runs, so it does not spawn git per
run and does not parse every record each time:

* refs are read with one scan of ``packed-refs`` and of the loose ``refs/iterare/runs``
  folder (:func:`scan_run_refs`), no subprocess;
* each record commit's ``run.json`` is looked up once (``git cat-file`` for many, dulwich for
  a few) and kept in a cache file, ``<common dir>/iterare/list-cache.json``, keyed by run id
  and record commit id. A ref that moved is simply a cache miss; the cache is derived data
  and can be deleted at any time.

The cache is a JSON header line, then one line per run of tab-separated fields: run id,
record commit, status and created time (JSON strings), the rest of ``run.json`` (JSON, read
only when a field other than those is asked for) and the run's ``list --format json`` item.
JSON text holds no raw tab or newline, so a warm ``list --format json`` splits lines and
decodes almost nothing.
"""

from __future__ import annotations

import datetime as _dt
import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from git_iterare.runs import ids
from git_iterare.runs.status import ACTIVE, parse_iso

if TYPE_CHECKING:
    from dulwich.repo import Repo as DulwichRepo

    from git_iterare.runs.record import RunRecord

CACHE_VERSION = 4
#: Keys of ``run.json`` stored positionally in the cache (arrays decode much faster than
#: objects); any other key of a record is kept in a per-entry object.
#: (Spelled out so listing needs not import the record module; a test checks it.)
CACHE_KEYS = ["v", "id", "name", "status", "prompt_name", "prompt_path", "base_commit",
              "base_branch", "branch", "agent", "image", "image_digest", "policy", "exit_code",
              "created", "started", "finished", "cost_usd", "tokens", "turns", "error",
              "container", "placement", "worktree", "head", "egress", "changes", "extra"]


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

    __slots__ = ("_data", "_fast", "_lazy", "_others", "_record", "_values", "commit",
                 "item_json", "problem", "run_id")

    def __init__(self, run_id: str, commit: str, data: dict[str, Any] | None,
                 problem: str | None = None, item_json: str | None = None, *,
                 values: list[Any] | None = None, others: dict[str, Any] | None = None,
                 lazy: str | None = None, fast: tuple[Any, Any] | None = None):
        self.run_id = run_id
        self.commit = commit
        self.problem = problem
        self.item_json = item_json
        self._data = data
        self._values = values
        self._others = others
        self._lazy = lazy  # the cache's JSON text of [values, others], decoded on demand
        self._fast = fast  # (status, created), known without decoding _lazy
        self._record: RunRecord | None = None

    def _decode(self) -> None:
        import json

        text, self._lazy = self._lazy, None
        try:
            values, others = json.loads(text or "")
            if not isinstance(values, list) or len(values) != len(CACHE_KEYS):
                raise ValueError
        except (ValueError, TypeError):
            self._fast = None
            self.problem = ("the listing cache is damaged; delete iterare/list-cache.json in "
                            "the repository's git directory")
            return
        self._values = values
        self._others = others if isinstance(others, dict) else None

    def __repr__(self) -> str:
        return f"Entry({self.run_id!r}, {self.commit!r}, status={self.status!r})"

    @property
    def ok(self) -> bool:
        """Whether the record could be read."""
        if self._fast is not None:
            return True
        return self._data is not None or self._values is not None

    @property
    def data(self) -> dict[str, Any] | None:
        """The parsed ``run.json`` (validated when it was read); None when corrupt."""
        if self._lazy is not None:
            self._decode()
        if self._data is None and self._values is not None:
            self._data = dict(zip(CACHE_KEYS, self._values, strict=True))
            if self._others:
                self._data.update(self._others)
        return self._data

    def get(self, key: str) -> Any:
        """One ``run.json`` field (None when absent or corrupt), without building the dict."""
        if self._fast is not None and key in _FAST:
            return self._fast[_FAST[key]]
        if self._lazy is not None:
            self._decode()
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


_BREAKS = frozenset("\t\n")


def _header() -> str:
    # json.dumps(..., separators=(",", ":")) of the version and keys, spelled out: a warm
    # listing of ended runs never imports json.
    return f'{{"v":{CACHE_VERSION},"keys":[' + ",".join(f'"{k}"' for k in CACHE_KEYS) + "]}"


def _load_cache(common_dir: Path) -> dict[str, list[str]]:
    """``run id -> [commit, status, created, rest, item]`` (the fields of its line); empty
    when the file is missing or not of this version."""
    try:
        text = _cache_path(common_dir).read_bytes().decode("utf-8", "surrogatepass")
    except (OSError, ValueError):
        return {}
    lines = text.split("\n")
    if lines[0] != _header():
        return {}
    entries: dict[str, list[str]] = {}
    for line in lines[1:]:
        fields = line.split("\t")
        if len(fields) == 6:
            entries[fields[0]] = fields[1:]
    return entries


def _save_cache(common_dir: Path, entries: dict[str, list[str]]) -> None:
    path = _cache_path(common_dir)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    lines = [_header()]
    # Run ids and commit ids come from ref names and files: one with a tab or newline is
    # left out (it is read again next time); the other fields are JSON text.
    lines.extend("\t".join([run_id, *fields]) for run_id, fields in entries.items()
                 if not _BREAKS.intersection(run_id + fields[0]))
    try:
        path.parent.mkdir(exist_ok=True)
        tmp.write_bytes("\n".join(lines).encode("utf-8", "surrogatepass"))
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
    import json

    if entry.data is not None and entry.data.get("status") in ACTIVE:
        return None
    return json.dumps(list_item(entry, _EPOCH), ensure_ascii=False)


_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.timezone.utc)


def _to_cache(entry: Entry) -> list[str]:
    """The fields of ``entry``'s cache line after its run id: ``[commit, status, created,
    rest, item]``; status is empty for a record that cannot be read, and rest is then
    ``[null, problem]``. Sets ``entry.item_json``."""
    item = fixed_item_json(entry)
    entry.item_json = item  # so the listing does not build it again
    data = entry.data
    if data is None:
        rest: list[Any] = [None, entry.problem]
        status = created = ""
    else:
        others = {k: v for k, v in data.items() if k not in _KEY_SET}
        rest = [[data.get(k) for k in CACHE_KEYS], others or None]
        status, created = _dumps_field(data.get("status")), _dumps_field(data.get("created"))
    return [entry.commit, status, created, _dumps(rest), item or ""]


def _dumps(value: Any) -> str:
    import json

    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _dumps_field(value: Any) -> str:
    """A status or created field: :func:`_dumps`, spelled out for plain ASCII text."""
    if isinstance(value, str) and value.isascii() and value.isprintable() \
            and '"' not in value and "\\" not in value:
        return f'"{value}"'
    return _dumps(value)


def _loads_field(text: str) -> Any:
    """A status or created field: a JSON string, decoded without the parser when it has
    no escape."""
    if len(text) >= 2 and text[0] == '"' == text[-1] and "\\" not in text:
        return text[1:-1]
    import json

    return json.loads(text)


_KEY_SET = frozenset(CACHE_KEYS)
_KEY_INDEX = {key: i for i, key in enumerate(CACHE_KEYS)}
_FAST = {"status": 0, "created": 1}


def _entry_from_cache(run_id: str, sha: str, cached: list[str] | None) -> Entry | None:
    if cached is None or cached[0] != sha:
        return None
    status, created, rest, item = cached[1], cached[2], cached[3], cached[4] or None
    try:
        if not status:  # a record that cannot be read: rest is [null, problem]
            import json

            values, problem = json.loads(rest)
            return None if values is not None else Entry(run_id, sha, None, str(problem), item)
        return Entry(run_id, sha, None, None, item, lazy=rest,
                     fast=(_loads_field(status), _loads_field(created)))
    except (ValueError, TypeError):
        return None


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
    fresh: dict[str, list[str]] = {}
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
    import json

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
    return len(text) == 40 and not text.strip("0123456789abcdef")


def _cat_objects(common_dir: Path, names: list[str | None]
                 ) -> list[tuple[bytes, bytes] | None]:
    """``(type, content)`` of each object id in ``names`` (40 hex), in order; None for
    None, for a missing object and for anything git does not answer as expected.

    Loose objects are read here (:func:`_read_loose`: git-iterare writes records as loose
    objects, and one ``git cat-file`` pays several system calls per object); the others
    (packed, in an alternate, large) are asked of one ``git cat-file --batch-command``.

    Raises:
        ExternalError: git failed (an old git without ``--batch-command``).
    """
    objects = os.path.join(common_dir, "objects")
    answers = [None if name is None else _read_loose(objects, name) for name in names]
    rest = [name if answer is None else None for name, answer in zip(names, answers,
                                                                     strict=True)]
    for i, answer in enumerate(_cat_with_git(common_dir, rest)):
        if answer is not None:
            answers[i] = answer
    return answers


#: Objects bigger than this (inflated) are left to git: a record's ``run.json`` is a few KiB.
LOOSE_MAX_BYTES = 1 << 20


def _read_loose(objects: str, name: str) -> tuple[bytes, bytes] | None:
    """``(type, content)`` of the loose object ``name`` (40 hex) under ``objects``, or None
    when it is not a loose object there, is bigger than :data:`LOOSE_MAX_BYTES` or is not
    well formed (git is then asked, and says what it is)."""
    import zlib

    try:
        fd = os.open(f"{objects}/{name[:2]}/{name[2:]}", os.O_RDONLY)
    except OSError:
        return None
    try:
        chunks = [os.read(fd, 1 << 16)]  # a record's objects take one read
        while len(chunks[-1]) == 1 << 16:
            chunks.append(os.read(fd, 1 << 16))
            if len(chunks) << 16 > LOOSE_MAX_BYTES:
                return None
    except OSError:
        return None
    finally:
        os.close(fd)
    inflate = zlib.decompressobj()
    try:
        data = inflate.decompress(b"".join(chunks), LOOSE_MAX_BYTES + 64)
    except zlib.error:
        return None
    if inflate.unconsumed_tail or not inflate.eof:
        return None  # bigger than the bound, or cut short
    nul = data.find(b"\0", 0, 64)
    kind, _, size = data[:max(nul, 0)].partition(b" ")
    if nul < 0 or not size.isdigit() or int(size) != len(data) - nul - 1 \
            or kind not in (b"commit", b"tree", b"blob", b"tag"):
        return None
    return kind, data[nul + 1:]


def _cat_with_git(common_dir: Path, names: list[str | None]
                  ) -> list[tuple[bytes, bytes] | None]:
    """As :func:`_cat_objects`, every object asked of one ``git cat-file`` process."""
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
