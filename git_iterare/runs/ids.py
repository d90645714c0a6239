"""Run names, run ids and the ref names derived from them.

A run id is ``<name>-<8 hex digits>``; its record lives at ``refs/iterare/runs/<id>`` and
its work on the branch ``iterare/<id>``. Names must be usable as a single ref name
component, so they follow git-check-ref-format(1) and refuse ``/`` as well.
"""

from __future__ import annotations

import re

from git_iterare.errors import UserError

RUNS_PREFIX = "refs/iterare/runs/"
NOTES_REF = "refs/notes/iterare"
BRANCH_PREFIX = "iterare/"

#: Longest accepted name, so ids and branch names stay readable and within file name limits.
MAX_NAME_LENGTH = 100

_ID_RE = re.compile(r"^(?P<name>.+)-(?P<suffix>[0-9a-f]{8})$")
# Characters git-check-ref-format(1) refuses anywhere in a ref name, plus "/" (one component).
_FORBIDDEN = set(" ~^:?*[\\/")


def name_problem(name: str) -> str | None:
    """Return why ``name`` cannot be a run name, or None when it can.

    The rules are git-check-ref-format(1)'s for one component, plus: no ``/``, no
    whitespace, no leading ``-``, at most :data:`MAX_NAME_LENGTH` characters.
    """
    if not name:
        return "it is empty"
    if len(name) > MAX_NAME_LENGTH:
        return f"it is longer than {MAX_NAME_LENGTH} characters"
    if name.startswith("-"):
        return "it starts with '-'"
    if name.startswith("."):
        return "it starts with '.'"
    if ".." in name:
        return "it contains '..'"
    if "@{" in name or name == "@":
        return "it contains '@{' or is '@'"
    if name.endswith(".") or name.endswith(".lock"):
        return "it ends with '.' or '.lock'"
    for char in name:
        if ord(char) < 32 or ord(char) == 127:
            return "it contains a control character"
        if char.isspace():
            return "it contains whitespace"
        if char in _FORBIDDEN:
            return f"it contains {char!r}"
    return None


def validate_name(name: str) -> str:
    """Return ``name`` when it is a valid run name.

    Raises:
        UserError: with the rule it breaks (exit status 2).
    """
    problem = name_problem(name)
    if problem is not None:
        raise UserError(f"invalid run name {name!r}: {problem}",
                        hint="use letters, digits, '-', '_' and '.'")
    return name


def new_run_id(name: str) -> str:
    """Return a fresh run id ``<name>-<8 random hex digits>``.

    Raises:
        UserError: ``name`` is not a valid run name.
    """
    import secrets  # hashlib and hmac: not needed to list

    return f"{validate_name(name)}-{secrets.token_hex(4)}"


def is_run_id(text: str) -> bool:
    """Whether ``text`` has the shape of a run id with a valid name."""
    match = _ID_RE.match(text)
    return match is not None and name_problem(match.group("name")) is None


def validate_run_id(run_id: str) -> str:
    """Return ``run_id`` when it is a well-formed run id.

    Raises:
        UserError: it is not ``<name>-<8 hex>`` with a valid name.
    """
    if not is_run_id(run_id):
        raise UserError(f"invalid run id {run_id!r}", hint="expected <name>-<8 hex digits>")
    return run_id


def run_ref(run_id: str) -> str:
    """The record ref of a run: ``refs/iterare/runs/<id>``."""
    return RUNS_PREFIX + run_id


def run_branch(run_id: str) -> str:
    """The branch (short name) of a run: ``iterare/<id>``."""
    return BRANCH_PREFIX + run_id
