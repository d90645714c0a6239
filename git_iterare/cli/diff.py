"""``git iterare diff [RUN] [GIT-DIFF-OPTIONS...] [-- PATHS...]``."""

from __future__ import annotations

import sys

import click

from git_iterare.cli._runs import resolve_run
from git_iterare.cli.context import app

#: git diff's options whose value may be the next argument (git-diff(1), "OPTIONS";
#: parse-options takes a required argument either way): that word is not a run.
VALUE_OPTIONS = frozenset({
    "-S", "-G", "-O", "-I", "--output", "--diff-filter", "--find-object", "--anchored",
    "--ignore-matching-lines", "--src-prefix", "--dst-prefix", "--line-prefix",
    "--inter-hunk-context", "--ws-error-highlight", "--skip-to", "--rotate-to",
    "--stat-width", "--stat-name-width", "--stat-graph-width", "--stat-count",
    "--output-indicator-new", "--output-indicator-old", "--output-indicator-context",
    "--word-diff-regex", "--diff-algorithm",
})


def split_runs(args: list[str]) -> tuple[list[str], list[str]]:
    """Pick the runs out of ``diff``'s arguments: the first two words before ``--`` that
    are neither options nor the value of one (:data:`VALUE_OPTIONS`), so ``diff --stat
    RUN`` and ``diff RUN --stat`` both work, ``diff A B`` compares two runs and ``diff A
    -S text`` searches for ``text``; the rest is passed to git diff.

    Returns:
        (the runs, none to two, git diff arguments in their order).
    """
    end = args.index("--") if "--" in args else len(args)
    picked: list[int] = []
    value = False
    for i, arg in enumerate(args[:end]):
        if value:
            value = False
        elif arg.startswith("-"):
            value = arg in VALUE_OPTIONS
        elif len(picked) < 2:
            picked.append(i)
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
