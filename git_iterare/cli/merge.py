"""``git iterare merge [RUN] [--squash] [--no-ff] [--yes]``."""

from __future__ import annotations

from typing import Any

import click

from git_iterare.cli._runs import best_attempt, confirm_or_refuse, resolve_run
from git_iterare.cli.context import app, project_option
from git_iterare.cli.numbers import Number


def review_lines(run_id: str, changes: list[Any], paint: Any) -> list[str]:
    """The list ``merge`` shows before merging: every changed file with git's status letter,
    those that would run on this machine marked ``!``, highlighted and with the reason.

    Args:
        run_id: the run.
        changes: :class:`git_iterare.git.hostexec.FileChange` items.
        paint: :func:`git_iterare.ui.paint`, or a stand-in.

    Returns:
        Lines to print; every file name passes :func:`git_iterare.ui.sanitize_line`.
    """
    from git_iterare.ui import sanitize_line

    count = len(changes)
    lines = [f"run {sanitize_line(run_id)} changes {count} file{'' if count == 1 else 's'}"
             + (":" if changes else "")]
    for change in changes:
        name = sanitize_line(change.path)
        if change.reason:
            lines.append(paint(f"  ! {change.status}  {name}", "red", "bold")
                         + paint(f"  ({change.reason})", "yellow"))
        else:
            lines.append(f"    {change.status}  {name}")
    return lines


@click.command("merge")
@click.argument("run", required=False)
@click.option("--squash", is_flag=True,
              help="Squash the run's changes into one new commit on the current branch.")
@click.option("--no-ff", "no_ff", is_flag=True, help="Always create a merge commit.")
@click.option("--pick", metavar="RUN",
              help="With a GROUP: merge this attempt of it rather than the best ranked.")
@click.option("--round", "round_number", type=Number("round", whole=True, minimum=1), metavar="K",
              help="Of a loop (execute --until): merge the state after round K.")
@click.option("--yes", "-y", is_flag=True,
              help="Merge without asking when files that run on the host changed, or the "
                   "run deletes files under .iterare/ or many of its base's.")
@project_option()
def command(run: str | None, pick: str | None, squash: bool, no_ff: bool,
            round_number: int | None, yes: bool) -> None:
    """Merge the result of RUN (default: the most recent run), or of the best attempt of
    GROUP, into the current branch."""
    import sys

    from git_iterare import ui
    from git_iterare.runner.manage import merge
    from git_iterare.runs.groups import names_group

    record = best_attempt(run, pick) if pick or names_group(run) else resolve_run(run)

    def confirm(review: Any) -> bool:
        paint = lambda text, *styles: ui.paint(text, *styles, stream=sys.stderr)  # noqa: E731
        for warning in review.warnings:
            ui.warn(f"run {record.id}: {warning}")
        for line in review_lines(record.id, review.changes, paint):
            click.echo(line, err=True, color=True)  # ui.paint decided; names are sanitized
        risky = review.host_executables
        if risky:
            ui.warn(f"{risky} of them would run on this machine or make a tool run "
                    f"something (marked !); read them with "
                    f"`git iterare diff {record.id} -- PATH`")
        if review.deletions:
            ui.warn(f"run {record.id} {review.deletions}; see them with "
                    f"`git iterare diff --stat {record.id}`")
        if not risky and not review.deletions:
            return True
        return confirm_or_refuse("Merge anyway?", yes)

    def confirm_detached(head: str) -> bool:
        ui.warn(f"HEAD is detached at {head[:12]}: the merge moves it, and no branch will "
                "hold the result")
        return confirm_or_refuse("Merge into the detached HEAD?", yes)

    outcome = merge(app().repo, record, squash=squash, no_ff=no_ff, confirm=confirm,
                    confirm_detached=confirm_detached, round_number=round_number)
    how = "squashed into the index" if squash else "merged"
    click.echo(f"run {ui.sanitize_line(outcome.record.id)} {how}")
    if outcome.result.detached and not outcome.result.up_to_date:
        ui.warn(f"HEAD is detached, now at {outcome.result.head_after[:12]}; keep it on a "
                "branch with `git switch -c NAME`")
