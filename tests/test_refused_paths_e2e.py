"""Paths git refuses to commit, written or committed by the agent (issue 25, item 2), through
the real sandbox with the shell agent: a ``.GIT`` directory, the other names git takes for
``.git`` (NTFS and HFS+ aliases) and a symlinked ``.gitmodules`` in the worktree; a commit
of the agent's whose trees hold ``..``, ``.git`` and ``.GIT``. None of them may cost the
rest of the agent's work (DESIGN.md, invariant 7): the paths are left out and named, the
commits dropped and named, and everything else reaches the run's branch. Also as an
unprivileged user, whose git and ownership checks differ from root's."""

from __future__ import annotations

import pwd
from pathlib import Path

import pytest

from tests.conftest import git, iterare
from tests.test_faithful_runs_e2e import ended_with_branch_locked
from tests.test_runs_e2e import (
    branch_files,
    project,  # noqa: F401  (the fixture)
    prompt,
    record,
    run_id,
)
from tests.test_trust_boundary_e2e import as_user, user, user_repo  # noqa: F401

pytestmark = pytest.mark.docker

#: The agent's shell script: a file git takes, and a directory under each name git refuses.
WRITES_REFUSED = r"""
echo work > work.txt
mkdir -p src && echo ok > src/ok.txt
mkdir -p .GIT/hooks src/.Git 'git~1' '.git. ' "$(printf '.g\342\200\214it')"
printf '#!/bin/sh\necho pwned\n' > .GIT/hooks/post-checkout
echo '[core] fsmonitor = x' > src/.Git/config
echo a > 'git~1/a'
echo b > '.git. /b'
echo c > "$(printf '.g\342\200\214it')/c"
ln -s work.txt .gitmodules
ln -s work.txt src/.GitModules
"""

REFUSED = [".GIT", ".git. ", ".g\u200cit", ".gitmodules", "git~1", "src/.Git",
           "src/.GitModules"]


def refused_paths_note(rid: str) -> str:
    return (f"warning: run {rid}: not committed: .GIT (a name git refuses to commit: "
            ".git in any case)")


def test_paths_git_refuses_are_left_out_and_the_rest_is_committed(project: Path  # noqa: F811
                                                                  ) -> None:
    prompt(project, "aliases", WRITES_REFUSED)
    done = iterare("execute", "aliases", "--follow", cwd=project)
    assert done.returncode == 0, done.stderr
    rid = run_id(done.stdout)
    assert done.stderr.splitlines()[-1] == f"run {rid} succeeded", done.stderr
    assert refused_paths_note(rid) in done.stderr
    files = branch_files(project, rid)
    assert "work.txt" in files and "src/ok.txt" in files
    assert [f for f in files if f.split("/")[0] in (".GIT", "git~1", ".git. ", ".gitmodules")
            or f.startswith(("src/.Git", ".g"))] == []
    rec = record(project, rid)
    assert rec["status"] == "succeeded" and "unfinished" not in rec["extra"]
    assert sorted(p["path"] for p in rec["extra"]["skipped"]["paths"]) == sorted(REFUSED)
    shown = iterare("show", rid, cwd=project).stdout
    assert "    .GIT  (a name git refuses to commit: .git in any case)\n" in shown
    # The files stay in the worktree; cleanup keeps them unless forced.
    worktree = project / ".iterare" / "worktrees" / rid
    assert (worktree / ".GIT" / "hooks" / "post-checkout").is_file()
    refused = iterare("cleanup", "-y", rid, cwd=project)
    assert refused.returncode == 1 and ".GIT" in refused.stderr
    # `finish` has nothing left to do, and says so.
    again = iterare("finish", rid, cwd=project)
    assert again.returncode == 0, again.stderr


def test_finish_commits_such_a_run_whose_commit_failed(project: Path) -> None:  # noqa: F811
    """`git iterare finish` of a run whose automatic commit failed (another git process
    held its branch's lock) takes the same paths out."""
    rid, lock, rec = ended_with_branch_locked(project, "later", WRITES_REFUSED + "sleep 4\n")
    assert rec["extra"]["unfinished"]["outcome"] == "succeeded"
    lock.unlink()
    done = iterare("finish", rid, cwd=project)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"run {rid}: work committed on iterare/{rid}")
    assert refused_paths_note(rid) in done.stderr
    files = branch_files(project, rid)
    assert "work.txt" in files and not [f for f in files if f.startswith(".GIT")]


