"""Terminal output: colors, warnings and errors.

Whether to color follows, highest first: ``--color=always|never|auto``; ``NO_COLOR``
(https://no-color.org: any non-empty value turns color off); git's ``color.iterare``,
then ``color.ui`` (``always``, ``never``, ``auto``, ``true``, ``false``); then ``auto``,
which colors only when the stream is a terminal. git's config is read only when a colored
line is about to be printed, so commands that print plain text never pay for it.
"""

from __future__ import annotations

import os
import sys
from typing import TextIO

#: Set by the CLI from ``--color``: "always", "never", "auto" or None (not given).
COLOR_FLAG: str | None = None

_decided: dict[int, bool] = {}

_CODES = {
    "red": "\033[31m",
    "green": "\033[32m",
    "yellow": "\033[33m",
    "blue": "\033[34m",
    "magenta": "\033[35m",
    "cyan": "\033[36m",
    "bold": "\033[1m",
    "dim": "\033[2m",
}
_RESET = "\033[0m"


def _git_color_setting() -> str | None:
    from git_iterare.repo import read_git_config

    try:
        entries = read_git_config(r"^color\.(ui|iterare)$")
    except Exception:  # a broken git config must not stop us from printing
        return None
    values = {e.key: e.value.lower() for e in entries}
    return values.get("color.iterare") or values.get("color.ui")


def color_enabled(stream: TextIO | None = None) -> bool:
    """Whether to color output written to ``stream`` (stdout when None)."""
    stream = stream or sys.stdout
    key = id(stream)
    if key not in _decided:
        setting = COLOR_FLAG
        if setting is None and os.environ.get("NO_COLOR"):
            setting = "never"
        if setting is None:
            setting = _git_color_setting() or "auto"
        if setting in ("always", "true"):
            enabled = True
        elif setting in ("never", "false"):
            enabled = False
        else:
            enabled = stream.isatty() and os.environ.get("TERM") != "dumb"
        _decided[key] = enabled
    return _decided[key]


def paint(text: str, *styles: str, stream: TextIO | None = None) -> str:
    """Return ``text`` wrapped in ANSI styles (names in ``_CODES``) when color is on."""
    if not styles or not color_enabled(stream):
        return text
    return "".join(_CODES[s] for s in styles) + text + _RESET


def warn(message: str) -> None:
    """Print ``warning: message`` to stderr."""
    print(paint("warning:", "yellow", stream=sys.stderr), message, file=sys.stderr)


def error(message: str) -> None:
    """Print ``error: message`` to stderr."""
    print(paint("error:", "red", "bold", stream=sys.stderr), message, file=sys.stderr)


def reset() -> None:
    """Forget cached color decisions (tests, and after ``--color`` is parsed)."""
    _decided.clear()
