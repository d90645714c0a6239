"""The command-line interface: one module per subcommand, loaded only when it runs.

Each ``git_iterare.cli.<module>`` defines ``command``, a :class:`click.Command`. Commands
parse arguments, call one function elsewhere in the package and render its result; they
hold no Docker or git plumbing. :data:`git_iterare.cli.registry.COMMANDS` lists them.
"""
