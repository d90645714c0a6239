"""The run record value (``run.json``) and its status transitions.

The JSON layout is documented in gititerare-records(5). ``"v"`` is the format version;
a reader refuses versions it does not know rather than guessing. Keys this version does
not know are kept in :attr:`RunRecord.unknown` and written back unchanged, so an older
git-iterare never drops what a newer one stored.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from git_iterare.errors import OperationFailed
from git_iterare.runs.extra import RunExtra

if TYPE_CHECKING:
    from typing_extensions import Unpack
from git_iterare.runs.status import (
    ACTIVE,
    CLEANED,
    CREATED,
    ENDED,
    FAILED,
    LOST,
    MERGED,
    RUNNING,
    STARTING,
    STATUS_RANK,
    STATUSES,
    STOPPED,
    SUCCEEDED,
    TIMED_OUT,
    TRANSITIONS,
    InvalidTransition,
    check_transition,
    now_iso,
    parse_iso,
)

#: The statuses and transitions are :mod:`git_iterare.runs.status`'s, named here too.
__all__ = ["ACTIVE", "CLEANED", "CREATED", "ENDED", "FAILED", "FORMAT_VERSION", "LOST",
           "MERGED", "RUNNING", "STARTING", "STATUSES", "STATUS_RANK", "STOPPED", "SUCCEEDED",
           "TIMED_OUT", "TRANSITIONS", "CorruptRecord", "InvalidTransition", "RunRecord",
           "check_transition", "now_iso", "parse_iso", "validate_dict"]

FORMAT_VERSION = 1


class CorruptRecord(OperationFailed):
    """A record that cannot be read: bad JSON, unknown ``"v"``, a missing tree entry.

    Attributes:
        run_id: the run whose record is corrupt.
        problem: what is wrong, one line.
    """

    def __init__(self, run_id: str, problem: str):
        super().__init__(f"run record {run_id} is corrupt: {problem}",
                         hint=f"inspect it with `git log -p refs/iterare/runs/{run_id}`")
        self.run_id = run_id
        self.problem = problem


@dataclass(frozen=True)
class RunRecord:
    """Everything known about one run; ``run.json`` in the record tree.

    Timestamps are ISO 8601 UTC strings; ``cost_usd`` is US dollars; ``tokens`` maps a
    kind (``input``, ``output``, ...) to a count; ``changes`` is ``{"files", "insertions",
    "deletions"}`` of ``base_commit..head``, stored when the head is set; ``placement``
    is where its trees live (``local``, ``remote``: :mod:`git_iterare.runner.placement`).
    """

    id: str
    name: str
    status: str = CREATED
    prompt_name: str | None = None
    prompt_path: str | None = None
    base_commit: str | None = None
    base_branch: str | None = None
    branch: str | None = None
    agent: str | None = None
    image: str | None = None
    image_digest: str | None = None
    policy: dict[str, Any] = field(default_factory=dict)
    exit_code: int | None = None
    created: str | None = None
    started: str | None = None
    finished: str | None = None
    cost_usd: float | None = None
    tokens: dict[str, Any] = field(default_factory=dict)
    turns: int | None = None
    error: str | None = None
    container: str | None = None
    placement: str | None = None
    worktree: str | None = None
    head: str | None = None
    egress: dict[str, Any] | None = None
    changes: dict[str, int] | None = None
    extra: RunExtra = field(default_factory=lambda: RunExtra())
    #: Top-level keys of run.json this version does not know; written back as they were.
    unknown: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    def replace(self, **fields: Any) -> RunRecord:
        """Return a copy with ``fields`` changed (``dataclasses.replace``).

        Raises:
            TypeError: a field name that does not exist.
        """
        return dataclasses.replace(self, **fields)

    def with_extra(self, **changes: Unpack[RunExtra]) -> RunRecord:
        """Return a copy whose ``extra`` has ``changes`` (typed keys of
        :class:`~git_iterare.runs.extra.RunExtra`) over the keys it had."""
        extra: RunExtra = {**self.extra, **changes}
        return dataclasses.replace(self, extra=extra)

    def to_dict(self) -> dict[str, Any]:
        """The JSON object written as ``run.json`` (``"v"`` first, then fields, then unknown)."""
        data: dict[str, Any] = {"v": FORMAT_VERSION}
        for f in dataclasses.fields(self):
            if f.name != "unknown":
                data[f.name] = getattr(self, f.name)
        for key, value in self.unknown.items():
            data.setdefault(key, value)
        return data

    def to_json(self, redact: Callable[[Any], Any] | None = None) -> bytes:
        """``run.json`` bytes: UTF-8, indented, keys in a fixed order, trailing newline.

        Args:
            redact: applied to the fields that hold what the agent printed or made, and
                to them only (:data:`AGENT_FIELDS`, :data:`AGENT_EXTRA`); for instance
                :meth:`git_iterare.redaction.Redactor.redact_value`. git iterare's own
                fields (id, status, times, commits, branch, container, host...) must stay
                valid whatever value a secret has.
        """
        data = self.to_dict()
        if redact is not None:
            for key in AGENT_FIELDS:
                data[key] = redact(data[key])
            data["extra"] = {k: redact(v) if k in AGENT_EXTRA else v
                             for k, v in data["extra"].items()}
        return (json.dumps(data, indent=2, ensure_ascii=False) + "\n").encode()

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], run_id: str = "?") -> RunRecord:
        """Build a record from parsed ``run.json``.

        Raises:
            CorruptRecord: see :func:`validate_dict`.
        """
        validate_dict(data, run_id)
        values = {k: v for k, v in data.items() if k in _FIELDS
                  and not (v is None and k in _OBJECT_FIELDS)}
        unknown = {k: v for k, v in data.items() if k not in _FIELDS and k != "v"}
        return cls(**values, unknown=unknown)

    @classmethod
    def from_json(cls, raw: bytes, run_id: str = "?") -> RunRecord:
        """Parse ``run.json`` bytes.

        Raises:
            CorruptRecord: invalid UTF-8 or JSON, or see :meth:`from_dict`.
        """
        try:
            data = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise CorruptRecord(run_id, f"run.json is not valid JSON ({exc})") from None
        return cls.from_dict(data, run_id)

    @property
    def sort_time(self) -> str:
        """The creation time, for newest-first ordering (ISO strings sort as times)."""
        return self.created or ""


#: Fields of ``run.json`` that hold what the agent printed or made: the error line (its
#: own words when it reported an error) and the egress report (the names it looked up).
AGENT_FIELDS = ("error", "egress")
#: Keys of ``extra`` that do: the paths it left that were not committed, and why its work
#: could not be committed.
AGENT_EXTRA = ("skipped", "unfinished")

_FIELDS = frozenset(f.name for f in dataclasses.fields(RunRecord)) - {"unknown"}
_OBJECT_FIELDS = ("policy", "tokens", "extra")
#: The other fields of ``run.json`` with their types (None is always allowed).
_TYPED: tuple[tuple[str, type | tuple[type, ...], str], ...] = (
    *((key, str, "a string") for key in (
        "prompt_name", "prompt_path", "base_commit", "base_branch", "branch", "agent",
        "image", "image_digest", "created", "started", "finished", "error", "container",
        "placement", "worktree", "head")),
    ("exit_code", int, "a whole number"), ("turns", int, "a whole number"),
    ("cost_usd", (int, float), "a number"), ("egress", dict, "an object"),
    ("changes", dict, "an object"),
)


def validate_dict(data: Any, run_id: str = "?") -> None:
    """Check parsed ``run.json`` without building a record (listing checks many).

    Raises:
        CorruptRecord: not an object, a missing or unknown ``"v"``, ``id``/``name``/
            ``status`` missing or not strings, an unknown status, ``policy``/``tokens``/
            ``extra`` not objects, or another field not of its type (``_TYPED``).
    """
    if not isinstance(data, Mapping):
        raise CorruptRecord(run_id, "run.json is not a JSON object")
    version = data.get("v")
    if version != FORMAT_VERSION:
        raise CorruptRecord(run_id, f"run.json has unknown format version {version!r}")
    for key in ("id", "name", "status"):
        if not isinstance(data.get(key), str):
            raise CorruptRecord(run_id, f"run.json field {key!r} is missing or not a string")
    if data["status"] not in STATUSES:
        raise CorruptRecord(run_id, f"run.json has unknown status {data['status']!r}")
    for key in _OBJECT_FIELDS:
        if data.get(key) is not None and not isinstance(data[key], dict):
            raise CorruptRecord(run_id, f"run.json field {key!r} is not an object")
    # A record may come from a remote (`git iterare fetch`): every command reads these as
    # their types.
    for key, kinds, what in _TYPED:
        value = data.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, kinds)):
            raise CorruptRecord(run_id, f"run.json field {key!r} is not {what}")
    changes = data.get("changes")
    if changes is not None and not all(
            isinstance(v, int) and not isinstance(v, bool) for v in changes.values()):
        raise CorruptRecord(run_id, "run.json field 'changes' holds a value that is no count")
