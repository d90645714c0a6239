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
    "image": ("image", "Build the sandbox image or show its status"),
    "completion": ("completion", "Print a shell completion script for bash, zsh or fish"),
}
