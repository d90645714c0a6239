"""Two ``git iterare cleanup --force`` of one run at once (two terminals, or a script and a
user): the second waits for the first under the run's lock and finds it cleaned; both
exit 0 and nothing of the run is left. Before, the loser said the branch had "moved", or
died on git's ref lock with a traceback (found by an adversarial test)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from git_iterare.git import repo as repo_mod
from git_iterare.runner import workspace
from git_iterare.runs.store import RunStore
from tests.conftest import git
from tests.runs_helpers import make_run


def test_two_cleanups_of_one_run_at_once_both_succeed(repo: Path) -> None:
    for attempt in range(3):  # a race: each attempt overlaps the two cleanups anew
        rec = make_run(repo, f"race{attempt}")
        found = repo_mod.discover(repo)
        ws = workspace.prepare_run(found, rec.id, "HEAD",
                                   alternates=str(found.common_dir / "objects"))
        store = RunStore(repo)
        store.transition(rec.id, "running")
        store.set_head(rec.id, git("rev-parse", "HEAD", cwd=repo).stdout.strip())
        store.transition(rec.id, "failed", exit_code=1)
        for i in range(20):  # enough files that the two removals overlap
            folder = ws.worktree / f"d{i}"
            folder.mkdir()
            for j in range(100):
                (folder / f"f{j}").write_text("x\n")
        both = [subprocess.Popen(["git", "iterare", "cleanup", "-y", "--force", rec.id],
                                 cwd=repo, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 text=True) for _ in range(2)]
        for process in both:
            out, err = process.communicate(timeout=120)
            assert (process.returncode, err) == (0, ""), err
            assert out == f"cleaned {rec.id} (record and commits kept)\n"
        assert not os.path.lexists(ws.worktree) and not os.path.lexists(ws.gitdir)
        assert str(ws.worktree) not in git("worktree", "list", cwd=repo).stdout
        assert git("branch", "--list", f"iterare/{rec.id}", cwd=repo).stdout == ""
        assert store.get(rec.id).status == "cleaned"
        assert not list((found.common_dir / "iterare" / "state").glob(f"{rec.id}*"))
