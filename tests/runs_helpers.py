"""Helpers shared by the run-record tests: make runs and commits in a test repository,
write prompts, and read what `git iterare execute` started and recorded."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from git_iterare.runs.record import RunRecord
from git_iterare.runs.store import RunStore
from tests.conftest import git


def head_of(repo: Path, rev: str = "HEAD") -> str:
    """The commit id ``rev`` names in ``repo``."""
    return git("rev-parse", rev, cwd=repo).stdout.strip()


def make_run(repo: Path, name: str = "fix-bug", **fields: Any) -> RunRecord:
    """Create a run record based on HEAD of main, with ``fields`` set."""
    store = RunStore(repo)
    return store.create(name, prompt_name=fields.pop("prompt_name", name),
                        prompt_path=f".iterare/prompts/{name}.md",
                        prompt_text=fields.pop("prompt_text", f"Please {name}.\n"),
                        base_commit=head_of(repo, "main"), base_branch="main",
                        agent=fields.pop("agent", "shell"), **fields)


def commit_on_branch(repo: Path, branch: str, filename: str, text: str) -> str:
    """Commit ``filename`` with ``text`` on a new ``branch`` from main (main stays checked out)."""
    git("checkout", "-q", "-b", branch, "main", cwd=repo)
    (repo / filename).write_text(text)
    git("add", filename, cwd=repo)
    git("commit", "-q", "-m", f"change {filename}", cwd=repo)
    sha = head_of(repo)
    git("checkout", "-q", "main", cwd=repo)
    return sha


def prompt(repo: Path, name: str, body: str, front: str = "agent: shell\n") -> None:
    """Write ``.iterare/prompts/NAME.md`` with frontmatter ``front`` and ``body``."""
    (repo / ".iterare" / "prompts" / f"{name}.md").write_text(f"---\n{front}---\n{body}")


def run_id(output: str) -> str:
    """The run id from `execute`'s first line (``started run ID on branch ...``)."""
    first = output.splitlines()[0]
    assert first.startswith("started run "), output
    return first.split()[2]


def record(repo: Path, rid: str) -> dict[str, Any]:
    """The run's stored record (run.json of its record ref, see gititerare-records(5))."""
    data: dict[str, Any] = json.loads(
        git("show", f"refs/iterare/runs/{rid}:run.json", cwd=repo).stdout)
    return data
