"""Agent adapters, one module each, and the registry that finds them by name.

Adding an agent is one new module here and one line in :data:`REGISTRY`. The module
defines ``AGENT``, an instance of a subclass of :class:`~git_iterare.agents.base.Agent`,
which says (see that class for the signatures; everything but :attr:`~.Agent.name` and
:meth:`~.Agent.command` has a working default):

* who it is: :attr:`~.Agent.name` (the registry key, as in ``run.agent`` and the prompt's
  ``agent:``);
* its configuration: :attr:`~.Agent.config_keys`, the keys it reads (``[<name>]`` section
  by convention), with defaults, one-line docs and whether a repository may set them only
  with the user's approval (``gated``); config files, ``git config iterare.<section>.<key>``
  and ``ITERARE_<SECTION>_<KEY>`` accept them like git-iterare's own keys;
* its program in the image: :meth:`~.Agent.install` (a shell script installing under
  ``$PREFIX``, see :class:`~.Install` and :func:`~.npm_install`); the image holds the agents
  of ``[docker] agents`` and every agent a run asked for; :attr:`~.Agent.image_options`
  are the options (:class:`~.ImageOption`) it adds to ``git iterare image build``;
* its network: :meth:`~.Agent.required_domains` (the API hosts, or the gateway's);
* how it starts: :meth:`~.Agent.command` (prompt by file), :meth:`~.Agent.limit_args`
  with :attr:`~.Agent.own_limits`, :meth:`~.Agent.interactive_command`,
  :meth:`~.Agent.environment`;
* which run limits hold for it: :attr:`~.Agent.own_limits` and :attr:`~.Agent.reports_cost`
  (:meth:`~.Agent.unheld_limits` names the others, which ``execute`` warns about);
* its credentials: :meth:`~.Agent.credentials` (what a run hands to the sandbox: secret
  environment and files under the agent's home) and, for ``git iterare credentials``,
  :attr:`~.Agent.credential_store` (a :class:`~git_iterare.agents.credstore.CredentialStore`:
  storing a pasted token, an API key from :attr:`~.CredentialStore.api_key_env`, a login
  found on the host, a login made in the sandbox);
* its output: :meth:`~.Agent.parse_line` (one output line into an :class:`~.Event` of
  :class:`~.Part` values), :meth:`~.Agent.summarize` (the events into a :class:`~.RunResult`:
  outcome, closing words, cost, tokens, turns, duration: what ``log``, ``show`` and the run
  record show) and :meth:`~.Agent.render` (an event as ``git iterare log`` prints it).

The contract test (tests/test_agents.py) runs over every registered agent; an agent that
talks to a model adds a fake of its API under tests/fakeapi/ and an end-to-end test.
Modules are imported only when asked for (:func:`get_agent`), and all of them the first
time the configuration's key table is read (:func:`declared_keys`): keep their module-level
imports light. The command line names agents with :func:`names` alone, and reads their
modules only for ``credentials -h`` and ``image build`` (:mod:`git_iterare.runner.agent_list`).
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable
from typing import TYPE_CHECKING, NamedTuple

from git_iterare.errors import UserError

if TYPE_CHECKING:
    from git_iterare.agents.base import Agent, Install
    from git_iterare.settings import Key, Settings

#: Agent name -> module defining ``AGENT``.
REGISTRY: dict[str, str] = {
    "claude": "git_iterare.agents.claude",
    "codex": "git_iterare.agents.codex",
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


def for_record(name: str | None) -> Agent:
    """The agent that wrote a run's log, for reading it: the registered one, or the
    generic :class:`~git_iterare.agents.base.Agent` (every line a text event) when the
    record names none or an agent this version does not know (records travel between
    machines)."""
    from git_iterare.agents.base import Agent

    if name in REGISTRY:
        return get_agent(str(name))
    return Agent()


def declared_keys() -> list[Key]:
    """The configuration keys every registered agent declares, in registry order.

    Raises:
        RuntimeError: two agents declare the same key (a bug in an agent module).
    """
    seen: dict[str, str] = {}
    keys = []
    for name in REGISTRY:
        for key in get_agent(name).config_keys:
            if key.name in seen:
                raise RuntimeError(f"agents {seen[key.name]} and {name} both declare {key.name}")
            seen[key.name] = name
            keys.append(key)
    return keys


class ImageAgents(NamedTuple):
    """The agents a sandbox image holds (for ``sandbox.image.ensure_image`` and
    ``build_image``, as ``agents=`` and ``installs=``).

    Attributes:
        agents: names of the agents to install: ``[docker] agents`` and those asked for,
            less those with nothing to install (shell).
        installs: the install step of every registered agent that has one, by name.
    """

    agents: list[str]
    installs: dict[str, Install]


def image_agents(config: Settings, also: Iterable[str] = ()) -> ImageAgents:
    """What the image must hold for ``config`` and the agents in ``also`` (a run's).

    Raises:
        UserError: ``[docker] agents`` names an unknown agent, or a version is malformed.
    """
    installs: dict[str, Install] = {}
    for name in REGISTRY:
        step = get_agent(name).install(config)
        if step is not None:
            installs[name] = step
    wanted = []
    for name in [*config["docker.agents"], *also]:
        if name not in REGISTRY:
            raise UserError(f"docker.agents: unknown agent {name!r} "
                            f"(valid: {', '.join(names())})",
                            hint="fix [docker] agents in your configuration")
        if name in installs and name not in wanted:
            wanted.append(name)
    return ImageAgents(wanted, installs)
