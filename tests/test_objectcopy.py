"""Copying a run's commits out of the run gitdir (git_iterare.git.objectcopy): what the
main repository has counts only when the run was given it; real git, no Docker."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from git_iterare.errors import OperationFailed
from git_iterare.git.objectcopy import copy_objects
from tests.conftest import git


def _commit_in(objects: Path, tree: str, *parents: str) -> str:
    """Write a commit of ``tree`` with ``parents`` as a loose object into ``objects``."""
    text = f"tree {tree}\n" + "".join(f"parent {p}\n" for p in parents) + (
        "author A <a@b> 1 +0000\ncommitter A <a@b> 1 +0000\n\nagent\n")
    return subprocess.run(["git", "hash-object", "-t", "commit", "-w", "--literally",
                           "--stdin"], input=text, capture_output=True, text=True,
                          check=True, env={"GIT_OBJECT_DIRECTORY": str(objects),
                                           "PATH": "/usr/bin:/bin"}).stdout.strip()


@pytest.fixture
def stores(repo: Path, tmp_path: Path) -> tuple[Path, Path, str, str]:
    """(the main repository's common dir, a run gitdir, its base, a private commit the
    run was not given)."""
    (repo / "a.txt").write_text("a\n")
    git("add", "a.txt", cwd=repo)
    git("commit", "-qm", "a", cwd=repo)
    base = git("rev-parse", "HEAD", cwd=repo).stdout.strip()
    git("checkout", "-qb", "private", cwd=repo)
    (repo / "s.txt").write_text("SECRET\n")
    git("add", "s.txt", cwd=repo)
    git("commit", "-qm", "private", cwd=repo)
    private = git("rev-parse", "HEAD", cwd=repo).stdout.strip()
    run = tmp_path / "run"
    (run / "objects" / "pack").mkdir(parents=True)
    return repo / ".git", run, base, private


def test_what_the_run_was_not_given_is_not_borrowed(stores: tuple[Path, Path, str, str]
                                                    ) -> None:
    common, run, base, private = stores
    tree = git("rev-parse", f"{base}^{{tree}}", cwd=common.parent).stdout.strip()
    borrowing = _commit_in(run / "objects", tree, base, private)
    given = {base, tree, *git("ls-tree", "-r", "--format=%(objectname)", base,
                              cwd=common.parent).stdout.split()}
    with pytest.raises(OperationFailed, match=f"object {private} is neither in the run "
                                              "gitdir nor in what the run was given"):
        copy_objects(run, borrowing, common, lambda sha, _: sha in given)
    plain = _commit_in(run / "objects", tree, base)
    assert copy_objects(run, plain, common, lambda sha, _: sha in given) == 1


def test_an_odd_pack_of_the_agents_is_no_traceback(stores: tuple[Path, Path, str, str]
                                                   ) -> None:
    """Asking the run gitdir whether it holds an object the run was not given reads its
    packs, which the agent wrote: an odd one is one line, not dulwich's error."""
    common, run, base, _ = stores
    for suffix in (".idx", ".pack"):
        (run / "objects" / "pack" / f"pack-{'0' * 40}{suffix}").write_bytes(b"\xff" * 2000)
    tree = git("rev-parse", f"{base}^{{tree}}", cwd=common.parent).stdout.strip()
    plain = _commit_in(run / "objects", tree, base)
    with pytest.raises(OperationFailed, match=f"object {tree} is neither"):
        copy_objects(run, plain, common, lambda sha, _: sha == base)
    assert copy_objects(run, plain, common, lambda sha, _: True) == 1
