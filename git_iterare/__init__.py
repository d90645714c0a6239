"""git-iterare: run an autonomous coding agent on a prompt in a firewalled Docker sandbox.

The package is a git extension: every command is ``git iterare <cmd>``. See
``man git-iterare`` for the commands and ``DESIGN.md`` in the project's shared notes for
the architecture. Importing this package must stay cheap (no docker, dulwich or yaml),
because ``git iterare --version`` and completion load it on every keystroke.
"""

__version__ = "0.1.0"
