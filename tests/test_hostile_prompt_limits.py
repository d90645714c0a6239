"""Hostile-repository finding: a repository's prompt lifts the user's own run limits.

The user's configuration is trusted (DESIGN.md); a repository's ``run.timeout`` above the
built-in one needs approval (``git iterare trust``). But a prompt's frontmatter
``timeout`` (and ``max_budget_usd``, ``max_turns``: 0 means no limit) is taken over the
user's own setting and asks for nothing: a cloned repository's prompt with ``timeout: 0``
runs past the user's ``run.timeout`` for ever.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import git, iterare
from tests.runs_helpers import record, run_id

pytestmark = pytest.mark.docker


@pytest.fixture
def project(repo: Path, sandbox_image: str) -> Iterator[Path]:
    """A repository whose runs use the test image (approved by the user)."""
    (repo / ".iterare" / "prompts").mkdir(parents=True)
    (repo / ".iterare" / "config.toml").write_text(
        f'[docker]\nimage = "{sandbox_image}"\ncpus = 1\nmemory = "1g"\n'
        '[run]\nagent = "shell"\n')
    (repo / ".iterare" / ".gitignore").write_text("/worktrees/\n")
    git("add", ".iterare", cwd=repo)
    git("commit", "-qm", "iterare config", cwd=repo)
    assert iterare("trust", "--yes", cwd=repo).returncode == 0
    yield repo
    ids = subprocess.run(["docker", "ps", "-aq", "--filter", f"label=dev.iterare.repo={repo}"],
                         capture_output=True, text=True, check=False).stdout.split()
    if ids:
        subprocess.run(["docker", "rm", "-f", *ids], capture_output=True, check=False)


def test_a_prompt_cannot_lift_the_users_own_timeout(project: Path) -> None:
    # The repository's prompt (committed by its author): no time limit.
    (project / ".iterare" / "prompts" / "long.md").write_text(
        "---\nagent: shell\ntimeout: 0\n---\nsleep 20\necho outlived > outlived.txt\n")
    git("add", "-A", cwd=project)
    git("commit", "-qm", "a long prompt", cwd=project)
    assert "asks for nothing beyond the defaults" in iterare(
        "trust", "--show", cwd=project).stdout
    # The user's own limit: 3 seconds (trusted: their environment).
    done = iterare("execute", "long", "--follow", cwd=project,
                   env={"ITERARE_RUN_TIMEOUT": "3"})
    rid = run_id(done.stdout)
    rec = record(project, rid)
    # Before a fix: the run succeeded after 20 s, its record says timeout 0 (none).
    assert rec["status"] == "timed-out", (rec["status"], rec.get("extra", {}).get("timeout"))
