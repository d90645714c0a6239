"""``git iterare import-legacy``: iterare's runs file becomes run records."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from pathlib import Path

from git_iterare.runs.store import RunStore
from tests.conftest import git, iterare
from tests.runs_helpers import commit_on_branch, head_of


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


# -- a hostile runs file (issue 25, item 9) ----------------------------------------------------

def write_runs(repo: Path, runs: dict) -> Path:
    path = legacy_file(repo)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(runs))
    return path


def logs_dir() -> Path:
    return Path(os.environ["HOME"]) / ".local" / "share" / "iterare" / "logs"


def entry(repo: Path, **fields: object) -> dict:
    return {"prompt_name": "p", "timestamp": 1767225600, "project_dir": str(repo), **fields}


def test_a_run_name_cannot_reach_a_file_outside_iterare_s_logs(repo: Path) -> None:
    logs_dir().mkdir(parents=True)
    outside = Path(os.environ["HOME"]) / "outside"
    outside.mkdir()
    (outside / "secret.log").write_text('{"type": "text", "text": "TOPSECRET"}\n')
    name = "../../../../outside/secret"
    write_runs(repo, {name: entry(repo, project_dir="/")})
    done = iterare("import-legacy", cwd=repo)
    assert done.returncode == 0, done.stderr
    rid = done.stdout.split(" -> ")[1].split()[0]
    assert rid.startswith("outside-secret-")
    store = RunStore(repo)
    assert b"TOPSECRET" not in store.read_log(rid)
    rec = store.get(rid)
    assert (rec.status, rec.branch, rec.worktree, rec.head) == ("cleaned", None, None, None)


def test_fifos_are_never_waited_on(repo: Path, tmp_path: Path) -> None:
    logs_dir().mkdir(parents=True)
    git("branch", "fix-abc12345", cwd=repo)
    os.mkfifo(logs_dir() / "fix-abc12345.log")
    write_runs(repo, {"fix-abc12345": entry(repo)})
    done = subprocess.run(["git", "iterare", "import-legacy"], cwd=repo, capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("created  fix-abc12345 -> fix-abc12345 (lost)\n")
    assert RunStore(repo).read_log("fix-abc12345") == b""
    fifo = tmp_path / "runs.json"
    os.mkfifo(fifo)
    refused = subprocess.run(["git", "iterare", "import-legacy", "--file", str(fifo)],
                             cwd=repo, capture_output=True, text=True, timeout=60, check=False)
    assert (refused.returncode, refused.stderr) == (
        2, f"error: {fifo} is not a regular file; refusing to read it (give the runs file "
           "itself with --file PATH)\n")


def test_json_nested_100000_deep_is_one_error(repo: Path) -> None:
    path = legacy_file(repo)
    path.parent.mkdir(parents=True)
    path.write_text('{"a": ' + "[" * 100_000 + "]" * 100_000 + "}")
    done = iterare("import-legacy", cwd=repo)
    assert (done.returncode, done.stderr) == (
        2, f"error: {path} is not an iterare runs file (JSON nested too deep)\n")


def test_large_files_and_fields_are_capped(repo: Path) -> None:
    path = legacy_file(repo)
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"big-abc12345": entry(repo, prompt_name="x" * 9_000_000)}))
    done = iterare("import-legacy", cwd=repo)
    assert (done.returncode, done.stderr) == (
        2, f"error: {path} is larger than 8 MiB: no runs file of iterare's\n")
    write_runs(repo, {"big-abc12345": entry(repo, prompt_name="p" * 3_000_000,
                                            project_dir="/" * 3_000_000,
                                            timestamp=float("nan")),
                      "n" * 3_000: entry(repo)})
    done = iterare("import-legacy", cwd=repo)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0] == f"skipped  {'n' * 255} -> - (not a usable run name)"
    run_json = git("show", "refs/iterare/runs/big-abc12345:run.json", cwd=repo).stdout
    assert len(run_json) < 4096
    rec = json.loads(run_json)
    assert rec["prompt_name"] is None and rec["created"] is not None
    assert rec["extra"]["legacy"]["project_dir"] is None
    assert rec["extra"]["legacy"]["timestamp"] is None


def test_cleanup_never_deletes_a_branch_iterare_did_not_make(repo: Path) -> None:
    """A runs file claimed the user's own branches as runs; ``cleanup --force`` of the
    records deleted them."""
    mine = commit_on_branch(repo, "wip-0badc0de", "mine.txt", "my work\n")
    write_runs(repo, {"wip-0badc0de": entry(repo)})
    assert iterare("import-legacy", cwd=repo).returncode == 0
    cleaned = iterare("cleanup", "--force", "-y", "wip-0badc0de", cwd=repo)
    assert cleaned.returncode == 0, cleaned.stderr
    assert head_of(repo, "wip-0badc0de") == mine
    assert (f"warning: run wip-0badc0de: kept branch wip-0badc0de: it is not checked out in "
            f"iterare's worktree {repo / 'workspaces' / 'wip-0badc0de'}, so nothing shows "
            "iterare made it (delete it yourself with `git branch -D wip-0badc0de` if it "
            "was)\n") in cleaned.stderr
    assert RunStore(repo).get("wip-0badc0de").status == "cleaned"
    # iterare's own layout, a worktree workspaces/<run> on branch <run>, is cleaned up.
    git("worktree", "add", "-q", "-b", "fix-abc12345", str(repo / "workspaces" / "fix-abc12345"),
        "main", cwd=repo)
    write_runs(repo, {"fix-abc12345": entry(repo)})
    assert iterare("import-legacy", cwd=repo).returncode == 0
    assert iterare("cleanup", "--force", "-y", "fix-abc12345", cwd=repo).returncode == 0
    assert git("branch", "--list", "fix-abc12345", cwd=repo).stdout == ""
    assert not (repo / "workspaces" / "fix-abc12345").exists()
