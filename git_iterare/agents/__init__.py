"""Agent adapters, one module each, and the registry that finds them by name.

A new agent is a module here defining ``AGENT`` (an :class:`~git_iterare.agents.base.Agent`)
and a line in :data:`REGISTRY`. Modules are imported only when asked for.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from git_iterare.errors import UserError

if TYPE_CHECKING:
    from git_iterare.agents.base import Agent

#: Agent name -> module defining ``AGENT``.
REGISTRY: dict[str, str] = {
    "claude": "git_iterare.agents.claude",
    "gemini": "git_iterare.agents.gemini",
    "shell": "git_iterare.agents.shell",
}


def names() -> list[str]:
    """The registered agent names, sorted."""
    return sorted(REGISTRY)


def get_agent(name: str) -> Agent:
    """The agent called ``name``.

    Raises:
        UserError: no such agent (listing the valid names).
    """
    module = REGISTRY.get(name)
    if module is None:
        raise UserError(f"unknown agent {name!r} (valid: {', '.join(names())})",
                        hint="set run.agent or the prompt's `agent:` to one of them")
    agent: Agent = importlib.import_module(module).AGENT
    return agent
