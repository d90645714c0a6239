"""Finishing a run whose worktree or commits hold paths git refuses to record (issue 25,
item 2): real git in temp repositories, the container's view simulated as in
tests/test_workspace.py. The end-to-end runs are in tests/test_refused_paths_e2e.py."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from git_iterare.git import pathnames
from git_iterare.git import repo as repo_mod
from git_iterare.runner import workspace
from tests.conftest import git
from tests.test_workspace import agent, finish, prepare, tree_of

HFS_GIT = ".g\u200cit"


def mktree(ws: workspace.RunWorkspace, lines: list[str]) -> str:
    """A tree made with plumbing in the run gitdir (git's porcelain refuses such names)."""
    env = {**os.environ, "GIT_DIR": str(ws.gitdir), "GIT_WORK_TREE": str(ws.worktree)}
    return subprocess.run(["git", "mktree", "-z"], env=env, cwd=ws.worktree, check=True,
                          capture_output=True,
                          input=b"".join(line.encode() + b"\0" for line in lines)
                          ).stdout.decode().strip()


def blob(ws: workspace.RunWorkspace, text: str) -> str:
    env = {**os.environ, "GIT_DIR": str(ws.gitdir)}
    return subprocess.run(["git", "hash-object", "-w", "--stdin"], env=env, check=True,
                          capture_output=True, input=text.encode()).stdout.decode().strip()


def commit_tree(ws: workspace.RunWorkspace, tree: str, parent: str, message: str) -> str:
    return agent(ws, "commit-tree", tree, "-p", parent, "-m", message).stdout.strip()


def test_worktree_names_git_refuses_are_left_out_and_named(repo: Path) -> None:
    ws = prepare(repo)
    for folder in (".GIT/hooks", "src/.Git", "git~1", ".git. ", HFS_GIT, ".gitmodules/sub"):
        (ws.worktree / folder).mkdir(parents=True)
    (ws.worktree / ".GIT" / "hooks" / "post-checkout").write_text("#!/bin/sh\n")
    (ws.worktree / "src" / ".Git" / "config").write_text("[core]\n")
    (ws.worktree / "git~1" / "a").write_text("a\n")
    (ws.worktree / ".git. " / "b").write_text("b\n")
    (ws.worktree / HFS_GIT / "c").write_text("c\n")
    (ws.worktree / "src" / "ok.txt").write_text("ok\n")
    (ws.worktree / "src" / ".GITMODULES").symlink_to("ok.txt")
    (ws.worktree / ".gitmodules" / "sub" / "link").symlink_to("../x")
    (ws.worktree / ".gitmodules" / "sub" / "file").write_text("kept\n")
    (ws.worktree / "fine-link").symlink_to("README.md")
    (ws.worktree / "win\\.git").write_text("a separator on Windows\n")
    (ws.worktree / "[x]*.git ").mkdir()  # glob and exclude-file syntax in the name
    (ws.worktree / "[x]*.git " / "f").write_text("f\n")
    result = finish(repo, ws)
    assert result.autocommitted and result.rejected_head is None
    assert tree_of(repo, result.head) == {
        ".gitmodules/sub/file": "100644 kept\n", "README.md": "100644 hello\n",
        "[x]*.git /f": "100644 f\n",
        "fine-link": "120000 README.md", "src/ok.txt": "100644 ok\n"}
    assert [(s.path, s.reason) for s in result.skipped] == [
        (".GIT", "a name git refuses to commit: .git in any case"),
        (".git. ", "a name git refuses to commit: what Windows reads as .git"),
        (".gitmodules/sub/link", "a name git refuses to commit: a symlinked .gitmodules"),
        (HFS_GIT, "a name git refuses to commit: what macOS reads as .git"),
        ("git~1", "a name git refuses to commit: what Windows reads as .git"),
        ("src/.GITMODULES", "a name git refuses to commit: a symlinked .gitmodules"),
        ("src/.Git", "a name git refuses to commit: .git in any case"),
        ("win\\.git", "a name git refuses to commit: what Windows reads as .git")]
    assert (ws.worktree / ".GIT" / "hooks" / "post-checkout").is_file()  # kept on disk
    # The host's view of the run worktree is clean but for what was left out.
    assert finish(repo, ws).autocommitted is False


def test_the_base_keeps_a_tracked_path_git_refuses_only_on_macos(repo: Path) -> None:
    """An HFS+ alias of .git is an ordinary name to git on Linux: a base may track one.
    The agent's change to it is left out, and the base's entry kept (not deleted)."""
    (repo / HFS_GIT).mkdir()
    (repo / HFS_GIT / "f").write_text("base\n")
    git("add", ".", cwd=repo)
    git("commit", "-qm", "a tricky name", cwd=repo)
    ws = prepare(repo)
    (ws.worktree / HFS_GIT / "f").write_text("changed\n")
    (ws.worktree / "new.txt").write_text("new\n")
    result = finish(repo, ws)
    assert tree_of(repo, result.head) == {
        f"{HFS_GIT}/f": "100644 base\n", "README.md": "100644 hello\n",
        "new.txt": "100644 new\n"}


def test_a_commit_git_refuses_is_dropped_and_the_worktree_committed_on_the_base(
        repo: Path) -> None:
    base = git("rev-parse", "HEAD", cwd=repo).stdout.strip()
    ws = prepare(repo)
    (ws.worktree / "good.txt").write_text("good\n")
    agent(ws, "add", "good.txt")
    agent(ws, "commit", "-qm", "good")
    good = agent(ws, "rev-parse", "HEAD").stdout.strip()
    script = blob(ws, "#!/bin/sh\n")
    hook = mktree(ws, [f"100755 blob {script}\tpost-checkout"])
    hooks = mktree(ws, [f"040000 tree {hook}\thooks"])
    listing = agent(ws, "ls-tree", "-z", "HEAD").stdout.split("\0")
    evil = commit_tree(ws, mktree(ws, [*filter(None, listing), f"040000 tree {hooks}\t.GIT"]),
                       good, "evil")
    agent(ws, "update-ref", "HEAD", evil)
    (ws.worktree / "later.txt").write_text("later\n")
    result = finish(repo, ws)
    assert result.rejected_head == (f"its commit {evil[:12]} holds a path git refuses: "
                                    "'.GIT' (.git in any case)")
    assert git("rev-list", "--parents", "-n1", result.head, cwd=repo).stdout.split() == [
        result.head, base]
    assert tree_of(repo, result.head) == {
        "README.md": "100644 hello\n", "good.txt": "100644 good\n",
        "later.txt": "100644 later\n"}


def bad_tree(ws: workspace.RunWorkspace, listing: list[str]) -> str:
    """The base's tree (``listing``, ls-tree lines) with ``src/../a/b/c/x``, written in the
    run gitdir of ``ws``."""
    x = blob(ws, "x\n")
    deep = mktree(ws, [f"100644 blob {x}\tx"])
    for name in ("c", "b", "a"):
        deep = mktree(ws, [f"040000 tree {deep}\t{name}"])
    src = mktree(ws, [f"040000 tree {deep}\t.."])
    return mktree(ws, [f"040000 tree {src}\tsrc", *listing])


def test_a_refused_path_deep_in_history_or_on_a_moved_head_is_found(repo: Path) -> None:
    """The bad commit below a good one; then on a branch the agent switched to."""
    ws = prepare(repo)
    base = agent(ws, "rev-parse", "HEAD").stdout.strip()
    listing = [*filter(None, agent(ws, "ls-tree", "-z", "HEAD").stdout.split("\0"))]
    bad = bad_tree(ws, listing)
    first = commit_tree(ws, bad, base, "bad, deep")
    fixed = commit_tree(ws, mktree(ws, listing), first, "the bad tree gone again")
    agent(ws, "update-ref", "HEAD", fixed)
    result = finish(repo, ws)
    assert result.rejected_head == (f"its commit {first[:12]} holds a path git refuses: "
                                    "'src/..' (a '.' or '..' entry)")

    ws2 = prepare(repo, "moved-0123abcd")
    agent(ws2, "checkout", "-q", "-b", "side")
    # The first run's objects are none of the second's (it sees its base's history only).
    agent(ws2, "update-ref", "refs/heads/side",
          commit_tree(ws2, bad_tree(ws2, listing), base, "on a side"))
    (ws2.worktree / "kept.txt").write_text("kept\n")
    result = finish(repo, ws2)
    assert result.rejected_head is None
    assert "its commits there were not imported (its commit" in result.notes[0]
    assert "kept.txt" in tree_of(repo, result.head)


def test_first_refused_reads_only_what_a_commit_changes(repo: Path) -> None:
    """A parent of the user's is taken as git took it (an HFS+ alias is an ordinary name
    on Linux); what the agent adds is checked, also a symlink moved below .gitmodules."""
    r = repo_mod.discover(repo)
    (repo / HFS_GIT).mkdir()
    (repo / HFS_GIT / "f").write_text("base\n")
    (repo / "d").mkdir()
    (repo / "d" / "link").symlink_to("x")
    git("add", ".", cwd=repo)
    git("commit", "-qm", "names fine on Linux", cwd=repo)
    user_head = git("rev-parse", "HEAD", cwd=repo).stdout.strip()
    objects = r.common_dir / "objects"
    assert pathnames.first_refused(objects, [user_head]) == (
        user_head, HFS_GIT.encode(), pathnames.HFS_DOTGIT)  # its own parent: read in full

    def commit(lines: str) -> str:
        tree = git("mktree", cwd=repo, input=lines).stdout.strip()
        return git("commit-tree", tree, "-p", user_head, "-m", "agent",
                   cwd=repo).stdout.strip()

    listing = git("ls-tree", "HEAD", cwd=repo).stdout
    readme = git("rev-parse", "HEAD:README.md", cwd=repo).stdout.strip()
    changed = commit(listing + f"100644 blob {readme}\tnew\n")
    assert pathnames.first_refused(objects, [changed]) is None
    d_tree = git("rev-parse", "HEAD:d", cwd=repo).stdout.strip()
    moved = commit(listing + f"040000 tree {d_tree}\t.gitmodules\n")
    assert pathnames.first_refused(objects, [changed, moved]) == (
        moved, b".gitmodules/link", pathnames.GITMODULES_LINK)
