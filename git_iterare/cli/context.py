"""State shared by all commands of one invocation: global flags, repository, config."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from git_iterare import ui

F = TypeVar("F", bound=Callable[..., Any])

if TYPE_CHECKING:
    from git_iterare.config import Config
    from git_iterare.runner.session import Repo


@dataclass
class AppContext:
    """Per-invocation state, stored as click's ``ctx.obj``.

    The repository and configuration are found on first use, so commands that need
    neither (``install``, ``completion``) work outside a repository.

    Attributes:
        overrides: ``section.key`` -> value from command-line flags, for the config layer
            with the highest precedence.
    """

    overrides: dict[str, Any] = field(default_factory=dict)
    _repo: Repo | None = None
    _config: Config | None = None

    @property
    def repo(self) -> Repo:
        """The repository (see :func:`git_iterare.runner.session.open_repository`).

        Raises:
            UserError: not inside a repository.
        """
        if self._repo is None:
            from git_iterare.runner.session import open_repository

            self._repo = open_repository()
        return self._repo

    def optional_repo(self) -> Repo | None:
        """The repository, or None outside one."""
        from git_iterare.errors import UserError

        try:
            return self.repo
        except UserError:
            return None

    @property
    def config(self) -> Config:
        """The effective configuration, warnings printed once.

        Raises:
            UserError: bad TOML or a value of the wrong type.
        """
        if self._config is None:
            from git_iterare.runner.session import load_config

            # Its docker.context chooses the engine.
            self._config = load_config(self.optional_repo(), self.overrides)
            for line in self._config.warnings:
                ui.warn(line)
        return self._config


def app() -> AppContext:
    """The :class:`AppContext` of the running command."""
    ctx = click.get_current_context()
    root = ctx.find_root()
    if root.obj is None:
        root.obj = AppContext()
    obj: AppContext = root.obj
    return obj


def _set_project(ctx: click.Context, param: click.Parameter, value: Path | None) -> None:
    if value is None or ctx.resilient_parsing:
        return
    from git_iterare.errors import UserError
    from git_iterare.runner.session import open_repository

    if not value.is_dir():
        raise UserError(f"--project {value}: no such directory")
    app()._repo = open_repository(value)


def project_option() -> Callable[[F], F]:
    """``-p/--project DIR`` (iterare's): work on the repository at DIR, not the current
    one."""
    return click.option("--project", "-p", type=click.Path(file_okay=False, path_type=Path),
                        metavar="DIR", expose_value=False, is_eager=True,
                        callback=_set_project,
                        help="Work on the repository at DIR (default: the current one).")



def docker_network_options() -> Callable[[F], F]:
    """``--docker-network/--dn NET`` (repeatable, the command's ``networks``: a tuple of
    network names) and ``--docker-compose/--dc`` (its ``compose``: a bool), as ``execute``
    and ``interactive`` take them (iterare's flags)."""
    network = click.option(
        "--docker-network", "--dn", "networks", multiple=True, metavar="NET",
        help="Attach the sandbox to the Docker network NET and let its subnets through the "
             "firewall (repeatable).")
    compose = click.option(
        "--docker-compose", "--dc", "compose", is_flag=True,
        help="Also attach the default network of the compose project in the repository.")

    def decorate(function: F) -> F:
        return network(compose(function))

    return decorate
