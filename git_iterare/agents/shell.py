"""The ``shell`` agent: the prompt body is a bash script, run as the agent user.

Useful for scripted changes (codemods, dependency bumps) with the same sandbox, branch and
record as a model-driven run, and for testing the machinery without a model. ``bash -eu``
stops at the first failing command or unset variable. No credentials, no network needs;
every output line is a text event, and the exit status decides success.

In a loop (``execute --until``) each round runs the script again, with the round in
``ITERARE_ROUND`` (1 for the first) and, from the second, the last check's exit status
and output (its end) in ``ITERARE_CHECK_EXIT`` and ``ITERARE_CHECK_OUTPUT``.
"""

from __future__ import annotations

from git_iterare.agents.base import Agent
from git_iterare.settings import Settings


class Shell(Agent):
    """Runs the prompt body with ``bash -eu``."""

    name = "shell"

    def command(self, *, prompt_file: str, config: Settings) -> list[str]:
        return ["bash", "-eu", prompt_file]

    def round_command(self, *, prompt_file: str, round_file: str, config: Settings
                      ) -> list[str]:
        """The script again (the round's report is in its environment)."""
        return self.command(prompt_file=prompt_file, config=config)


AGENT = Shell()
