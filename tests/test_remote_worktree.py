"""The host side of a remote run's worktree, without Docker: it is never checked out on the
host (the engine checks the base out itself), yet finishing, cleanup and the checkout map
behave as for a local run; when its files on the engine are gone, the host fills it with
the base, so a finish never commits the deletion of everything."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from git_iterare.git import checkout
from git_iterare.git import repo as repo_mod
from git_iterare.runner import importer, teardown, workspace
from tests.conftest import git

RUN = "far-0123abcd"
TRAILERS = {"Iterare-Run": RUN, "Iterare-Agent": "shell"}


@pytest.fixture
def project(repo: Path) -> Path:
    (repo / "bin").mkdir()
    (repo / "bin" / "tool").write_text("#!/bin/sh\necho tool\n")
    os.chmod(repo / "bin" / "tool", 0o755)
    os.symlink("README.md", repo / "link")
    (repo / "crlf.txt").write_bytes(b"one\r\ntwo\r\n")
    git("add", ".", cwd=repo)
    git("commit", "-qm", "more", cwd=repo)
    return repo


def prepare_remote(path: Path) -> workspace.RunWorkspace:
    r = repo_mod.discover(path)
    return workspace.make_run(r, RUN, "HEAD", alternates=str(r.common_dir / "objects"),
                              on_engine=True)


def test_remote_worktree_is_not_checked_out_and_is_marked(project: Path) -> None:
    ws = prepare_remote(project)
    assert sorted(os.listdir(ws.worktree)) == [".git"]
    assert workspace.worktree_on_engine(ws)
    assert not (ws.gitdir / "index").exists()  # the engine's checkout writes its own
    assert (ws.gitdir / ws.ref).read_text().strip() == git("rev-parse", "HEAD",
                                                           cwd=project).stdout.strip()
    # The checkout map is what git without filters writes there: each file's blob bytes.
    r = repo_mod.discover(project)
    made = checkout.read_map(workspace.checkout_map_path(ws), r.common_dir)
    assert made is not None
    listed = {e.path: (e.mode, e.blob, e.raw) for e in made.entries}
    blob = git("rev-parse", "HEAD:bin/tool", cwd=project).stdout.strip()
    assert listed["bin/tool"] == ("100755", blob, blob)
    assert listed["link"][0] == "120000"
    assert set(listed) == {"README.md", "bin/tool", "link", "crlf.txt"}
    assert made.attributes_commit == git("rev-parse", "HEAD", cwd=project).stdout.strip()


def test_unfilled_worktree_holds_no_work_and_cleans_up(project: Path) -> None:
    ws = prepare_remote(project)
    r = repo_mod.discover(project)
    head = repo_mod.rev(r, ws.ref)
    assert teardown.unfinished_work(r, ws, head) is None  # an empty copy is no deletion
    done = teardown.cleanup_run(r, ws, merged=True)
    assert done.removed_worktree and done.removed_gitdir
    assert not workspace.on_engine_path(ws).exists()
    assert not workspace.checkout_map_path(ws).exists()


def test_finish_of_an_unfilled_worktree_imports_commits_only(project: Path) -> None:
    ws = prepare_remote(project)
    r = repo_mod.discover(project)
    base = ws.base_commit
    done = importer.finish_run(r, ws, TRAILERS, "leftovers")
    assert (done.head, done.autocommitted, done.commits) == (base, False, ())


def test_fetched_files_are_committed_as_the_engine_left_them(project: Path) -> None:
    """What fetch_results leaves: the engine's files in the host worktree, marker gone.
    Files whose bytes are their blob's are recorded as that blob; changes are committed."""
    ws = prepare_remote(project)
    r = repo_mod.discover(project)
    for rel in ("README.md", "bin/tool", "crlf.txt"):
        target = ws.worktree / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes((project / rel).read_bytes())
    os.chmod(ws.worktree / "bin" / "tool", 0o755)
    os.symlink("README.md", ws.worktree / "link")
    (ws.worktree / "new.txt").write_text("by the agent\n")
    workspace.on_engine_path(ws).unlink()
    done = importer.finish_run(r, ws, TRAILERS, "leftovers")
    assert done.autocommitted
    changed = git("diff", "--name-status", ws.base_commit, done.head, cwd=project).stdout
    assert changed == "A\tnew.txt\n"


def test_fill_worktree_gives_the_base_as_a_local_run_has_it(project: Path) -> None:
    ws = prepare_remote(project)
    r = repo_mod.discover(project)
    (ws.worktree / "stray").write_text("left by an interrupted fetch\n")
    workspace.fill_worktree(r, ws)
    assert not workspace.worktree_on_engine(ws)
    assert (ws.worktree / "README.md").read_text() == "hello\n"
    assert os.readlink(ws.worktree / "link") == "README.md"
    assert os.stat(ws.worktree / "bin" / "tool").st_mode & 0o111
    assert not (ws.worktree / "stray").exists()
    assert (ws.gitdir / "index").is_file()
    assert git("status", "--porcelain", cwd=ws.worktree).stdout == ""
    done = importer.finish_run(r, ws, TRAILERS, "leftovers")
    assert (done.head, done.autocommitted) == (ws.base_commit, False)
