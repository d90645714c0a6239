"""What a configuration key is, and how the parts below the runner read settings.

The configuration itself (layers, origins, validation) is :mod:`git_iterare.config`;
this module is the shared ground it and the agents stand on: agents declare their own
keys as :class:`Key` values and read values through :class:`Settings`, so they need not
import the configuration, which asks them for their keys.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol


class Settings(Protocol):
    """Read access to the effective configuration (:class:`git_iterare.config.Config`)."""

    def __getitem__(self, name: str) -> Any:
        """The value of ``section.key``.

        Raises:
            KeyError: no such key.
        """


@dataclass(frozen=True)
class Key:
    """A configuration key.

    Attributes:
        name: ``section.key`` as written in TOML (``[section]`` then ``key = ...``).
        type: one of ``str``, ``int``, ``float``, ``bool``, ``list``  (a list of strings).
        default: the built-in value.
        doc: one line for the generated config file and ``config --list``.
        gated: set in a repository's ``.iterare/config.toml`` it acts only after the user
            approved it (``git iterare trust``): it widens the sandbox or chooses what is
            built, sent or read into it (an agent's gateway, install version, credentials).
    """

    name: str
    type: str
    default: Any
    doc: str
    gated: bool = False

    @property
    def section(self) -> str:
        return self.name.split(".", 1)[0]

    @property
    def key(self) -> str:
        return self.name.split(".", 1)[1]


def _folded(name: str) -> str:
    return name.lower().replace("-", "_")


def one_edit(a: str, b: str) -> bool:
    """Whether ``a`` and ``b`` are at most one edit apart, case, ``-`` and ``_`` ignored:
    one letter added, dropped or changed, or two neighbours swapped (``agnet``/``agent``;
    optimal string alignment distance 1)."""
    a, b = _folded(a), _folded(b)
    if a == b:
        return True
    if abs(len(a) - len(b)) > 1:
        return False
    if len(a) == len(b):
        diff = [i for i in range(len(a)) if a[i] != b[i]]
        return len(diff) == 1 or (len(diff) == 2 and diff[1] == diff[0] + 1
                                  and a[diff[0]] == b[diff[1]] and a[diff[1]] == b[diff[0]])
    short, long_ = (a, b) if len(a) < len(b) else (b, a)
    at = next((i for i in range(len(short)) if short[i] != long_[i]), len(short))
    return short[at:] == long_[at + 1:]


def typo_of(name: str, names: Iterable[str]) -> str | None:
    """The key a user most likely meant by an unknown one (``agnet`` for ``agent``): the
    first of ``names`` that ``name`` equals but for case, ``-`` and ``_``, else the first
    it is :func:`one_edit` away from; None when none is."""
    candidates = list(names)
    return next((known for known in candidates if _folded(known) == _folded(name)),
                next((known for known in candidates if one_edit(name, known)), None))


def global_config_dir(env: Mapping[str, str] | None = None) -> Path:
    """``$XDG_CONFIG_HOME/iterare``, or ``~/.config/iterare`` (the XDG base directory spec).

    This also holds credentials (0600 files) and is created 0700 by ``git iterare install``.
    """
    env = os.environ if env is None else env
    base = env.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(base) / "iterare"
