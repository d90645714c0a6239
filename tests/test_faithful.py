"""A run sees the user's repository as it is and brings back exactly what the agent
changed: sparse checkouts, filters (rot13, Git LFS, ident, eol/autocrlf), submodules.
Real git (and the real git-lfs) in temporary repositories; the agent's side is simulated
on the host as in tests/test_workspace.py."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from git_iterare.errors import OperationFailed
from git_iterare.git import repo as repo_mod
from git_iterare.git.merge import merge_run
from git_iterare.runner import importer, teardown
from tests.conftest import git
from tests.test_workspace import RUN, agent, finish, prepare

ROT13 = "tr a-zA-Z n-za-mN-ZA-M"


def changed_paths(path: Path, base: str, head: str) -> list[str]:
    return git("diff", "--name-only", "--no-renames", base, head, cwd=path).stdout.split()


def blob(path: Path, rev: str) -> bytes:
    return subprocess.run(["git", "cat-file", "blob", rev], cwd=path, capture_output=True,
                          check=True).stdout


def sparse_repo(repo: Path, *sparse_args: str) -> str:
    for folder, name, text in (("app", "a", "a\n"), ("docs", "d", "d\n")):
        (repo / folder).mkdir()
        (repo / folder / name).write_text(text)
    git("add", ".", cwd=repo)
    git("commit", "-qm", "app and docs", cwd=repo)
    git("sparse-checkout", "set", *sparse_args, cwd=repo)
    assert not (repo / "docs" / "d").exists()
    return git("rev-parse", "HEAD", cwd=repo).stdout.strip()


@pytest.mark.parametrize("sparse_args", [("--cone", "app"), ("--no-cone", "/app/", "/*.md")],
                         ids=["cone", "no-cone"])
def test_sparse_checkout_never_turns_into_a_deletion(repo: Path, sparse_args: tuple[str, ...]
                                                     ) -> None:
    base = sparse_repo(repo, *sparse_args)
    # other checkout states of the user's index and worktree are not the run's business
    git("update-index", "--assume-unchanged", "README.md", cwd=repo)
    (repo / "README.md").write_text("local edit the user hides from git\n")
    ws = prepare(repo)
    # the agent sees the whole tree; its git sees nothing changed
    assert (ws.worktree / "docs" / "d").read_text() == "d\n"
    assert (ws.worktree / "README.md").read_text() == "hello\n"
    assert agent(ws, "status", "--porcelain").stdout == ""
    assert git("status", "--porcelain", cwd=ws.worktree).stdout == ""  # the user's view
    with open(ws.worktree / "app" / "a", "a") as f:
        f.write("x\n")
    result = finish(repo, ws)
    assert changed_paths(repo, base, result.head) == ["app/a"]
    git("update-index", "--no-assume-unchanged", "README.md", cwd=repo)
    git("checkout", "README.md", cwd=repo)
    merged = merge_run(repo_mod.discover(repo), ws.branch)
    assert merged.fast_forward
    assert git("ls-tree", "-r", "--name-only", "HEAD", cwd=repo).stdout.split() == [
        "README.md", "app/a", "docs/d"]
    assert (repo / "app" / "a").read_text() == "a\nx\n"
    assert not (repo / "docs" / "d").exists()  # still out of the user's sparse checkout
    assert git("status", "--porcelain", cwd=repo).stdout == ""
    teardown.cleanup_run(repo_mod.discover(repo), ws)
    assert git("ls-tree", "-r", "--name-only", "HEAD", cwd=repo).stdout.split()[-1] == "docs/d"


def rot_repo(repo: Path, marker: Path | None = None) -> str:
    git("config", "filter.rot.clean", ROT13, cwd=repo)
    git("config", "filter.rot.smudge", ROT13, cwd=repo)
    git("config", "filter.rot.required", "true", cwd=repo)
    (repo / ".gitattributes").write_text("*.dat filter=rot\n")
    (repo / "d.dat").write_text("hello secret\n")
    (repo / "keep.dat").write_text("untouched\n")
    git("add", ".", cwd=repo)
    git("commit", "-qm", "rot13", cwd=repo)
    assert blob(repo, "HEAD:d.dat") == b"uryyb frperg\n"
    return git("rev-parse", "HEAD", cwd=repo).stdout.strip()


def test_rot13_filter_unchanged_files_identical_changed_ones_cleaned(repo: Path,
                                                                     tmp_path: Path) -> None:
    base = rot_repo(repo)
    ws = prepare(repo)
    assert (ws.worktree / "d.dat").read_text() == "hello secret\n"  # smudged for the agent
    assert agent(ws, "status", "--porcelain").stdout == ""
    (ws.worktree / "other.txt").write_text("agent\n")
    (ws.worktree / "new.dat").write_text("new secret\n")
    (ws.worktree / "d.dat").write_text("hello changed\n")
    # the agent's own attributes count for nothing on the host
    marker = tmp_path / "ran"
    git("config", "filter.spy.clean", f"touch {marker}; cat", cwd=repo)
    (ws.worktree / "sub").mkdir()
    (ws.worktree / "sub" / ".gitattributes").write_text("* filter=spy\n*.txt filter=rot\n")
    (ws.worktree / "sub" / "plain.txt").write_text("plain\n")
    result = finish(repo, ws)
    assert not marker.exists()
    assert blob(repo, f"{result.head}:keep.dat") == blob(repo, f"{base}:keep.dat")
    assert blob(repo, f"{result.head}:d.dat") == b"uryyb punatrq\n"
    assert blob(repo, f"{result.head}:new.dat") == b"arj frperg\n"
    assert blob(repo, f"{result.head}:other.txt") == b"agent\n"
    assert blob(repo, f"{result.head}:sub/plain.txt") == b"plain\n"
    assert sorted(changed_paths(repo, base, result.head)) == [
        "d.dat", "new.dat", "other.txt", "sub/.gitattributes", "sub/plain.txt"]
    assert teardown.unfinished_work(repo_mod.discover(repo), ws, result.head) is None


def test_agent_commit_of_smudged_file_is_cleaned_by_the_automatic_commit(repo: Path) -> None:
    base = rot_repo(repo)
    ws = prepare(repo)
    (ws.worktree / "d.dat").write_text("hello agent\n")
    agent(ws, "commit", "-qam", "agent edit")  # no filter in the sandbox: stored smudged
    result = finish(repo, ws)
    assert blob(repo, f"{result.head}:d.dat") == b"uryyb ntrag\n"
    assert blob(repo, f"{result.head}:keep.dat") == blob(repo, f"{base}:keep.dat")


def test_reuse_runs_no_filter_the_agents_attributes_name(repo: Path, tmp_path: Path) -> None:
    rot_repo(repo)
    marker = tmp_path / "ran"
    git("config", "filter.spy.clean", f"touch {marker}; cat", cwd=repo)
    git("config", "filter.spy.smudge", f"touch {marker}; cat", cwd=repo)
    ws = prepare(repo)
    (ws.worktree / ".gitattributes").write_text("*.dat filter=rot\n* filter=spy\n")
    (ws.worktree / "x.txt").write_text("x\n")
    first = finish(repo, ws)
    assert not marker.exists()
    second = teardown.reuse_run(repo_mod.discover(repo), ws, "again-0123abcd",
                                 alternates=str(repo / ".git" / "objects"))
    assert not marker.exists()
    assert (second.worktree / "d.dat").read_text() == "hello secret\n"  # rot still counts
    (second.worktree / "y.txt").write_text("y\n")
    (second.worktree / "d.dat").write_text("hello again\n")
    result = importer.finish_run(repo_mod.discover(repo), second, {}, "again")
    assert not marker.exists()
    assert blob(repo, f"{result.head}:d.dat") == b"uryyb ntnva\n"
    assert changed_paths(repo, first.head, result.head) == ["d.dat", "y.txt"]


@pytest.fixture
def lfs_repo(repo: Path) -> Path:
    assert shutil.which("git-lfs"), "git-lfs is needed (Debian package git-lfs, .ci/setup)"
    git("lfs", "install", "--local", cwd=repo)
    git("lfs", "track", "*.bin", cwd=repo)
    (repo / "big.bin").write_bytes(bytes(range(256)) * 64)
    git("add", ".", cwd=repo)
    git("commit", "-qm", "lfs", cwd=repo)
    assert blob(repo, "HEAD:big.bin").startswith(b"version https://git-lfs.github.com/spec/v1")
    return repo


def test_git_lfs_pointers_stay_pointers(lfs_repo: Path) -> None:
    repo = lfs_repo
    base = git("rev-parse", "HEAD", cwd=repo).stdout.strip()
    ws = prepare(repo)
    assert (ws.worktree / "big.bin").read_bytes() == bytes(range(256)) * 64
    assert agent(ws, "status", "--porcelain").stdout == ""
    (ws.worktree / "new.bin").write_bytes(b"\0binary by the agent\n" * 100)
    (ws.worktree / "notes.txt").write_text("only this\n")
    result = finish(repo, ws)
    assert blob(repo, f"{result.head}:big.bin") == blob(repo, f"{base}:big.bin")
    pointer = blob(repo, f"{result.head}:new.bin").decode()
    assert pointer.startswith("version https://git-lfs.github.com/spec/v1\noid sha256:")
    oid = pointer.split("oid sha256:")[1].split()[0]
    stored = repo / ".git" / "lfs" / "objects" / oid[:2] / oid[2:4] / oid
    assert stored.read_bytes() == b"\0binary by the agent\n" * 100
    assert sorted(changed_paths(repo, base, result.head)) == ["new.bin", "notes.txt"]
    merge_run(repo_mod.discover(repo), ws.branch)
    assert (repo / "new.bin").read_bytes() == b"\0binary by the agent\n" * 100


def test_ident_eol_and_autocrlf(repo: Path) -> None:
    git("config", "core.autocrlf", "true", cwd=repo)
    (repo / ".gitattributes").write_text("*.c ident\n*.txt text\n*.crlf text eol=crlf\n"
                                         "*.lf text eol=lf\n")
    (repo / "id.c").write_text("/* $Id$ */\nint x;\n")
    (repo / "t.txt").write_text("one\ntwo\n")
    (repo / "w.crlf").write_text("a\nb\n")
    (repo / "u.lf").write_text("a\nb\n")
    (repo / "auto.md").write_text("auto\ncrlf\n")
    git("add", ".", cwd=repo)
    git("commit", "-qm", "conversions", cwd=repo)
    base = git("rev-parse", "HEAD", cwd=repo).stdout.strip()
    ws = prepare(repo)
    assert (ws.worktree / "t.txt").read_bytes() == b"one\r\ntwo\r\n"
    assert (ws.worktree / "u.lf").read_bytes() == b"a\nb\n"
    assert (ws.worktree / "id.c").read_text().startswith("/* $Id: ")
    assert agent(ws, "status", "--porcelain").stdout == ""
    (ws.worktree / "new.txt").write_bytes(b"x\r\ny\r\n")
    (ws.worktree / "w.crlf").write_bytes(b"a\r\nb\r\nc\r\n")
    result = finish(repo, ws)
    for name in ("id.c", "t.txt", "u.lf", "auto.md", ".gitattributes"):
        assert blob(repo, f"{result.head}:{name}") == blob(repo, f"{base}:{name}"), name
    assert blob(repo, f"{result.head}:new.txt") == b"x\ny\n"
    assert blob(repo, f"{result.head}:w.crlf") == b"a\nb\nc\n"
    assert sorted(changed_paths(repo, base, result.head)) == ["new.txt", "w.crlf"]


def add_submodule(repo: Path, tmp_path: Path, init: bool = True) -> str:
    lib = tmp_path / "lib"
    lib.mkdir()
    git("init", "-q", "-b", "main", cwd=lib)
    (lib / "lib.c").write_text("int lib;\n")
    git("add", ".", cwd=lib)
    git("commit", "-qm", "lib", cwd=lib)
    git("-c", "protocol.file.allow=always", "submodule", "add", "-q", str(lib), "vendor/lib",
        cwd=repo)
    git("commit", "-qm", "submodule", cwd=repo)
    if not init:
        git("submodule", "deinit", "-q", "-f", "vendor/lib", cwd=repo)
        shutil.rmtree(repo / ".git" / "modules")
    return git("rev-parse", "HEAD:vendor/lib", cwd=repo).stdout.strip()


def test_submodule_is_present_and_work_in_it_is_committed_there(repo: Path, tmp_path: Path
                                                                ) -> None:
    recorded = add_submodule(repo, tmp_path)
    ws = prepare(repo)
    sub = ws.worktree / "vendor" / "lib"
    assert (sub / "lib.c").read_text() == "int lib;\n"
    assert not (sub / ".git").exists()
    assert agent(ws, "status", "--porcelain").stdout == ""
    (sub / "lib.c").write_text("int lib = 2;\n")
    (sub / "new.c").write_text("int added;\n")
    result = finish(repo, ws)
    modules = repo / ".git" / "modules" / "vendor" / "lib"
    new = git("rev-parse", "HEAD:vendor/lib", cwd=repo).stdout.strip()
    link = git("rev-parse", f"{result.head}:vendor/lib", cwd=repo).stdout.strip()
    assert new == recorded != link
    assert git("--git-dir", str(modules), "rev-parse", f"refs/heads/iterare/{RUN}",
               cwd=repo).stdout.strip() == link
    assert git("--git-dir", str(modules), "rev-parse", f"{link}^", cwd=repo
               ).stdout.strip() == recorded
    assert git("--git-dir", str(modules), "show", f"{link}:new.c", cwd=repo
               ).stdout == "int added;\n"
    again = finish(repo, ws)  # idempotent
    assert again.head == result.head and not again.autocommitted
    merge_run(repo_mod.discover(repo), ws.branch)
    git("submodule", "update", "-q", cwd=repo)
    assert (repo / "vendor" / "lib" / "new.c").read_text() == "int added;\n"
    teardown.cleanup_run(repo_mod.discover(repo), ws)


def test_uninitialized_submodule_keeps_the_agents_files(repo: Path, tmp_path: Path) -> None:
    add_submodule(repo, tmp_path, init=False)
    ws = prepare(repo)
    sub = ws.worktree / "vendor" / "lib"
    assert sub.is_dir() and list(sub.iterdir()) == []
    (sub / "made.c").write_text("int made;\n")
    result = finish(repo, ws)
    assert [s.path for s in result.skipped] == ["vendor/lib"]
    with pytest.raises(OperationFailed, match="submodule vendor/lib"):
        teardown.cleanup_run(repo_mod.discover(repo), ws, merged=True)
    assert (sub / "made.c").read_text() == "int made;\n"


def test_git_lfs_on_the_host_never_downloads(lfs_repo: Path) -> None:
    repo = lfs_repo
    # the agent's (or a repository's) .lfsconfig names a server: it is not asked
    (repo / ".lfsconfig").write_text('[lfs]\n\turl = "http://127.0.0.1:1/evil"\n')
    git("add", ".lfsconfig", cwd=repo)
    git("commit", "-qm", "lfs server", cwd=repo)
    shutil.rmtree(repo / ".git" / "lfs" / "objects")
    ws = prepare(repo)
    pointer = blob(repo, "HEAD:big.bin")
    assert (ws.worktree / "big.bin").read_bytes() == pointer
    (ws.worktree / "x.txt").write_text("x\n")
    result = finish(repo, ws)
    assert blob(repo, f"{result.head}:big.bin") == pointer
