"""The three kinds of error git-iterare reports, and its exit codes.

* :class:`UserError` -- the user asked for something that cannot be done as asked (bad
  input, bad config, not in a repository). Printed as one line; exit status 2 by default.
* :class:`OperationFailed` -- a valid request that failed (a merge conflict, a run that
  failed). One line; exit status 1.
* :class:`ExternalError` -- a tool we called failed (git, Docker). Carries the command,
  its exit code and its stderr; exit status 1.

Anything else escaping to the top level is a bug: the traceback is printed with a line
asking to report it.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence


class ExitCode(enum.IntEnum):
    """Exit statuses, as documented in git-iterare(1) under EXIT STATUS."""

    OK = 0
    FAILED = 1
    USAGE = 2
    INTERRUPTED = 130


class IterareError(Exception):
    """Base class of the errors shown to the user as one line.

    Args:
        message: the line to print, without a trailing period-free "error:" prefix.
        hint: an optional second sentence naming the command or change that fixes it.
        exit_code: the process exit status when this error ends the command.
    """

    default_exit = ExitCode.FAILED

    def __init__(self, message: str, *, hint: str | None = None, exit_code: int | None = None):
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.exit_code = int(self.default_exit if exit_code is None else exit_code)

    def render(self) -> str:
        """Return the single line printed for this error (message, then the hint)."""
        return f"{self.message} ({self.hint})" if self.hint else self.message


class UserError(IterareError):
    """Bad usage or bad input: config, prompt files, names, arguments. Exit status 2."""

    default_exit = ExitCode.USAGE


class OperationFailed(IterareError):
    """A valid request that could not be carried out. Exit status 1."""

    default_exit = ExitCode.FAILED


class ExternalError(IterareError):
    """A tool we ran failed.

    Args:
        argv: the command line that was run (secrets already redacted).
        returncode: its exit status.
        stderr: what it printed on stderr, decoded.
        message: optional summary; defaults to the last line of stderr.
    """

    default_exit = ExitCode.FAILED

    def __init__(
        self,
        argv: Sequence[str],
        returncode: int,
        stderr: str,
        message: str | None = None,
        *,
        hint: str | None = None,
    ):
        last = stderr.strip().splitlines()[-1] if stderr.strip() else f"exit status {returncode}"
        super().__init__(message or f"`{' '.join(argv)}` failed: {last}", hint=hint)
        self.argv = list(argv)
        self.returncode = returncode
        self.stderr = stderr


def spelled(value: object) -> str:
    """``value`` from a TOML or YAML file as its author wrote it, for an error message:
    ``true``/``false`` for booleans (both formats' spelling), Python's ``repr`` for the
    rest (strings quoted, so an empty or blank one shows)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return repr(value)
