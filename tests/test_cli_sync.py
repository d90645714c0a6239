"""``git iterare push`` / ``fetch`` between clones through a bare remote."""

from __future__ import annotations

import json
from pathlib import Path

from git_iterare.runs.store import RunStore
from tests.conftest import git, iterare
from tests.runs_helpers import commit_on_branch, head_of, make_run


def clone(remote: Path, path: Path) -> Path:
    git("clone", "-q", str(remote), str(path), cwd=remote.parent)
    return path


def test_push_fetch_and_merge(repo: Path, tmp_path: Path) -> None:
    bare = tmp_path / "remote.git"
    git("init", "-q", "--bare", str(bare), cwd=tmp_path)
    git("remote", "add", "origin", str(bare), cwd=repo)
    git("push", "-q", "origin", "main", cwd=repo)
    git("branch", "-q", "--set-upstream-to=origin/main", cwd=repo)

    a = RunStore(repo)
    rec = make_run(repo, "shared")
    work = commit_on_branch(repo, f"iterare/{rec.id}", "w.txt", "w\n")
    a.transition(rec.id, "running")
    a.set_head(rec.id, work)
    a.transition(rec.id, "succeeded")
    a.add_note([work], {"run": rec.id, "prompt": "shared", "agent": "shell",
                        "status": "succeeded"})
    git("branch", "-D", f"iterare/{rec.id}", cwd=repo)

    pushed = iterare("push", cwd=repo)
    assert pushed.returncode == 0, pushed.stderr
    assert pushed.stdout == "runs from origin: none\npushed run records and notes to origin\n"
    assert git("cat-file", "-t", work, cwd=bare).stdout == "commit\n"

    other = clone(bare, tmp_path / "other")
    fetched = iterare("fetch", cwd=other)
    assert (fetched.returncode, fetched.stdout) == (
        0, "runs from origin: 1 new\nnotes: new\n1 run fetched without a branch here (a "
           "run's branch stays where it ran); diff, merge and --reuse work by run id; to get "
           f"a branch: git branch iterare/{rec.id} {work}\n")
    assert git("for-each-ref", "refs/iterare-remote", cwd=other).stdout == ""
    assert "\tsucceeded\t" in iterare("list", "--format", "porcelain", cwd=other).stdout
    assert git("cat-file", "-t", work, cwd=other).stdout == "commit\n"
    assert rec.id in git("log", "-1", "--notes=iterare", "--format=%N", work, cwd=other).stdout

    # Both sides change the same run (and the notes) without seeing each other.
    b = RunStore(other)
    b.update(rec.id, lambda r: r.replace(extra={**r.extra, "from_b": 1}), "b edit")
    b.add_note([work], {"run": "other-0123abcd", "prompt": "p", "agent": "claude",
                        "status": "running"})
    assert iterare("push", "origin", cwd=other).returncode == 0
    a.transition(rec.id, "merged")
    a.update(rec.id, lambda r: r.replace(extra={**r.extra, "from_a": 2}), "a edit")
    a.add_note([work], {"run": "third-0123abcd", "prompt": "t", "agent": "shell",
                        "status": "failed"})
    result = iterare("push", cwd=repo)
    assert result.returncode == 0, result.stderr
    assert result.stdout == ("runs from origin: 1 merged\nnotes: merged\n"
                             "pushed run records and notes to origin\n")
    merged = a.get(rec.id)
    assert merged.status == "merged" and merged.extra == {"from_a": 2, "from_b": 1}
    tip = f"refs/iterare/runs/{rec.id}"
    parents = git("log", "-1", "--format=%P", tip, cwd=repo).stdout.split()
    assert len(parents) == 3 and parents[2] == work  # local, remote, and the run's head
    note = git("notes", "--ref=iterare", "show", work, cwd=repo).stdout.splitlines()
    runs = sorted(json.loads(x)["run"] for x in note)
    assert runs == sorted(["other-0123abcd", "third-0123abcd", rec.id])

    again = iterare("fetch", "origin", cwd=other)
    assert again.stdout == "runs from origin: 1 fast-forward\nnotes: fast-forward\n"
    assert head_of(other, tip) == head_of(repo, tip)
    assert iterare("fetch", cwd=other).stdout == "runs from origin: 1 up-to-date\n" \
        "notes: up-to-date\n"
    for path in (repo, other, bare):
        assert git("fsck", "--strict", cwd=path).returncode == 0


def test_sync_bad_input(repo: Path, tmp_path: Path) -> None:
    missing = iterare("fetch", "nosuch", cwd=repo)
    assert missing.returncode == 1
    assert missing.stderr.startswith("error: cannot reach remote 'nosuch'")
    dash = iterare("push", "--", "-x", cwd=repo)
    assert (dash.returncode, dash.stderr) == (
        2, "error: invalid remote '-x' (give a remote name or URL)\n")
    bare = tmp_path / "empty.git"
    git("init", "-q", "--bare", str(bare), cwd=tmp_path)
    nothing = iterare("push", str(bare), cwd=repo)
    assert (nothing.returncode, nothing.stderr) == (
        1, "error: there are no run records to push\n")
    assert iterare("fetch", str(bare), cwd=repo).stdout == f"runs from {bare}: none\n"
