"""Hostile-remote finding: a record fetched from a shared remote overrides the user's own.

``git iterare fetch`` merges a remote's ``refs/iterare/runs/<id>`` into the local record;
the side "further along" wins ``run.json``, and a record merged elsewhere is taken at its
word (``merge_holds``). Whoever can push to the remote (a teammate, the upstream of a
cloned repository) can therefore rewrite the record of a run the user pushed: status
``merged`` and ``head`` its base. The user's ``cleanup`` (no ``--force``) then deletes the
unmerged branch and worktree, ``forget`` (no ``--force``) deletes the record, which was
the last ref holding the work, and ``git gc`` removes it.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import git, iterare
from tests.runs_helpers import run_id

pytestmark = pytest.mark.docker


@pytest.fixture
def shared(tmp_path: Path, sandbox_image: str) -> Iterator[tuple[Path, Path]]:
    """(the user's repository, a bare remote it pushes to)."""
    remote = tmp_path / "remote.git"
    git("init", "-q", "--bare", str(remote), cwd=tmp_path)
    repo = tmp_path / "repo"
    repo.mkdir()
    git("init", "-q", "-b", "main", cwd=repo)
    (repo / ".iterare" / "prompts").mkdir(parents=True)
    (repo / ".iterare" / "config.toml").write_text(
        f'[docker]\nimage = "{sandbox_image}"\ncpus = 1\nmemory = "1g"\n'
        '[run]\nagent = "shell"\n')
    (repo / ".iterare" / ".gitignore").write_text("/worktrees/\n")
    (repo / ".iterare" / "prompts" / "w.md").write_text(
        "---\nagent: shell\n---\necho precious > precious.txt\n")
    git("add", "-A", cwd=repo)
    git("commit", "-qm", "project", cwd=repo)
    git("remote", "add", "origin", str(remote), cwd=repo)
    git("push", "-q", "origin", "main", cwd=repo)
    assert iterare("trust", "--yes", cwd=repo).returncode == 0
    yield repo, remote
    ids = subprocess.run(["docker", "ps", "-aq", "--filter", f"label=dev.iterare.repo={repo}"],
                         capture_output=True, text=True, check=False).stdout.split()
    if ids:
        subprocess.run(["docker", "rm", "-f", *ids], capture_output=True, check=False)


def _forge_merged(remote: Path, work: Path, rid: str) -> None:
    """As the other party: rewrite the pushed record of ``rid`` to say ``merged``, with its
    base as its result, on top of the user's record (a fast-forward for them)."""
    git("clone", "-q", str(remote), str(work), cwd=remote.parent)
    ref = f"refs/iterare/runs/{rid}"
    git("fetch", "-q", "origin", f"{ref}:{ref}", cwd=work)
    old = git("rev-parse", ref, cwd=work).stdout.strip()
    data = json.loads(git("show", f"{old}:run.json", cwd=work).stdout)
    data.update(status="merged", head=data["base_commit"],
                changes={"files": 0, "insertions": 0, "deletions": 0})
    data["extra"]["merged_as"] = {"host": "elsewhere", "repo": "/elsewhere",
                                  "commit": data["base_commit"]}
    blob = subprocess.run(["git", "hash-object", "-w", "--stdin"], cwd=work, check=True,
                          input=json.dumps(data), capture_output=True, text=True).stdout.strip()
    entries = [line if not line.endswith("\trun.json") else f"100644 blob {blob}\trun.json"
               for line in git("ls-tree", old, cwd=work).stdout.splitlines()]
    tree = subprocess.run(["git", "mktree"], cwd=work, check=True, capture_output=True,
                          text=True, input="\n".join(entries) + "\n").stdout.strip()
    new = git("commit-tree", tree, "-p", old, "-m", f"{rid} merged", cwd=work).stdout.strip()
    git("push", "-q", "origin", f"{new}:{ref}", cwd=work)


def test_a_fetched_record_cannot_make_unmerged_work_go(shared: tuple[Path, Path],
                                                        tmp_path: Path) -> None:
    repo, remote = shared
    done = iterare("execute", "w", "--follow", cwd=repo)
    assert done.returncode == 0, done.stderr
    rid = run_id(done.stdout)
    work = git("rev-parse", f"iterare/{rid}", cwd=repo).stdout.strip()
    assert iterare("push", "origin", cwd=repo).returncode == 0
    _forge_merged(remote, tmp_path / "other", rid)

    assert iterare("fetch", "origin", cwd=repo).returncode == 0
    # The user never merged the run: cleanup without --force must keep its work.
    cleaned = iterare("cleanup", "--yes", rid, cwd=repo)
    forgot = iterare("forget", "--yes", rid, cwd=repo)
    git("reflog", "expire", "--expire=now", "--all", cwd=repo)
    git("gc", "-q", "--prune=now", cwd=repo)
    kept = subprocess.run(["git", "cat-file", "-e", f"{work}^{{commit}}"], cwd=repo,
                          check=False, capture_output=True).returncode == 0
    # Before a fix: both succeed and the run's only commit is gone.
    assert kept, (cleaned.stdout + cleaned.stderr, forgot.stdout + forgot.stderr)
