"""``merge`` highlights everything a run adds under ``.iterare/`` (settings git iterare
itself reads: config, Dockerfile, include, prompts, the worktrees folder) and a file or
symlink named ``.iterare`` (found by an adversarial test)."""

from __future__ import annotations

import os
from pathlib import Path

from tests.conftest import git, iterare
from tests.runs_helpers import head_of
from tests.test_output_sanitized import T0, T1, agent_run


def test_merge_flags_every_file_under_dot_iterare(repo: Path) -> None:
    rid = agent_run(repo, {".iterare/worktrees/pwn": "x\n", ".iterare/config.toml": "[a]\n",
                           ".iterare/Dockerfile": "FROM x\n", ".iterare/include": "~/.ssh\n",
                           ".iterare/prompts/p.md": "hi\n", ".iterare/notes.txt": "x\n",
                           "docs/.ITERARE/config.toml": "x\n", "src/plain.py": "x\n"})
    refused = iterare("merge", rid, cwd=repo)
    assert refused.returncode == 1
    assert refused.stderr.splitlines()[:10] == [
        f"run {rid} changes 8 files:",
        "  ! A  .iterare/Dockerfile  (built by git iterare on your Docker engine before the "
        "next run)",
        "  ! A  .iterare/config.toml  (git iterare config: mounts, egress allowlist, Claude "
        "gateway of the next runs)",
        "  ! A  .iterare/include  (names host files git iterare copies into the next runs)",
        "  ! A  .iterare/notes.txt  (git iterare project files read by the next runs)",
        "  ! A  .iterare/prompts/p.md  (prompts of the next runs (frontmatter env: passes "
        "host secrets))",
        "  ! A  .iterare/worktrees/pwn  (where git iterare keeps run worktrees: files here "
        "stand in for a run's)",
        "  ! A  docs/.ITERARE/config.toml  (git iterare project files read by the next runs)",
        "    A  src/plain.py",
        f"warning: 7 of them would run on this machine or make a tool run something "
        f"(marked !); read them with `git iterare diff {rid} -- PATH`",
    ]
    assert not (repo / ".iterare").exists()


def test_merge_flags_a_symlink_named_dot_iterare(repo: Path) -> None:
    from git_iterare.runs.store import RunStore
    from tests.runs_helpers import make_run

    store = RunStore(repo)
    rec = make_run(repo, "link", created=T0)
    git("checkout", "-q", "-b", f"iterare/{rec.id}", "main", cwd=repo)
    os.symlink("../elsewhere", repo / ".iterare")
    git("add", ".iterare", cwd=repo)
    git("commit", "-qm", "link", cwd=repo)
    head = head_of(repo)
    git("checkout", "-q", "main", cwd=repo)
    store.transition(rec.id, "running", started=T0)
    store.set_head(rec.id, head)
    store.transition(rec.id, "succeeded", finished=T1, exit_code=0)
    refused = iterare("merge", rec.id, cwd=repo)
    assert refused.returncode == 1
    assert ("  ! A  .iterare  (git iterare's project directory: a file or symlink here "
            "redirects what the next runs read)\n") in refused.stderr
    assert not os.path.lexists(repo / ".iterare")
