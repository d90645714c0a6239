"""The checkout map records the bytes each file was checked out with (git_iterare.git.
checkout): hashed from the worktree when a conversion may apply, the blob's own id when
none can (filters.may_convert). Real git in temporary repositories."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from git_iterare.git import checkout, filters
from git_iterare.runner import workspace
from tests.conftest import git
from tests.test_workspace import finish, prepare


def commit_files(repo: Path) -> str:
    (repo / "text.txt").write_text("one\ntwo\n")
    (repo / "tool.sh").write_text("#!/bin/sh\necho hi\n")
    (repo / "tool.sh").chmod(0o755)
    os.symlink("text.txt", repo / "link")
    git("add", ".", cwd=repo)
    git("commit", "-qm", "files", cwd=repo)
    return git("rev-parse", "HEAD", cwd=repo).stdout.strip()


def entries(repo: Path, ws: workspace.RunWorkspace) -> dict[str, checkout.Entry]:
    found = checkout.read_map(workspace.checkout_map_path(ws), repo / ".git")
    assert found is not None
    return {e.path: e for e in found.entries}


@pytest.mark.parametrize(("attributes", "line_endings", "converts"), [
    (filters.RESET_LINE, "", False),
    (filters.RESET_LINE + "\n# a comment\n\n", "[core]\n\tautocrlf = false\n", False),
    (filters.RESET_LINE, "[core]\n\teol = crlf\n", False),
    (filters.RESET_LINE, "[core]\n\tautocrlf = true\n", True),
    (filters.RESET_LINE, "[core]\n\tautocrlf = input\n", True),
    (filters.RESET_LINE + "*.png binary\n", "", True),
    (filters.RESET_LINE + "*.c ident\n", "", True),
    ("", "", False),
])
def test_may_convert(attributes: str, line_endings: str, converts: bool) -> None:
    assert filters.may_convert(attributes, line_endings) is converts


def test_without_conversions_the_map_holds_the_blobs_and_they_are_the_files(repo: Path
                                                                            ) -> None:
    commit_files(repo)
    ws = prepare(repo)
    found = entries(repo, ws)
    assert {"text.txt", "tool.sh", "link"} <= set(found)
    for path, entry in found.items():
        assert entry.raw == entry.blob == checkout.raw_id(ws.worktree / path), path


def test_with_a_conversion_the_map_holds_the_bytes_written(repo: Path) -> None:
    git("config", "core.autocrlf", "true", cwd=repo)
    commit_files(repo)
    ws = prepare(repo)
    found = entries(repo, ws)
    assert (ws.worktree / "text.txt").read_bytes() == b"one\r\ntwo\r\n"
    text = found["text.txt"]
    assert text.raw == checkout.raw_id(ws.worktree / "text.txt") != text.blob
    # Unchanged, it is committed as its blob; changed, cleaned.
    (ws.worktree / "tool.sh").write_text("#!/bin/sh\r\necho bye\r\n")
    result = finish(repo, ws)
    assert git("diff", "--name-only", ws.base_commit, result.head, cwd=repo).stdout.split() \
        == ["tool.sh"]
    assert git("show", f"{result.head}:tool.sh", cwd=repo).stdout == "#!/bin/sh\necho bye\n"


def test_finish_walks_the_worktree_once_and_keeps_its_bound(
        repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from git_iterare import limits
    from git_iterare.errors import OperationFailed
    from git_iterare.git import safegit

    commit_files(repo)
    ws = prepare(repo)
    walks: list[Path] = []
    real = safegit.scan_worktree

    def counted(worktree: Path, **options: Any) -> safegit.TreeScan:
        walks.append(worktree)
        return real(worktree, **options)

    monkeypatch.setattr(safegit, "scan_worktree", counted)
    (ws.worktree / "new.txt").write_text("new\n")
    result = finish(repo, ws)
    assert walks == [ws.worktree]
    assert "new.txt" in git("show", "--name-only", "--format=", result.head, cwd=repo).stdout
    # Over the bound, the walk made unbounded still refuses the worktree.
    monkeypatch.setattr(limits, "MAX_OBJECT_BYTES", 10)
    monkeypatch.setattr(limits, "MAX_EXCLUDED_PATHS", 2)
    for n in range(3):
        (ws.worktree / f"big{n}.txt").write_text("more than ten bytes\n")
    with pytest.raises(OperationFailed, match="MAX_EXCLUDED_PATHS"):
        finish(repo, ws)


def test_converted_files_are_written_as_the_host_checks_them_out(repo: Path, tmp_path: Path
                                                                 ) -> None:
    """What a remote engine is sent of the files the user's filters convert: Git LFS
    (offline, from .git/lfs) and a rot13 filter; files that no conversion changes are not
    written."""
    from tests.test_faithful import ROT13

    git("lfs", "install", "--local", cwd=repo)
    git("lfs", "track", "*.bin", cwd=repo)
    for key, value in (("clean", ROT13), ("smudge", ROT13), ("required", "true")):
        git("config", f"filter.rot.{key}", value, cwd=repo)
    with (repo / ".gitattributes").open("a") as handle:
        handle.write("*.dat filter=rot\n*.txt text eol=lf\n")
    (repo / "big.bin").write_bytes(bytes(range(256)) * 64)
    (repo / "d.dat").write_text("hello secret\n")
    (repo / "plain.txt").write_text("no conversion\n")
    git("add", ".", cwd=repo)
    git("commit", "-qm", "filters", cwd=repo)
    base = git("rev-parse", "HEAD", cwd=repo).stdout.strip()
    out = tmp_path / "out"
    out.mkdir()
    found = checkout.converted(repo / ".git", base, out)
    assert sorted(e.path for e in found) == ["big.bin", "d.dat"]
    assert all(e.raw == checkout.raw_id(out / e.path) != e.blob for e in found)
    assert (out / "big.bin").read_bytes() == bytes(range(256)) * 64
    assert (out / "d.dat").read_text() == "hello secret\n"
    assert sorted(p.name for p in out.iterdir()) == ["big.bin", "d.dat"]
    # With nothing to convert, nothing is looked at.
    (repo / ".gitattributes").unlink()
    git("config", "--unset", "filter.rot.required", cwd=repo)
    git("commit", "-qam", "no attributes", cwd=repo)
    again = tmp_path / "again"
    again.mkdir()
    assert checkout.converted(repo / ".git", git("rev-parse", "HEAD", cwd=repo).stdout.strip(),
                              again) == []
