"""RunStore against real repositories, checked with real git."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from git_iterare.errors import OperationFailed, UserError
from git_iterare.runs.record import InvalidTransition
from git_iterare.runs.store import RunStore
from tests.conftest import git, iterare
from tests.runs_helpers import commit_on_branch, head_of, make_run


def test_create_writes_record_tree(repo: Path) -> None:
    rec = make_run(repo, "fix-bug", prompt_text="Fix the bug.\n")
    ref = f"refs/iterare/runs/{rec.id}"
    assert git("ls-tree", "--name-only", ref, cwd=repo).stdout == "prompt.md\nrun.json\n"
    assert git("show", f"{ref}:prompt.md", cwd=repo).stdout == "Fix the bug.\n"
    data = json.loads(git("show", f"{ref}:run.json", cwd=repo).stdout)
    assert data["v"] == 1 and data["id"] == rec.id and data["status"] == "created"
    assert data["branch"] == f"iterare/{rec.id}"
    assert data["base_commit"] == head_of(repo)
    assert RunStore(repo).get(rec.id) == rec


def test_update_chain_and_transitions(repo: Path) -> None:
    store = RunStore(repo)
    rec = make_run(repo)
    store.transition(rec.id, "starting")
    store.transition(rec.id, "running", container="c1")
    store.update(rec.id, lambda x: x.replace(extra={**x.extra, "k": 1}), "set k")
    done = store.transition(rec.id, "failed", exit_code=3, error="boom")
    assert done.started and done.finished and done.exit_code == 3 and done.extra == {"k": 1}
    log = git("log", "--first-parent", "--format=%s", f"refs/iterare/runs/{rec.id}",
              cwd=repo).stdout.splitlines()
    assert log == [f"iterare: {rec.id} {s}" for s in
                   ("failed", "running", "running", "starting", "created")]
    with pytest.raises(InvalidTransition, match="cannot go from failed to running"):
        store.transition(rec.id, "running")
    store.transition(rec.id, "merged")
    store.transition(rec.id, "cleaned")
    with pytest.raises(InvalidTransition):
        store.transition(rec.id, "running")


def test_unchanged_update_writes_nothing(repo: Path) -> None:
    store = RunStore(repo)
    rec = make_run(repo)
    before = head_of(repo, f"refs/iterare/runs/{rec.id}")
    store.update(rec.id, lambda x: x, "nothing")
    assert head_of(repo, f"refs/iterare/runs/{rec.id}") == before


def test_logs(repo: Path) -> None:
    store = RunStore(repo)
    rec = make_run(repo)
    assert store.read_log(rec.id) == b""
    store.append_log(rec.id, b'{"n": 1}')
    store.append_log(rec.id, b'{"n": 2}\n')
    assert store.read_log(rec.id) == b'{"n": 1}\n{"n": 2}\n'
    store.set_log(rec.id, b"x\n")
    assert git("show", f"refs/iterare/runs/{rec.id}:log.jsonl", cwd=repo).stdout == "x\n"


def test_unknown_run_and_bad_fields(repo: Path) -> None:
    store = RunStore(repo)
    with pytest.raises(OperationFailed, match="no run 'nope-0123abcd'"):
        store.get("nope-0123abcd")
    with pytest.raises(UserError, match="bad run record field"):
        make_run(repo, colour="blue")
    with pytest.raises(UserError, match="invalid run name"):
        make_run(repo, "bad name")


def test_resolve(repo: Path) -> None:
    store = RunStore(repo)
    a = make_run(repo, "alpha")
    b1 = make_run(repo, "beta", created="2030-01-01T00:00:00Z")
    b2 = make_run(repo, "beta", created="2030-01-02T00:00:00Z")
    assert store.resolve(a.id).id == a.id
    assert store.resolve("alph").id == a.id
    assert store.resolve("alpha").id == a.id
    assert store.resolve(None).id == b2.id
    alphabet = make_run(repo, "alphabet")
    assert store.resolve("alpha").id == a.id  # a prefix of two ids, the prompt of one run
    assert store.resolve("alphab").id == alphabet.id
    with pytest.raises(UserError) as info:
        store.resolve("beta")
    assert info.value.exit_code == 2
    assert info.value.message == f"'beta' matches 2 runs: {', '.join(sorted([b1.id, b2.id]))}"
    with pytest.raises(OperationFailed) as failed:
        store.resolve("gamma")
    assert failed.value.exit_code == 1


def test_head_survives_branch_deletion_and_gc(repo: Path) -> None:
    store = RunStore(repo)
    rec = make_run(repo)
    work = commit_on_branch(repo, f"iterare/{rec.id}", "new.txt", "a\nb\n")
    done = store.set_head(rec.id, work)
    assert done.changes == {"files": 1, "insertions": 2, "deletions": 0}
    store.transition(rec.id, "running")
    store.transition(rec.id, "succeeded")
    git("branch", "-D", f"iterare/{rec.id}", cwd=repo)
    git("reflog", "expire", "--expire=now", "--all", cwd=repo)
    git("gc", "-q", "--prune=now", cwd=repo)
    assert git("cat-file", "-t", work, cwd=repo).stdout == "commit\n"
    assert git("fsck", "--strict", cwd=repo).returncode == 0
    assert store.get(rec.id).head == work
    assert RunStore(repo).get(rec.id).status == "succeeded"  # read from packed refs/objects
    (repo / ".git" / "iterare" / "list-cache.json").unlink(missing_ok=True)
    listed = iterare("list", "--format", "porcelain", cwd=repo).stdout
    assert listed.split("\t")[:2] == [rec.id, "succeeded"]


def test_notes_shown_by_git_log(repo: Path) -> None:
    store = RunStore(repo)
    rec = make_run(repo, "fix-bug")
    work = commit_on_branch(repo, "topic", "f.txt", "x\n")
    store.add_note([work], {"run": rec.id, "prompt": "fix-bug", "agent": "shell",
                            "status": "running"})
    store.add_note([work], {"run": "other-0123abcd", "prompt": "p", "agent": "claude",
                            "status": "succeeded"})
    store.add_note([work], {"run": rec.id, "prompt": "fix-bug", "agent": "shell",
                            "status": "succeeded"})
    out = git("log", "-1", "--notes=iterare", "--format=%N", work, cwd=repo).stdout
    assert out == (
        '{"run": "other-0123abcd", "prompt": "p", "agent": "claude", "status": "succeeded"}\n'
        f'{{"run": "{rec.id}", "prompt": "fix-bug", "agent": "shell", "status": "succeeded"}}\n'
        "\n")
    assert git("notes", "--ref=iterare", "list", cwd=repo).stdout.split()[1] == work
    assert git("fsck", "--strict", cwd=repo).returncode == 0
    with pytest.raises(UserError, match="no such commit"):
        store.add_note(["0" * 40], {"run": rec.id})


def test_notes_written_by_git_are_kept(repo: Path) -> None:
    store = RunStore(repo)
    rec = make_run(repo)
    commits = []
    for i in range(3):
        commits.append(commit_on_branch(repo, f"t{i}", f"f{i}.txt", f"{i}\n"))
    git("notes", "--ref=iterare", "add", "-m", "written by hand", commits[0], cwd=repo)
    store.add_note(commits, {"run": rec.id, "prompt": "p", "agent": "shell", "status": "x"})
    line = f'{{"run": "{rec.id}", "prompt": "p", "agent": "shell", "status": "x"}}'
    assert git("notes", "--ref=iterare", "show", commits[0], cwd=repo).stdout == \
        f"written by hand\n{line}\n"
    for sha in commits[1:]:
        assert git("notes", "--ref=iterare", "show", sha, cwd=repo).stdout == f"{line}\n"
    assert git("fsck", "--strict", cwd=repo).returncode == 0


def test_list_api(repo: Path) -> None:
    store = RunStore(repo)
    a = make_run(repo, "a", created="2026-01-01T00:00:00Z")
    b = make_run(repo, "b", created="2026-01-02T00:00:00Z")
    store.transition(a.id, "cleaned")
    assert [r.id for r in store.list()] == [b.id]
    assert [r.id for r in store.list(include_cleaned=True)] == [b.id, a.id]
    assert [r.id for r in store.list(statuses=["cleaned"])] == [a.id]
    assert store.list(statuses=["running"]) == []
