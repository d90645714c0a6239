"""``git iterare diff [RUN] [GIT-DIFF-OPTIONS...] [-- PATHS...]``."""

from __future__ import annotations

import sys

import click

from git_iterare.cli._runs import resolve_run
from git_iterare.cli.context import app


def split_runs(args: list[str]) -> tuple[list[str], list[str]]:
    """Pick the runs out of ``diff``'s arguments: the first two words before ``--`` that
    are not options (so ``diff --stat RUN`` and ``diff RUN --stat`` both work, and
    ``diff A B`` compares two runs); the rest is passed to git diff.

    Returns:
        (the runs, none to two, git diff arguments in their order).
    """
    end = args.index("--") if "--" in args else len(args)
    picked = [i for i, arg in enumerate(args[:end]) if not arg.startswith("-")][:2]
    return [args[i] for i in picked], [a for i, a in enumerate(args) if i not in picked]


@click.command("diff", context_settings={"ignore_unknown_options": True,
                                         "allow_interspersed_args": False})
@click.argument("args", nargs=-1, type=click.UNPROCESSED,
                metavar="[RUN [RUN2]] [GIT-DIFF-ARGS]...")
def command(args: tuple[str, ...]) -> None:
    """Show the changes of RUN (default: the most recent run) against its base, or from
    RUN's result to RUN2's; other arguments go to git diff."""
    from git_iterare.runner.manage import diff, diff_between

    runs, git_args = split_runs(list(args))
    if len(runs) == 2:
        sys.exit(diff_between(app().repo, resolve_run(runs[0]), resolve_run(runs[1]),
                              git_args))
    record = resolve_run(runs[0] if runs else None)
    sys.exit(diff(app().repo, record, git_args))
