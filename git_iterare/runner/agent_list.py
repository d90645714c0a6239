"""The registered agents as the command line lists them: their names, those that keep
credentials and the variables their API keys are read from, and the options they add to
``git iterare image build``.

A facade over :mod:`git_iterare.agents`, so the command line needs no agent module.
:func:`names` imports none of the agents' modules (listing and completing commands stay
cheap); the other functions import them all.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from git_iterare import agents

if TYPE_CHECKING:
    from git_iterare.agents.credstore import CredentialStore
    from git_iterare.agents.values import ImageOption


def names() -> list[str]:
    """The registered agent names, sorted."""
    return agents.names()


def _stores() -> dict[str, CredentialStore]:
    found: dict[str, CredentialStore] = {}
    for name in agents.names():
        store = agents.get_agent(name).credential_store
        if store is not None:
            found[name] = store
    return found


def keeping_credentials() -> list[str]:
    """The agents that need credentials (``git iterare credentials --agent`` takes them),
    sorted."""
    return list(_stores())


def api_key_variables() -> list[str]:
    """The host variables ``git iterare credentials --api-key-env`` stores an API key
    from (``ANTHROPIC_API_KEY``), one per agent that has one, in :func:`names` order."""
    return [store.api_key_env for store in _stores().values() if store.api_key_env]


def image_options() -> list[ImageOption]:
    """The options the agents add to ``git iterare image build``
    (:attr:`git_iterare.agents.base.Agent.image_options`), in :func:`names` order."""
    return [option for name in agents.names()
            for option in agents.get_agent(name).image_options]
