"""Run names, run ids and the ref names derived from them.

A run id is ``<name>-<8 hex digits>``; its record lives at ``refs/iterare/runs/<id>`` and
its work on the branch ``iterare/<id>``. A name is checked once, before anything exists,
against every place it ends up: a single ref name component (git-check-ref-format(1), no
``/``), the sandbox's container names (``iterare-<id>``, ``iterare-<id>-net``: Docker
accepts only ``[a-zA-Z0-9][a-zA-Z0-9_.-]+``) and file names (``.iterare/worktrees/<id>``),
so new names use ASCII letters, digits, ``-``, ``_`` and ``.`` only.

Ids of runs that exist already (made by an older version, or fetched from a teammate) are
read with the ref rule alone (:func:`is_run_id`), so they stay listable and removable.
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
#: What Docker accepts in a container name after its first character (ours is ``i``).
_PORTABLE = re.compile(r"[A-Za-z0-9_.-]+\Z")


def name_problem(name: str) -> str | None:
    """Return why ``name`` cannot name a new run, or None when it can.

    The rules are :func:`ref_name_problem`'s, plus those of the other places a name ends
    up (container names, file names): ASCII letters, digits, ``-``, ``_`` and ``.`` only.
    """
    problem = ref_name_problem(name)
    if problem is not None:
        return problem
    if not _PORTABLE.match(name):
        bad = next(char for char in name if not _PORTABLE.match(char))
        return (f"it contains {bad!r} (a name becomes a container name and file names, "
                "which take only ASCII letters, digits, '-', '_' and '.')")
    return None


def ref_name_problem(name: str) -> str | None:
    """Return why ``name`` cannot be one ref name component, or None when it can.

    The rules are git-check-ref-format(1)'s for one component, plus: no ``/``, no
    whitespace, no leading ``-``, at most :data:`MAX_NAME_LENGTH` characters.
    """
    if not name:
        return "it is empty"
    if len(name) > MAX_NAME_LENGTH:
        return f"it has {len(name)} characters; a run name has at most {MAX_NAME_LENGTH}"
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
    if problem is None:
        return name
    hint: str | None
    if len(name) > MAX_NAME_LENGTH:
        hint = "choose a shorter name"
    elif ref_name_problem(name) is None:
        hint = None  # the problem already lists what a name may hold
    else:
        hint = "use letters, digits, '-', '_' and '.'"
    raise UserError(f"invalid run name {shown_name(name)}: {problem}", hint=hint)


def shown_name(name: str) -> str:
    """``name`` quoted for a message, cut to its first 40 characters and ``...`` when it is
    longer than 50 (a name refused for its length must not fill the screen)."""
    return f"{name[:40]!r}..." if len(name) > 50 else repr(name)


def new_run_id(name: str) -> str:
    """Return a fresh run id ``<name>-<8 random hex digits>``.

    Raises:
        UserError: ``name`` is not a valid run name.
    """
    import secrets  # hashlib and hmac: not needed to list

    return f"{validate_name(name)}-{secrets.token_hex(4)}"


def is_run_id(text: str, *, new: bool = False) -> bool:
    """Whether ``text`` has the shape of a run id: ``<name>-<8 hex>`` whose name passes
    :func:`ref_name_problem` (ids that exist, wherever they were made), or with ``new``
    :func:`name_problem` (ids this version makes)."""
    match = _ID_RE.fullmatch(text)
    check = name_problem if new else ref_name_problem
    return match is not None and check(match.group("name")) is None


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
