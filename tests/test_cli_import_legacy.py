"""``git iterare import-legacy``: iterare's runs file becomes run records."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from git_iterare.runs.store import RunStore
from tests.conftest import git, iterare
from tests.runs_helpers import head_of


def legacy_file(repo: Path) -> Path:
    digest = hashlib.sha256(str(repo.resolve()).encode()).hexdigest()[:16]
    return Path(os.environ["XDG_CACHE_HOME"]) / "iterare" / "runs" / f"runs-{digest}.json"


def test_import(repo: Path) -> None:
    git("worktree", "add", "-q", "-b", "fix-api-abc12345",
        str(repo / "workspaces" / "fix-api-abc12345"), "main", cwd=repo)
    kept = head_of(repo, "fix-api-abc12345")
    path = legacy_file(repo)
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({
        "fix-api-abc12345": {"prompt_name": "fix-api", "timestamp": 1767225600.5,
                             "project_dir": str(repo)},
        "old-run-deadbeef": {"prompt_name": "old-run", "timestamp": 1767139200.0,
                             "project_dir": str(repo)},
        "weird name": {"prompt_name": "weird", "timestamp": 1767312000.0,
                       "project_dir": str(repo)},
    }, indent=2))
    weird = "weird-name-" + hashlib.sha256(b"weird name").hexdigest()[:8]
    out = iterare("import-legacy", cwd=repo)
    assert out.returncode == 0, out.stderr
    assert out.stdout == (
        "created  old-run-deadbeef -> old-run-deadbeef (cleaned)\n"
        "created  fix-api-abc12345 -> fix-api-abc12345 (lost)\n"
        f"created  weird name -> {weird} (cleaned)\n"
        f"imported from {path}: 3 created\n")
    store = RunStore(repo)
    rec = store.get("fix-api-abc12345")
    assert (rec.status, rec.head, rec.branch, rec.prompt_name, rec.created) == (
        "lost", kept, "fix-api-abc12345", "fix-api", "2026-01-01T00:00:00Z")
    assert rec.worktree == str(repo / "workspaces" / "fix-api-abc12345")
    assert rec.extra["legacy"]["run_name"] == "fix-api-abc12345"
    listed = iterare("list", "--all", "--format", "porcelain", cwd=repo).stdout
    assert [line.split("\t")[:2] for line in listed.splitlines()] == [
        [weird, "cleaned"], ["fix-api-abc12345", "lost"], ["old-run-deadbeef", "cleaned"]]

    again = iterare("import-legacy", cwd=repo)
    assert again.stdout.splitlines()[-1] == f"imported from {path}: 3 exists"
    assert iterare("import-legacy", "--file", str(path), cwd=repo).returncode == 0
    assert len(store.run_ids()) == 3
    assert git("fsck", "--strict", cwd=repo).returncode == 0


def test_import_bad_input(repo: Path, tmp_path: Path) -> None:
    missing = iterare("import-legacy", cwd=repo)
    assert missing.returncode == 2
    assert missing.stderr == (f"error: no iterare run history at {legacy_file(repo)} "
                              "(give the file with --file PATH)\n")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    out = iterare("import-legacy", "--file", str(bad), cwd=repo)
    assert out.returncode == 2 and out.stderr.startswith(f"error: {bad} is not valid JSON")
    bad.write_text("[1, 2]")
    out = iterare("import-legacy", "--file", str(bad), cwd=repo)
    assert (out.returncode, out.stderr) == (
        2, f"error: {bad} is not an iterare runs file (expected "
           '{"run name": {"prompt_name": ..., ...}})\n')
