"""``git iterare import-legacy [--file PATH]``: records for iterare's old run history."""

from __future__ import annotations

from pathlib import Path

import click

from git_iterare.cli.context import app


@click.command("import-legacy")
@click.option("--file", "file_", type=click.Path(dir_okay=False, path_type=Path),
              help="iterare's runs file (default: the one of this project in its cache).")
def command(file_: Path | None) -> None:
    """Create run records for the runs iterare (iterare-llm) remembered for this project."""
    from git_iterare.runs import legacy
    from git_iterare.runs.store import RunStore
    from git_iterare.ui import sanitize_line

    repo = app().repo
    project = repo.main_work_tree or repo.common_dir
    store = RunStore(repo)
    results = legacy.import_runs(store, project, file_)
    counts: dict[str, int] = {}
    for item in results:
        counts[item.outcome] = counts.get(item.outcome, 0) + 1
        target = item.run_id or "-"
        click.echo(sanitize_line(f"{item.outcome:<8} {item.legacy_name} -> {target} "
                                 f"({item.status})"))
    summary = ", ".join(f"{n} {k}" for k, n in sorted(counts.items())) or "no runs"
    click.echo(f"imported from {file_ or legacy.runs_file(project)}: {summary}")
