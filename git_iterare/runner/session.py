"""What a command needs before it acts: the repository, the configuration (which also
chooses the container engine) and whether to echo the commands run.

The command line reaches the repository, the engine and the subprocess layer only through
here, so ``cli/`` needs no git plumbing and no Docker.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from git_iterare.git.repo import Repo

if TYPE_CHECKING:
    from git_iterare.config import Config

__all__ = ["Repo", "load_config", "open_repository", "set_verbose"]


def open_repository(path: Path | None = None) -> Repo:
    """The repository at ``path`` (the current directory when None), found as git finds it
    (``GIT_DIR``, ``git -C``, subdirectories, linked worktrees).

    Raises:
        UserError: not inside a repository (exit 2).
        ExternalError: git failed for another reason.
    """
    from git_iterare.git.repo import discover

    return discover(path)


def load_config(repo: Repo | None, overrides: Mapping[str, object]) -> Config:
    """The effective configuration of ``repo`` (None outside a repository) with the
    command line's ``section.key`` -> value ``overrides`` on top; its ``docker.context``
    chooses the engine every later sandbox call talks to. Warnings are left to the caller
    (:attr:`Config.warnings`).

    Raises:
        UserError: bad TOML or a value of the wrong type.
        ExternalError: ``git config`` failed.
    """
    from git_iterare import config as config_mod
    from git_iterare.sandbox import engine

    config = config_mod.load(repo, overrides)
    engine.configure(config)
    return config


def set_verbose(on: bool = True) -> None:
    """Echo every command git-iterare runs to stderr (``--verbose``), secrets redacted."""
    from git_iterare import proc

    proc.VERBOSE = on


def engine_label() -> str:
    """How messages name the Docker engine in use (``unix:///var/run/docker.sock``, or
    ``ssh://box (context box)``).

    Raises:
        UserError: the engine settings are wrong (see
            :func:`git_iterare.sandbox.engine.select_engine`).
    """
    from git_iterare.sandbox.engine import current

    return current().label
