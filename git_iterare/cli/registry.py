"""The subcommands: name -> (module under ``git_iterare.cli``, one-line summary).

Kept apart from the modules so ``git iterare`` can list commands, and completion can be
generated, without importing any of them. Each command also has ``bin/git-iterare-<name>``
and ``man/git-iterare-<name>.1``; tests check all three agree.
"""

from __future__ import annotations

COMMANDS: dict[str, tuple[str, str]] = {
    "init": ("init", "Set up .iterare/ (config, prompts, Dockerfile) in a repository"),
    "install": ("install", "Create the global configuration directory"),
    "config": ("config", "Show the effective configuration and where each value came from"),
    "completion": ("completion", "Print a shell completion script for bash, zsh or fish"),
    "list": ("list", "List runs with their status, agent, age, duration, cost and changes"),
    "show": ("show", "Show a run: its record, prompt, log summary and changes"),
    "push": ("push", "Share run records and notes with a remote"),
    "fetch": ("fetch", "Fetch run records and notes from a remote and merge them"),
    "import-legacy": ("import_legacy", "Import the run history of iterare (iterare-llm)"),
}
