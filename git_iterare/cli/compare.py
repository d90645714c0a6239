"""``git iterare compare [GROUP] [--sort KEY] [--format table|json]``."""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING, Any

import click

from git_iterare.cli.context import app, project_option
from git_iterare.runs.groups import SORT_KEYS

if TYPE_CHECKING:
    from git_iterare.runner.session import Repo
    from git_iterare.runs.groups import Attempt
    from git_iterare.runs.record import RunRecord

#: The version of ``compare --format json``'s document.
COMPARE_JSON_VERSION = 1
#: Table columns: (header, right-aligned).
COLUMNS = (("#", True), ("RUN", False), ("STATUS", False), ("CHECK", False),
           ("ROUNDS", True), ("CHANGES", False), ("COST*", True), ("DURATION", True),
           ("HOST-EXEC", False))


def ranked_attempts(repo: Repo, records: list[RunRecord], sort: str) -> list[Attempt]:
    """The attempts of a group, each finished first if its sandbox ended unobserved,
    best first (:func:`git_iterare.runs.groups.rank`).

    Raises:
        UserError: a bad ``sort`` key.
        OperationFailed: the engine of an active attempt cannot be asked.
    """
    from git_iterare.runner.manage import settle
    from git_iterare.runs.groups import attempt_row, rank
    from git_iterare.runs.render import duration_seconds

    now = dt.datetime.now(dt.timezone.utc)
    rows = []
    for record in records:
        record = settle(repo, record, tolerant=True)
        rows.append(attempt_row(record, duration_seconds(record, now),
                                _host_executables(repo, record)))
    return rank(rows, sort)


def _host_executables(repo: Repo, record: RunRecord) -> list[str]:
    """The changed files of ``record`` that would run on the host (merge's review list);
    none while it has no result, or when its commits are not here."""
    from git_iterare.errors import IterareError
    from git_iterare.runner.manage import host_executable_changes

    if not (record.base_commit and record.head):
        return []
    try:
        return [change.path for change in host_executable_changes(repo, record)]
    except IterareError:
        return []


def json_item(rank: int, row: Attempt) -> dict[str, Any]:
    """One attempt of ``compare --format json`` (the shape gititerare-compare(1) pins)."""
    record = row.record
    rounds = record.extra.get("rounds")
    last = rounds[-1] if isinstance(rounds, list) and rounds and isinstance(rounds[-1], dict) \
        else {}
    return {"rank": rank, "attempt": row.attempt, "run": record.id, "status": record.status,
            "reason": row.reason, "check": row.check if row.check != "-" else None,
            "check_exit": last.get("check_exit"), "rounds": row.rounds,
            "changes": record.changes, "lines": row.lines, "cost_usd": row.cost_usd,
            "duration_seconds": row.duration, "branch": record.branch,
            "host_executables": list(row.host_executables)}


def table(rows: list[Attempt], paint: Any) -> str:
    """The human table of ``compare``: one line per attempt, best first; every cell
    sanitized (records travel with fetch)."""
    from git_iterare.runs.render import (
        COST_FOOTNOTE,
        aligned,
        changes_text,
        cost_text,
        human_span,
    )
    from git_iterare.ui import sanitize_line

    cells = []
    for row in rows:
        record = row.record
        status = record.status + (f" ({row.reason})" if row.reason else "")
        hosts = row.host_executables
        cells.append([str(row.attempt or "?"), record.id, status, row.check, str(row.rounds),
                      changes_text(record.changes), cost_text(row.cost_usd),
                      human_span(row.duration),
                      (f"{len(hosts)}: " + ", ".join(hosts)) if hosts else "-"])
    cells = [[sanitize_line(cell) for cell in line] for line in cells]
    lines = aligned(COLUMNS, cells, [row.record.status for row in rows], 2, paint)
    if any(row.cost_usd is not None for row in rows):
        lines.append(COST_FOOTNOTE)
    return "\n".join(lines) + "\n"


@click.command("compare")
@click.argument("group", required=False)
@click.option("--sort", "sort", type=click.Choice(SORT_KEYS), default="check",
              show_default=True, help="Rank by this key first, then the others in order.")
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table",
              show_default=True, help="Output format.")
@project_option()
def command(group: str | None, sort: str, fmt: str) -> None:
    """Compare the attempts of GROUP (default: the newest group), best first."""
    import json

    from git_iterare import ui
    from git_iterare.runs.groups import resolve_group
    from git_iterare.runs.store import RunStore

    repo = app().repo
    group_id, records = resolve_group(RunStore(repo), group)
    rows = ranked_attempts(repo, records, sort)
    if fmt == "json":
        click.echo(json.dumps({"v": COMPARE_JSON_VERSION, "group": group_id, "sort": sort,
                               "attempts": [json_item(i, row) for i, row in
                                            enumerate(rows, 1)]}, ensure_ascii=False))
        return
    header = (f"group {ui.sanitize_line(group_id)}: {len(rows)} attempt"
              f"{'s' if len(rows) != 1 else ''}, best first (by {sort})\n")
    ui.page(header + table(rows, ui.paint), "compare", repo.work_tree)
