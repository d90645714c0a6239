"""What a configuration key is, and how the parts below the runner read settings.

The configuration itself (layers, origins, validation) is :mod:`git_iterare.config`;
this module is the shared ground it and the agents stand on: agents declare their own
keys as :class:`Key` values and read values through :class:`Settings`, so they need not
import the configuration, which asks them for their keys.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
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


def global_config_dir(env: Mapping[str, str] | None = None) -> Path:
    """``$XDG_CONFIG_HOME/iterare``, or ``~/.config/iterare`` (the XDG base directory spec).

    This also holds credentials (0600 files) and is created 0700 by ``git iterare install``.
    """
    env = os.environ if env is None else env
    base = env.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(base) / "iterare"
