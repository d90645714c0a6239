"""The one place git-iterare starts other programs.

Every subprocess goes through :func:`run`, so ``--verbose`` can echo each command line
(with registered secrets redacted) and failures become :class:`~git_iterare.errors.ExternalError`
with the command, exit code and stderr kept. :func:`read_git_config` reads git's own
configuration (all of its files and ``git -c``) through it, for whoever needs a value.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from git_iterare.errors import ExternalError

#: Set by the CLI from ``--verbose``; when true every command line is echoed to stderr.
VERBOSE = False

_SECRETS: set[str] = set()

#: Variables that point git at another repository; dropped when we run git on a gitdir of
#: our own choosing, so the user's GIT_DIR cannot redirect it.
GIT_LOCATION_VARS = (
    "GIT_DIR",
    "GIT_WORK_TREE",
    "GIT_INDEX_FILE",
    "GIT_OBJECT_DIRECTORY",
    "GIT_ALTERNATE_OBJECT_DIRECTORIES",
    "GIT_COMMON_DIR",
    "GIT_NAMESPACE",
    "GIT_PREFIX",
)


def register_secret(value: str) -> None:
    """Redact ``value`` (and its encodings, see :mod:`git_iterare.redaction`) from every
    echoed command line, stored record and shown log from now on.

    Args:
        value: a token, key or password; empty strings are ignored.
    """
    if value:
        _SECRETS.add(value)


def redactor() -> Any:
    """The :class:`git_iterare.redaction.Redactor` of the secrets registered so far."""
    from git_iterare.redaction import current

    return current(_SECRETS)


def redact(text: str) -> str:
    """Return ``text`` with every registered secret, and the common encodings of each,
    replaced by ``***`` (see :mod:`git_iterare.redaction`)."""
    if not _SECRETS:
        return text
    return str(redactor().redact(text))


def run(
    argv: Sequence[str | os.PathLike[str]],
    *,
    cwd: str | os.PathLike[str] | None = None,
    env: Mapping[str, str] | None = None,
    scrub_git_env: bool = False,
    input: str | bytes | None = None,
    check: bool = True,
    text: bool = True,
    capture: bool = True,
    own_group: bool = False,
) -> subprocess.CompletedProcess[Any]:
    """Run a command and return its result.

    Args:
        argv: program and arguments.
        cwd: working directory; the current one when None.
        env: variables to set on top of the inherited environment.
        scrub_git_env: drop :data:`GIT_LOCATION_VARS` from the environment, for git
            commands aimed at a repository we chose rather than the user's.
        input: data written to stdin (str when ``text``, else bytes).
        check: raise :class:`ExternalError` on a non-zero exit status.
        text: decode stdout and stderr as UTF-8 (invalid bytes replaced).
        capture: capture stdout/stderr; when False they go to ours.
        own_group: run it in a session (and process group) of its own, so the terminal's
            Ctrl-C (SIGINT to the foreground group) does not reach it: for a step that
            must not stop half-way (see :func:`git_iterare.git.merge.merge_run`).

    Returns:
        The completed process, stdout and stderr captured when ``capture``.

    Raises:
        ExternalError: the program exited non-zero and ``check`` is true, or it could not
            be started (exit code 127 then).
    """
    args = [os.fspath(a) for a in argv]
    full_env = dict(os.environ)
    if scrub_git_env:
        for name in GIT_LOCATION_VARS:
            full_env.pop(name, None)
    if env:
        full_env.update(env)
    if VERBOSE:
        where = f" (in {cwd})" if cwd else ""
        print(f"+ {redact(shlex.join(args))}{where}", file=sys.stderr)
    try:
        result = subprocess.run(
            args,
            cwd=cwd,
            env=full_env,
            input=input,
            capture_output=capture,
            text=text,
            encoding="utf-8" if text else None,
            errors="replace" if text else None,
            check=False,
            start_new_session=own_group,
        )
    except FileNotFoundError as exc:
        raise ExternalError(args, 127, str(exc), f"cannot run {args[0]}: not found") from exc
    if check and result.returncode != 0:
        stderr = result.stderr if capture else ""
        if not text and isinstance(stderr, bytes):
            stderr = stderr.decode("utf-8", "replace")
        raise ExternalError([redact(a) for a in args], result.returncode, redact(stderr or ""))
    return result


def git(
    *args: str | os.PathLike[str],
    cwd: str | os.PathLike[str] | Path | None = None,
    **kwargs: Any,
) -> subprocess.CompletedProcess[Any]:
    """Run ``git ARGS`` through :func:`run`; keyword arguments are passed on."""
    return run(["git", *args], cwd=cwd, **kwargs)


@dataclass(frozen=True)
class GitConfigEntry:
    """One value from ``git config``: the key as git prints it (lower case), the value and
    its origin (``file:/path`` or ``command line:``)."""

    key: str
    value: str
    origin: str


def read_git_config(pattern: str, cwd: str | Path | None = None) -> list[GitConfigEntry]:
    """Read git configuration entries whose key matches a regular expression.

    Includes ``git -c`` values (git passes them in ``GIT_CONFIG_PARAMETERS``), and works
    outside a repository (global and system files only).

    Args:
        pattern: extended regular expression matched against lower-cased keys, as
            ``git config --get-regexp`` does.
        cwd: directory to run in.

    Returns:
        Entries in git's order (system, global, local, worktree, command line), so later
        entries override earlier ones.

    Raises:
        ExternalError: git failed (a malformed config file, for instance).
    """
    result = git(
        "config", "-z", "--show-origin", "--get-regexp", pattern, cwd=cwd, check=False
    )
    if result.returncode == 1:  # no key matched
        return []
    if result.returncode != 0:
        raise ExternalError(["git", "config", "--get-regexp", pattern], result.returncode,
                            result.stderr)
    entries = []
    fields = result.stdout.split("\0")
    # -z with --show-origin gives: origin NUL key NEWLINE value NUL
    for origin, keyval in zip(fields[0:-1:2], fields[1::2], strict=True):
        key, _, value = keyval.partition("\n")
        entries.append(GitConfigEntry(key=key, value=value, origin=origin))
    return entries
