"""``git iterare diff [RUN] [GIT-DIFF-OPTIONS...] [-- PATHS...]``."""

from __future__ import annotations

import sys

import click

from git_iterare.cli._runs import resolve_run
from git_iterare.cli.context import app


def split_run(args: list[str]) -> tuple[str | None, list[str]]:
    """Pick the RUN out of ``diff``'s arguments: the first word before ``--`` that is not
    an option (so ``diff --stat RUN`` and ``diff RUN --stat`` both work); the rest is
    passed to git diff.

    Returns:
        (RUN or None, git diff arguments in their order).
    """
    end = args.index("--") if "--" in args else len(args)
    for i, arg in enumerate(args[:end]):
        if not arg.startswith("-"):
            return arg, args[:i] + args[i + 1:]
    return None, args


@click.command("diff", context_settings={"ignore_unknown_options": True,
                                         "allow_interspersed_args": False})
@click.argument("args", nargs=-1, type=click.UNPROCESSED, metavar="[RUN] [GIT-DIFF-ARGS]...")
def command(args: tuple[str, ...]) -> None:
    """Show the changes of RUN (default: the most recent run) against its base; other
    arguments go to git diff."""
    from git_iterare.runner.manage import diff

    run, git_args = split_run(list(args))
    record = resolve_run(run)
    sys.exit(diff(app().repo, record, git_args))
