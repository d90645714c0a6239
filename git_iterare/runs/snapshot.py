"""Reading one record commit: its ``run.json`` as a :class:`RunRecord` and its files.

The lowest layer of the record store, shared by :mod:`.store` (reads and writes records)
and :mod:`.index` (lists them), so listing needs no store: a warm listing imports neither
this module nor dulwich.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from dulwich.objects import Commit, Tree
from dulwich.repo import Repo as DulwichRepo

from git_iterare.errors import UserError
from git_iterare.runs.record import CorruptRecord, RunRecord

#: Files of a record tree.
RUN_JSON = b"run.json"
PROMPT_MD = b"prompt.md"
LOG_JSONL = b"log.jsonl"


@dataclass(frozen=True)
class Snapshot:
    """One record commit as read: its id, the record, and the blob ids of its files.

    Attributes:
        commit: record commit id (40 hex, bytes).
        record: the parsed ``run.json``.
        files: file name (bytes) -> blob id, for every entry of the record tree.
        parents: the commit's parents.
    """

    commit: bytes
    record: RunRecord
    files: Mapping[bytes, bytes]
    parents: tuple[bytes, ...]


def open_repo(path: str | os.PathLike[str] | Any) -> DulwichRepo:
    """Open the dulwich repository for a path, a gitdir, or a :class:`git_iterare.git.repo.Repo`.

    Raises:
        UserError: ``path`` is not a git repository.
    """
    from dulwich.errors import NotGitRepository

    target = getattr(path, "common_dir", path)
    try:
        return DulwichRepo(os.fspath(target))
    except NotGitRepository:
        raise UserError(f"{target} is not a git repository") from None


def read_snapshot(repo: DulwichRepo, run_id: str, commit_id: bytes) -> Snapshot:
    """Read the record commit ``commit_id`` of ``run_id``.

    Raises:
        CorruptRecord: the commit, tree, ``run.json`` or ``prompt.md`` is missing or bad, or
            ``run.json`` names another run.
    """
    try:
        commit = repo[commit_id]
        if not isinstance(commit, Commit):
            raise CorruptRecord(run_id, f"{commit_id.decode()} is not a commit")
        tree = repo[commit.tree]
    except KeyError as exc:
        raise CorruptRecord(run_id, f"object {exc} is missing") from None
    assert isinstance(tree, Tree)
    files = {entry.path: entry.sha for entry in tree.items()}
    for needed in (RUN_JSON, PROMPT_MD):
        if needed not in files:
            raise CorruptRecord(run_id, f"the record tree has no {needed.decode()}")
    try:
        blob = repo[files[RUN_JSON]]
    except KeyError:
        raise CorruptRecord(run_id, "the run.json blob is missing") from None
    record = RunRecord.from_json(blob.as_raw_string(), run_id)
    if record.id != run_id:
        raise CorruptRecord(run_id, f"run.json names another run ({record.id!r})")
    return Snapshot(commit_id, record, files, tuple(commit.parents))
