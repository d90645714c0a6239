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


def _files(repo: Path, names: list[str]) -> None:
    for name in names:
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(f"{name}\n")
    git("add", "-A", cwd=repo)
    git("commit", "-qm", "files", cwd=repo)


def test_merge_asks_before_deleting_a_file_under_dot_iterare(repo: Path) -> None:
    _files(repo, [".iterare/config.toml", *(f"src/f{i}.py" for i in range(8))])
    rid = agent_run(repo, {}, "wipe", removed=[".iterare/config.toml"])
    refused = iterare("merge", rid, cwd=repo)
    assert (refused.returncode, refused.stderr.splitlines()) == (1, [
        f"run {rid} changes 1 file:",
        "    D  .iterare/config.toml",
        f"warning: run {rid} deletes 1 file under .iterare/ (git iterare's settings, "
        f"Dockerfile and prompts of the next runs); see them with "
        f"`git iterare diff --stat {rid}`",
        "error: merge cancelled: the run deletes 1 file under .iterare/ (git iterare's "
        "settings, Dockerfile and prompts of the next runs) (review them, then rerun with "
        "--yes)"])
    assert (repo / ".iterare" / "config.toml").exists()
    assert iterare("merge", "--yes", rid, cwd=repo).returncode == 0
    assert not (repo / ".iterare" / "config.toml").exists()


def test_merge_asks_before_deleting_most_of_the_base_but_not_a_few_files(repo: Path
                                                                          ) -> None:
    _files(repo, [f"src/f{i}.py" for i in range(9)])  # and README.md: 10 files
    few = agent_run(repo, {}, "wipe", removed=["src/f0.py", "src/f1.py"])
    done = iterare("merge", few, cwd=repo)
    assert (done.returncode, done.stdout) == (0, f"run {few} merged\n")
    assert "delete" not in done.stderr
    # 4 of the 8 files left
    most = agent_run(repo, {}, "wipe", removed=[f"src/f{i}.py" for i in range(2, 6)])
    refused = iterare("merge", most, cwd=repo)
    assert refused.returncode == 1
    assert refused.stderr.splitlines()[-1] == (
        "error: merge cancelled: the run deletes 4 of the 8 files of its base (review "
        "them, then rerun with --yes)")


def test_deleting_many_files_counts_whatever_their_share() -> None:
    from git_iterare.git.deletions import MANY_FILES, Deletions

    assert Deletions(deleted=MANY_FILES, iterare=0, base_files=10_000).many
    assert not Deletions(deleted=MANY_FILES - 1, iterare=0, base_files=10_000).many
    assert Deletions(deleted=1, iterare=0, base_files=1).warning() == (
        "deletes 1 of the 1 files of its base")
    assert Deletions(deleted=0, iterare=0, base_files=0).warning() is None
