"""What the command line says about the registered agents: the agents an option takes,
named in its help, and the options agents add to ``image build``.

Everything comes from the registry (through :mod:`git_iterare.runner.agent_list`). Its
names cost no agent module, so they are written into a command's help when the command
is defined; what only an agent's module knows (whether it keeps credentials, its image
options) is read when a command's help is shown or the command runs, never when commands
are listed or their completion is generated.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import click

from git_iterare.runner import agent_list


def spelled(words: Sequence[str]) -> str:
    """``words`` as a sentence lists them: ``a``, ``a or b``, ``a, b or c``."""
    if len(words) < 2:
        return "".join(words)
    return f"{', '.join(words[:-1])} or {words[-1]}"


class LateHelpOption(click.Option):
    """A click option whose help text is worked out when the help is shown.

    ``help`` is what completion scripts and anything else reading the option see;
    ``late_help`` (called once, with no arguments, returning the whole text) replaces it
    in ``-h``. For help that needs the agents' modules, which listing and completing
    commands must not import.
    """

    def __init__(self, param_decls: Sequence[str] | None = None, *,
                 late_help: Callable[[], str], **attrs: Any) -> None:
        super().__init__(param_decls, **attrs)
        self._late_help: Callable[[], str] | None = late_help

    def get_help_record(self, ctx: click.Context) -> tuple[str, str] | None:
        if self._late_help is not None:
            self.help, self._late_help = self._late_help(), None
        return super().get_help_record(ctx)


def agent_option(*param_decls: str, what: str,
                 listed: Callable[[], list[str]] | None = None) -> Callable[[Any], Any]:
    """An ``--agent NAME`` option (value None when not given) whose help is ``what``, the
    agents it takes and the default: ``Agent to run: claude, codex, gemini or shell
    (default: run.agent).``

    Args:
        param_decls: the option's names (``"--agent", "-a"``).
        what: what the agent is for, capitalized, without a full stop (``Agent to run``).
        listed: the agents the option takes, when not all of them
            (:func:`git_iterare.runner.agent_list.keeping_credentials`): then they are
            named only when the help is shown (they need the agents' modules), and
            elsewhere the help reads ``what (default: run.agent).``.
    """
    def text(agents: Sequence[str] | None) -> str:
        named = f": {spelled(agents)}" if agents else ""
        return f"{what}{named} (default: run.agent)."

    if listed is None:
        return click.option(*param_decls, metavar="NAME", help=text(agent_list.names()))
    return click.option(*param_decls, metavar="NAME", cls=LateHelpOption, help=text(None),
                        late_help=lambda: text(listed()))


@functools.cache
def image_build_options() -> tuple[click.Option, ...]:
    """The options the registered agents add to ``image build``
    (:func:`git_iterare.runner.agent_list.image_options`), in that order; each puts its
    value into the command's configuration overrides under its key. The same objects on
    every call, as click needs. Imports every agent's module.
    """
    options = []
    for declared in agent_list.image_options():
        section, _, key = declared.key.partition(".")
        options.append(click.Option(
            [declared.flag], metavar=declared.metavar, default=None, expose_value=False,
            callback=functools.partial(_override, declared.key),
            help=f"{declared.help} ([{section}] {key})."))
    return tuple(options)


def _override(key: str, ctx: click.Context, param: click.Parameter, value: str | None
              ) -> None:
    from git_iterare.cli.context import app

    if value is not None:
        app().overrides[key] = value
