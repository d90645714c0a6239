"""``refs/notes/iterare``: which run, prompt and agent made a commit.

Each annotated commit's note holds one JSON line per run that produced or touched it,
``{"run": ..., "prompt": ..., "agent": ..., "status": ...}``, so ``git log --notes=iterare``
shows them. A line for a run that is already in the note replaces it; other lines stay.
The notes ref moves by compare-and-swap like records do (dulwich's ``Notes.set_note``
moves it unconditionally, which could lose a concurrent writer's note); tree fan-out is
handled by dulwich's :class:`~dulwich.notes.NotesTree`.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Mapping
from typing import Any

from dulwich.notes import NotesTree
from dulwich.objects import Commit, Tree
from dulwich.repo import Repo as DulwichRepo

from git_iterare.errors import UserError
from git_iterare.runs.cas import IDENTITY, Unchanged, add_object, cas_update, oid
from git_iterare.runs.ids import NOTES_REF

#: Keys of a note line, in the order they are written.
NOTE_KEYS = ("run", "prompt", "agent", "status")


def format_line(entry: Mapping[str, Any]) -> str:
    """One note line: the :data:`NOTE_KEYS` first, then any other keys, compact JSON."""
    ordered = {k: entry.get(k) for k in NOTE_KEYS}
    ordered.update({k: v for k, v in entry.items() if k not in ordered})
    return json.dumps(ordered, ensure_ascii=False, separators=(", ", ": "))


def merge_lines(old: str, new_lines: Iterable[str]) -> str:
    """Combine note text: a new line replaces an old line of the same run; others are kept
    (exact duplicates dropped). Lines that are not JSON objects are kept as they are."""
    lines: list[str] = []
    for line in [*old.splitlines(), *new_lines]:
        if not line.strip() or line in lines:
            continue
        run = _run_of(line)
        if run is not None:
            lines = [x for x in lines if _run_of(x) != run]
        lines.append(line)
    return "".join(f"{line}\n" for line in lines)


def _run_of(line: str) -> str | None:
    try:
        data = json.loads(line)
    except ValueError:
        return None
    return data.get("run") if isinstance(data, dict) else None


def _notes_tree(repo: DulwichRepo, commit_id: bytes | None) -> tuple[NotesTree, Tree]:
    if commit_id is None:
        tree = Tree()
        add_object(repo, tree)
    else:
        commit = repo[commit_id]
        assert isinstance(commit, Commit)
        obj = repo[commit.tree]
        assert isinstance(obj, Tree)
        tree = obj
    return NotesTree(tree, repo.object_store), tree


def read_note(repo: DulwichRepo, commit: str) -> str | None:
    """The iterare note of ``commit`` (40 hex), or None."""
    from git_iterare.runs.cas import read_ref

    head = read_ref(repo, NOTES_REF.encode())
    if head is None:
        return None
    notes, _ = _notes_tree(repo, head)
    data = notes.get_note(commit.encode())
    return data.decode("utf-8", "replace") if data is not None else None


def write_notes_commit(repo: DulwichRepo, tree_id: bytes, parents: list[bytes], message: str
                       ) -> bytes:
    """Write a notes commit for ``tree_id`` and return its id."""
    commit = Commit()
    commit.tree = tree_id
    commit.parents = [oid(p) for p in parents]
    commit.author = commit.committer = IDENTITY
    commit.author_time = commit.commit_time = int(time.time())
    commit.author_timezone = commit.commit_timezone = 0
    commit.message = message.encode() + b"\n"
    add_object(repo, commit)
    return commit.id


def add_note(repo: DulwichRepo, commits: Iterable[str], entry: Mapping[str, Any]) -> None:
    """Add (or replace) ``entry``'s line in the notes of ``commits``.

    Args:
        commits: 40-hex commit ids the run produced.
        entry: at least ``run``; usually ``prompt``, ``agent`` and ``status`` too.

    Raises:
        UserError: ``entry`` has no ``run``, or a commit is not in the repository.
        OperationFailed: the notes ref kept changing (see :func:`cas_update`).
    """
    if not entry.get("run"):
        raise UserError("a note entry needs a 'run'")
    targets = list(dict.fromkeys(commits))
    for sha in targets:
        if oid(sha.encode()) not in repo.object_store:
            raise UserError(f"cannot annotate {sha}: no such commit")
    line = format_line(entry)

    def build(old: bytes | None) -> bytes:
        notes, tree = _notes_tree(repo, old)
        changed = False
        for sha in targets:
            current = notes.get_note(sha.encode())
            text = current.decode("utf-8", "replace") if current is not None else ""
            merged = merge_lines(text, [line])
            if merged != text:
                tree = notes.set_note(sha.encode(), merged.encode())
                changed = True
        if not changed:
            raise Unchanged
        return write_notes_commit(repo, tree.id, [old] if old else [],
                                  f"Notes added by git iterare for run {entry['run']}")

    cas_update(repo, NOTES_REF.encode(), build, f"iterare: note for {entry['run']}")
