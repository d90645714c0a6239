"""What ``execute`` says about a request it refuses or cannot fully honour, before it
contacts the engine: one line naming the problem and the next step."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import git, iterare


@pytest.fixture
def project(repo: Path) -> Path:
    """``repo`` with a shell prompt ``p`` committed."""
    prompts = repo / ".iterare" / "prompts"
    prompts.mkdir(parents=True)
    (prompts / "p.md").write_text("echo hi > f.txt\n")
    git("add", ".iterare", cwd=repo)
    git("commit", "-qm", "prompt", cwd=repo)
    return repo


def _refused(project: Path, *args: str) -> str:
    result = iterare("execute", "p", "--agent", "shell", *args, cwd=project)
    assert (result.returncode, result.stdout) == (2, ""), result.stderr
    assert not git("branch", "--list", "iterare/*", cwd=project).stdout  # nothing made
    return result.stderr


def test_a_base_branch_that_does_not_exist(project: Path) -> None:
    assert _refused(project, "--branch", "nosuch") == (
        "error: --branch nosuch: no such branch or commit in this repository (choose one "
        "`git branch -a` lists, or `git fetch` it from its remote first)\n")
    prompt = project / ".iterare" / "prompts" / "p.md"
    prompt.write_text("---\nbranch: gone\n---\necho hi\n")
    assert _refused(project) == (
        "error: .iterare/prompts/p.md: branch 'gone' (frontmatter) does not exist in this "
        "repository (fix its `branch:` or give --branch; choose one `git branch -a` lists, "
        "or `git fetch` it from its remote first)\n")


def test_a_repository_without_commits(tmp_path: Path) -> None:
    git("init", "-q", "-b", "main", cwd=tmp_path)
    (tmp_path / ".iterare" / "prompts").mkdir(parents=True)
    (tmp_path / ".iterare" / "prompts" / "p.md").write_text("echo hi\n")
    result = iterare("execute", "p", "--agent", "shell", cwd=tmp_path)
    assert (result.returncode, result.stderr) == (
        2, "error: HEAD is no commit yet: the current branch has no commits (make a first "
           "commit, or give --branch)\n")


def test_a_too_long_name_is_told_the_limit(project: Path) -> None:
    assert _refused(project, "--name", "n" * 150) == (
        f"error: invalid run name {'n' * 40!r}...: it has 150 characters; a run name has at "
        "most 100 (choose a shorter name)\n")


def test_limits_the_agent_cannot_enforce_are_warned_about(project: Path, tmp_path: Path
                                                           ) -> None:
    # An engine that is not there: execute stops at its first question to the engine,
    # after the warnings.
    env = {"DOCKER_HOST": f"unix://{tmp_path}/no-engine.sock", "OPENAI_API_KEY": "sk-test",
           "GEMINI_API_KEY": "test-key"}
    unreachable = (f"error: cannot reach the Docker engine at unix://{tmp_path}/no-engine.sock "
                   "(is dockerd running?)\n")
    cases = [
        ("codex", ["--max-budget-usd", "2", "--max-turns", "3"], "max_budget_usd or max_turns",
         "these limits"),
        ("gemini", ["--max-turns", "3"], "max_turns", "that limit"),
        ("shell", ["--max-budget-usd", "1"], "max_budget_usd", "that limit"),
    ]
    for agent, flags, limits, which in cases:
        result = iterare("execute", "p", "--agent", agent, *flags, cwd=project, env=env)
        assert (result.returncode, result.stderr) == (1, (
            f"warning: the {agent} agent cannot enforce {limits}: this run goes on without "
            f"{which}\n" + unreachable)), agent
    # Limits the agent holds, or none set (0 is none): no warning.
    result = iterare("execute", "p", "--agent", "codex", "--max-turns", "0", cwd=project,
                     env=env)
    assert (result.returncode, result.stderr) == (1, unreachable)


def test_agents_declare_the_limits_they_can_be_held_to() -> None:
    from git_iterare.agents import get_agent
    from git_iterare.agents.shell import Shell

    both = {"max_budget_usd": 1.5, "max_turns": 4}
    assert get_agent("claude").unheld_limits(both) == []
    for name in ("codex", "gemini", "shell"):
        assert get_agent(name).unheld_limits(both) == ["max_budget_usd", "max_turns"], name
        assert get_agent(name).unheld_limits({"max_budget_usd": None, "max_turns": 0}) == []

    class Reporting(Shell):  # reports its cost: git-iterare holds the budget
        reports_cost = True

    assert Reporting().unheld_limits(both) == ["max_turns"]


def test_a_misspelt_agent_key_runs_nothing(project: Path) -> None:
    """``agnet: shell`` was a warning, and the run went to the default agent (Claude, the
    user's credentials and money): now nothing starts and no record is made."""
    prompt = project / ".iterare" / "prompts" / "p.md"
    prompt.write_text("---\nagnet: shell\n---\necho hi\n")
    result = iterare("execute", "p", cwd=project)
    assert (result.returncode, result.stdout, result.stderr) == (
        2, "", f"error: {prompt}:2: unknown key 'agnet'; did you mean 'agent'? (agent changes "
               "what runs, so a misspelt one stops the run: fix the frontmatter)\n")
    assert not git("for-each-ref", "refs/iterare/", cwd=project).stdout
