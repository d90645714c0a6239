"""An agent that rewrites history (a reset to an older commit, then a new commit): the
warning ``execute`` prints is kept in the record, ``show`` and ``merge`` repeat it, and
``merge`` asks before it deletes ``.iterare/`` and most of the user's files."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import git, iterare
from tests.runs_helpers import prompt, record, run_id
from tests.terminal import in_terminal
from tests.test_runs_e2e import project  # noqa: F401 - fixture

pytestmark = pytest.mark.docker

REWRITE = """\
git reset -q --hard "$(git rev-list --max-parents=0 HEAD)"
echo new > new.txt
git add -A
git -c user.name=a -c user.email=a@x commit -qm rewritten
"""


def _rewritten_run(project: Path) -> tuple[str, str]:  # noqa: F811
    """A run whose agent reset to the root commit and committed; (run id, warning)."""
    (project / "src").mkdir()
    (project / "src" / "app.py").write_text("print('app')\n")
    (project / "NOTES").write_text("notes\n")
    prompt(project, "rewrite", REWRITE)
    git("add", "-A", cwd=project)
    git("commit", "-qm", "the user's work", cwd=project)
    done = iterare("execute", "rewrite", "-f", cwd=project)
    assert done.returncode == 0, done.stderr
    rid = run_id(done.stdout)
    warnings = [line for line in done.stderr.splitlines()
                if line.startswith(f"warning: run {rid}: the agent's branch was not imported")]
    assert len(warnings) == 1, done.stderr
    return rid, warnings[0].removeprefix(f"warning: run {rid}: ")


def test_the_warning_stays_in_the_record_and_show_repeats_it(project: Path  # noqa: F811
                                                             ) -> None:
    rid, warning = _rewritten_run(project)
    assert "does not descend from its base" in warning
    assert record(project, rid)["extra"]["warnings"] == [warning]
    shown = iterare("show", rid, cwd=project)
    assert f"warning:   {warning}" in shown.stdout.splitlines()


def test_merge_repeats_the_warning_and_asks_before_deleting(project: Path  # noqa: F811
                                                            ) -> None:
    rid, warning = _rewritten_run(project)
    base_files = len(git("ls-tree", "-r", "--name-only", "HEAD", cwd=project).stdout.split())
    before = git("rev-parse", "HEAD", cwd=project).stdout
    refused = iterare("merge", rid, cwd=project)
    lines = refused.stderr.splitlines()
    assert refused.returncode == 1
    assert lines[0] == f"warning: run {rid}: {warning}"
    deleted = sum(1 for line in lines if line.startswith("    D  "))
    iterare_deleted = sum(1 for line in lines if line.startswith("    D  .iterare/"))
    what = (f"deletes {deleted} of the {base_files} files of its base, {iterare_deleted} of "
            "them under .iterare/ (git iterare's settings, Dockerfile and prompts of the "
            "next runs)")
    assert lines[-2:] == [
        f"warning: run {rid} {what}; see them with `git iterare diff --stat {rid}`",
        f"error: merge cancelled: the run {what} (review them, then rerun with --yes)"]
    assert git("rev-parse", "HEAD", cwd=project).stdout == before
    assert (project / ".iterare" / "config.toml").exists()

    # On a terminal the question is asked; the default is no.
    code, out = in_terminal(["git", "iterare", "merge", "--color=never", rid], project,
                            keys=b"\r", ready=b"Merge anyway? [y/N]")
    assert code == 1, out
    assert git("rev-parse", "HEAD", cwd=project).stdout == before

    merged = iterare("merge", "--yes", rid, cwd=project)
    assert (merged.returncode, merged.stdout) == (0, f"run {rid} merged\n")
    assert not (project / ".iterare" / "config.toml").exists()
