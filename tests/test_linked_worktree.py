"""In a linked worktree (git-worktree(1)) with a ``.iterare/`` of its own, a command reads
that one (prompts by name, ``config.toml``, what trust reviews), as git reads its own HEAD
and index there, and init writes there; a linked worktree without one, and a run's own
worktree under ``.iterare/worktrees/``, have no project files, so there the main
worktree's count (tests/test_cli.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import git, iterare


@pytest.fixture
def linked(repo: Path, tmp_path: Path) -> Path:
    """A linked worktree of ``repo`` on branch ``side``, with a ``.iterare/`` of its own
    (prompt ``t2``, ``run.timeout = 77``) that the main worktree does not have."""
    path = tmp_path / "linked"
    git("worktree", "add", "-q", "-b", "side", str(path), "main", cwd=repo)
    (path / ".iterare" / "prompts").mkdir(parents=True)
    (path / ".iterare" / "config.toml").write_text("[run]\ntimeout = 77\n")
    (path / ".iterare" / "prompts" / "t2.md").write_text("---\nbranch: nosuch\n---\nhi\n")
    return path


def test_the_config_is_the_linked_worktrees(repo: Path, linked: Path) -> None:
    there = iterare("config", "--show-origin", "run.timeout", cwd=linked / ".iterare")
    assert (there.returncode, there.stdout) == (
        0, f"file:{linked}/.iterare/config.toml\t77\n"), there.stderr
    assert iterare("config", "run.timeout", cwd=repo).stdout == "3600\n"


def test_a_prompt_by_name_is_the_linked_worktrees(linked: Path) -> None:
    # The prompt is found (and read: its frontmatter's branch is checked) rather than
    # "no prompt 't2'" from the main worktree.
    result = iterare("execute", "t2", "--agent", "shell", cwd=linked)
    assert (result.returncode, result.stderr) == (
        2, "error: .iterare/prompts/t2.md: branch 'nosuch' (frontmatter) does not exist in "
           "this repository (fix its `branch:` or give --branch; choose one `git branch -a` "
           "lists, or `git fetch` it from its remote first)\n")


def test_trust_reviews_and_init_writes_the_linked_worktrees(repo: Path, linked: Path) -> None:
    (linked / ".iterare" / "config.toml").write_text(
        '[firewall]\nallowed_domains = ["linked.example"]\n')
    review = iterare("trust", cwd=linked)
    assert review.stdout.splitlines()[:3] == [
        f"repository: {linked}",
        "asks for (from .iterare/config.toml, Dockerfile, include, prompts and agent settings):",
        '  firewall.allowed_domains = ["linked.example"]']
    made = iterare("init", cwd=linked)
    assert made.returncode == 0, made.stderr
    assert (linked / ".iterare" / "Dockerfile").is_file()
    assert not (repo / ".iterare").exists()


def test_init_in_a_linked_worktree_sets_up_that_worktree(repo: Path, tmp_path: Path) -> None:
    bare_linked = tmp_path / "fresh"
    git("worktree", "add", "-q", "-b", "fresh", str(bare_linked), "main", cwd=repo)
    made = iterare("init", cwd=bare_linked)
    assert made.returncode == 0, made.stderr
    assert (bare_linked / ".iterare" / "config.toml").is_file()
    assert not (repo / ".iterare").exists()
    shown = iterare("config", "--show-origin", "run.timeout", cwd=bare_linked)
    assert shown.stdout == "default\t3600\n"


def test_a_runs_worktree_reads_the_main_worktrees_files(repo: Path) -> None:
    """What an agent wrote in its worktree is not the project's configuration."""
    (repo / ".iterare").mkdir()
    (repo / ".iterare" / "config.toml").write_text("[run]\ntimeout = 11\n")
    run_tree = repo / ".iterare" / "worktrees" / "r-0000000a"
    git("worktree", "add", "-q", "-b", "iterare/r-0000000a", str(run_tree), "main", cwd=repo)
    (run_tree / ".iterare").mkdir()
    (run_tree / ".iterare" / "config.toml").write_text("[run]\ntimeout = 99\n")
    assert iterare("config", "run.timeout", cwd=run_tree).stdout == "11\n"
