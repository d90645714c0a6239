"""The subcommands: name -> (module under ``git_iterare.cli``, one-line summary).

Kept apart from the modules so ``git iterare`` can list commands, and completion can be
generated, without importing any of them. Each command also has ``bin/git-iterare-<name>``
and ``man/git-iterare-<name>.1``; tests check all three agree.
"""

from __future__ import annotations

COMMANDS: dict[str, tuple[str, str]] = {
    "init": ("init", "Set up .iterare/ (config, prompts, Dockerfile)"),
    "install": ("install", "Create the global configuration directory"),
    "config": ("config", "Show the effective configuration and its origins"),
    "credentials": ("credentials", "Store an agent's credentials for runs (0600, never printed)"),
    "image": ("image", "Build the sandbox image or show its status"),
    "trust": ("trust", "Review and approve the sandbox settings a repository asks for"),
    "completion": ("completion", "Print a shell completion script for bash, zsh or fish"),
    "execute": ("execute", "Run a prompt with an agent in a sandbox"),
    "log": ("log", "Show or follow the log of a run"),
    "diff": ("diff", "Show the changes a run made against its base"),
    "compare": ("compare", "Compare the attempts of a group (execute -n), best first"),
    "merge": ("merge", "Merge the result of a run into the current branch"),
    "cleanup": ("cleanup", "Remove a run's worktree, branch and container"),
    "forget": ("forget", "Delete the records of runs that were cleaned up"),
    "stop": ("stop", "Stop a running run, keeping its work"),
    "finish": ("finish", "Commit the work a run left on disk when committing it failed"),
    "interactive": ("interactive", "Open a terminal session with the agent in the sandbox"),
    "attach": ("attach", "Connect your terminal again to a detached terminal session"),
    "list": ("list", "List runs: status, agent, age, cost, changes"),
    "show": ("show", "Show a run: its record, prompt, log summary and changes"),
    "push": ("push", "Share run records and notes with a remote"),
    "fetch": ("fetch", "Fetch run records and notes from a remote and merge them"),
    "import-legacy": ("import_legacy", "Import the run history of iterare (iterare-llm)"),
}