#: A commit whose tree holds ``..``, ``.git`` and ``.GIT`` (each with a hook), made with
#: plumbing (git's porcelain would refuse to), then work left uncommitted.
COMMITS_REFUSED = r"""
echo base-work > committed.txt && git add committed.txt && git commit -qm fine
blob=$(printf '#!/bin/sh\necho pwned\n' | git hash-object -w --stdin)
hook=$(printf '100755 blob %s\tpost-checkout\n' "$blob" | git mktree)
hooks=$(printf '040000 tree %s\thooks\n' "$hook" | git mktree)
top=$(git ls-tree HEAD; printf '040000 tree %s\t..\n040000 tree %s\t.git\n040000 tree %s\t.GIT\n' \
      "$hooks" "$hooks" "$hooks")
tree=$(echo "$top" | git mktree)
git update-ref HEAD "$(git commit-tree "$tree" -p HEAD -m evil)"
echo later > later.txt
"""


def test_a_commit_git_refuses_is_dropped_and_the_worktree_committed(project: Path  # noqa: F811
                                                                   ) -> None:
    base = git("rev-parse", "HEAD", cwd=project).stdout.strip()
    prompt(project, "rawtree", COMMITS_REFUSED)
    done = iterare("execute", "rawtree", "--follow", cwd=project)
    assert done.returncode == 0, done.stderr
    rid = run_id(done.stdout)
    assert done.stderr.splitlines()[-1] == f"run {rid} succeeded", done.stderr
    assert (f"warning: run {rid}: the agent's branch was not imported (its commit "
            ) in done.stderr
    assert "holds a path git refuses: '..' (a '.' or '..' entry)" in done.stderr
    # The worktree's files, committed on the base: the agent's good commit's file too.
    log = git("log", "--format=%P", f"iterare/{rid}", "-1", cwd=project).stdout.split()
    assert log == [base]
    files = branch_files(project, rid)
    assert "committed.txt" in files and "later.txt" in files
    assert not [f for f in files if f.split("/")[0] in ("..", ".git", ".GIT")]
    assert record(project, rid)["status"] == "succeeded"
    # The dropped commits stay in the run gitdir: cleanup keeps them unless forced.
    refused = iterare("cleanup", "-y", rid, cwd=project)
    assert refused.returncode == 1
    assert "commits that were not imported" in refused.stderr
    forced = iterare("cleanup", "-y", "--force", rid, cwd=project)
    assert forced.returncode == 0, forced.stderr


def test_as_an_unprivileged_user(user: pwd.struct_passwd, user_repo: Path  # noqa: F811
                                 ) -> None:
    repo = user_repo
    prompts = repo / ".iterare" / "prompts"
    as_user(user, "mkdir", "-p", str(prompts), cwd=repo)
    body = "---\nagent: shell\n---\n" + WRITES_REFUSED + COMMITS_REFUSED
    as_user(user, "sh", "-c", f"printf '%s' \"$0\" > {prompts}/both.md", body, cwd=repo)
    done = as_user(user, "git", "iterare", "execute", "both", "--follow", cwd=repo)
    assert done.returncode == 0, done.stderr
    rid = run_id(done.stdout)
    assert done.stderr.splitlines()[-1] == f"run {rid} succeeded", done.stderr
    assert refused_paths_note(rid) in done.stderr
    assert "holds a path git refuses: '..' (a '.' or '..' entry)" in done.stderr
    files = as_user(user, "git", "ls-tree", "-r", "--name-only", f"iterare/{rid}",
                    cwd=repo).stdout.split()
    assert {"work.txt", "src/ok.txt", "committed.txt", "later.txt"} <= set(files)
    assert not [f for f in files if f.split("/")[0] in ("..", ".git", ".GIT", "git~1")]
    status = as_user(user, "git", "status", "--porcelain", cwd=repo)
    assert status.returncode == 0, status.stderr
