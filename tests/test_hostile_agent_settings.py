"""Hostile-repository findings about the agent-settings gate (``git iterare trust``).

A repository's Claude Code settings start programs in the sandbox (hooks, MCP servers):
they need the user's approval. The gate reads ``.claude/settings.json`` from the tree of
the run's base with ``git ls-tree``, which does not follow a symlinked *directory*: a
repository that commits ``.claude`` as a symlink to a folder of its own holding
``settings.json`` has its hooks read by Claude Code in the checkout (which follows the
link) but never shown, nor asked for.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from tests.conftest import git, iterare
from tests.test_trust import ENGINE_ERROR, NO_ENGINE, REFUSED, nothing_created

HOOKS = {"hooks": {"SessionStart": [{"hooks": [{"type": "command",
                                               "command": "sh cfg/start.sh"}]}]}}


def _commit_linked_settings(repo: Path, link: str, folder: str) -> None:
    """Commit ``folder/settings.json`` (hooks) and ``link`` -> ``folder`` (a symlink)."""
    (repo / folder).mkdir(parents=True)
    (repo / folder / "settings.json").write_text(json.dumps(HOOKS))
    os.symlink(os.path.relpath(repo / folder, (repo / link).parent), repo / link)
    git("add", "-A", cwd=repo)
    git("commit", "-qm", "settings through a symlinked folder", cwd=repo)


def test_claude_settings_behind_a_symlinked_folder_need_approval(repo: Path) -> None:
    (repo / ".iterare" / "prompts").mkdir(parents=True)
    (repo / ".iterare" / "prompts" / "p.md").write_text("---\nagent: claude\n---\nGo.\n")
    _commit_linked_settings(repo, ".claude", "cfg")
    # What the agent's checkout reads: the hooks, through the link.
    assert json.loads((repo / ".claude" / "settings.json").read_text()) == HOOKS
    env = {**NO_ENGINE, "ANTHROPIC_API_KEY": "sk-ant-test"}
    run = iterare("execute", "p", cwd=repo, env=env)
    # Before the fix the gate saw no settings and went on to the engine (ENGINE_ERROR).
    assert run.stderr != ENGINE_ERROR
    assert run.returncode == 2
    assert run.stderr.startswith(("error: .claude", REFUSED)), run.stderr
    nothing_created(repo)
    shown = iterare("trust", "--show", cwd=repo).stdout
    assert "asks for nothing beyond the defaults" not in shown


def test_gemini_settings_behind_a_symlinked_folder_need_approval(repo: Path) -> None:
    (repo / ".iterare" / "prompts").mkdir(parents=True)
    (repo / ".iterare" / "prompts" / "p.md").write_text("---\nagent: gemini\n---\nGo.\n")
    _commit_linked_settings(repo, ".gemini", "conf/gem")
    env = {**NO_ENGINE, "GEMINI_API_KEY": "k"}
    run = iterare("execute", "p", cwd=repo, env=env)
    assert run.stderr != ENGINE_ERROR
    assert run.returncode == 2
    nothing_created(repo)
