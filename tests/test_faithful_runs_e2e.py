"""Runs faithful to the repository as the user has it (issue 9, items 4-7 and 10-12), through
real git and the real sandbox with the shell agent: linked worktrees, no committer
identity, a commit that fails at the end of a run, CRLF prompts, names Docker refuses, a
launch the engine refuses, exit codes and timeouts, a detached HEAD, runs fetched from a
teammate. Each test starts with the case that was found, then covers its kind."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from tests.conftest import git, iterare
from tests.test_runs_e2e import branch_files, project, prompt, record, run_id, wait_status

pytestmark = pytest.mark.docker

__all__ = ["project"]  # the fixture, shared with the main end-to-end tests


def head_of(repo: Path, rev: str) -> str:
    return git("rev-parse", rev, cwd=repo).stdout.strip()


def nothing_left(repo: Path) -> None:
    """No record, run branch, worktree, run gitdir or container of any run."""
    assert git("for-each-ref", "refs/iterare", "refs/heads/iterare", cwd=repo).stdout == ""
    for folder in (repo / ".iterare" / "worktrees", repo / ".git" / "iterare" / "gitdirs",
                   repo / ".git" / "iterare" / "state"):
        assert not folder.exists() or list(folder.iterdir()) == [], folder
    left = subprocess.run(["docker", "ps", "-aq", "--filter", f"label=dev.iterare.repo={repo}"],
                          capture_output=True, text=True, check=True).stdout
    assert left == ""


# -- 4. linked worktrees -------------------------------------------------------------------

def test_a_run_from_a_linked_worktree_starts_from_and_merges_into_its_branch(
        project: Path, tmp_path: Path) -> None:
    linked = tmp_path / "feature-wt"
    git("worktree", "add", "-q", "-b", "feature", str(linked), cwd=project)
    (linked / "f.txt").write_text("feature work\n")
    git("add", "f.txt", cwd=linked)
    git("commit", "-qm", "feature: f", cwd=linked)
    main_before, feature = head_of(project, "main"), head_of(linked, "HEAD")
    # Prompts by name are the linked worktree's own (its checkout of .iterare/).
    (linked / ".iterare" / "prompts").mkdir(parents=True, exist_ok=True)
    prompt(linked, "wt", "cat f.txt > seen.txt\n")
    # Its settings are its own too: approved there (the test network's, as in the fixture).
    assert iterare("trust", "--yes", cwd=linked).returncode == 0

    started = iterare("execute", "wt", "-f", cwd=linked)
    assert started.returncode == 0, started.stderr
    rid = run_id(started.stdout)
    rec = record(project, rid)
    assert (rec["base_commit"], rec["base_branch"]) == (feature, "feature")
    assert git("show", f"iterare/{rid}:seen.txt", cwd=project).stdout == "feature work\n"

    merged = iterare("merge", rid, cwd=linked)
    assert merged.returncode == 0, merged.stderr
    assert head_of(linked, "feature") == head_of(project, f"iterare/{rid}")  # fast-forward
    assert head_of(project, "main") == main_before
    assert (linked / "seen.txt").read_text() == "feature work\n"

    # The kind: HEAD-relative bases are the worktree's own, in it and in the main one.
    git("commit", "-q", "--allow-empty", "-m", "feature: two", cwd=linked)
    again = iterare("execute", "wt", "-f", "--branch", "HEAD~1", cwd=linked)
    assert again.returncode == 0, again.stderr
    assert record(project, run_id(again.stdout))["base_commit"] == head_of(linked, "HEAD~1")
    prompt(project, "wt", "cat f.txt > seen.txt\n")
    from_main = iterare("execute", "wt", "-f", cwd=project)
    rec = record(project, run_id(from_main.stdout))
    assert (rec["base_commit"], rec["base_branch"]) == (main_before, "main")


# -- 5. no committer identity; a commit that fails ---------------------------------------

def test_runs_commit_without_any_identity_of_the_user(project: Path, hermetic_env: Path
                                                      ) -> None:
    with (hermetic_env / ".gitconfig").open("a") as config:
        config.write("[user]\n\tuseConfigOnly = true\n")
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("GIT_AUTHOR_", "GIT_COMMITTER_")) and k != "EMAIL"}
    assert subprocess.run(["git", "var", "GIT_COMMITTER_IDENT"], cwd=project, env=env,
                          capture_output=True, check=False).returncode != 0
    prompt(project, "noid", "echo work > work.txt\n")
    started = subprocess.run(["git", "iterare", "execute", "noid", "-f"], cwd=project,
                             env=env, capture_output=True, text=True, check=False)
    assert started.returncode == 0, started.stderr
    rid = run_id(started.stdout)
    assert started.stderr.splitlines()[-1] == f"run {rid} succeeded"
    assert "work.txt" in branch_files(project, rid)
    who = git("log", "-1", "--format=%an <%ae>|%cn <%ce>", f"iterare/{rid}", cwd=project)
    assert who.stdout == ("git-iterare agent <agent@git-iterare.invalid>|"
                          "git-iterare agent <agent@git-iterare.invalid>\n")
    merged = subprocess.run(["git", "iterare", "merge", rid], cwd=project, env=env,
                            capture_output=True, text=True, check=False)
    assert merged.returncode == 0, merged.stderr
    assert (project / "work.txt").read_text() == "work\n"


def ended_with_branch_locked(project: Path, name: str, body: str
                             ) -> tuple[str, Path, dict]:
    """Run prompt ``name`` (``body``, which must last a few seconds) while another git
    process holds the lock of the run's branch, so its automatic commit fails.

    Returns:
        (run id, the lock file, the run's record once it ended).
    """
    prompt(project, name, body)
    started = iterare("execute", name, cwd=project)
    assert started.returncode == 0, started.stderr
    rid = run_id(started.stdout)
    lock = project / ".git" / "refs" / "heads" / "iterare" / f"{rid}.lock"
    lock.write_text("")
    return rid, lock, wait_status(project, rid, {"succeeded", "failed"})


def test_a_commit_that_fails_fails_the_run_and_finish_commits_it_later(project: Path) -> None:
    rid, lock, rec = ended_with_branch_locked(project, "locked",
                                              "echo kept > kept.txt\nsleep 4\n")
    assert (rec["status"], rec["exit_code"], rec["head"]) == ("failed", 0, None)
    assert "its work could not be committed" in rec["error"]
    assert rec["error"].endswith(f"it is kept in .iterare/worktrees/{rid}, and "
                                 f"`git iterare finish {rid}` commits it")
    assert rec["extra"]["unfinished"]["outcome"] == "succeeded"
    worktree = project / ".iterare" / "worktrees" / rid
    assert (worktree / "kept.txt").read_text() == "kept\n"

    merge = iterare("merge", "--yes", rid, cwd=project)
    assert (merge.returncode, merge.stderr) == (
        1, f"error: run {rid} has no result: its work could not be committed and is kept "
           f"in its worktree (commit it with `git iterare finish {rid}`)\n")
    cleanup = iterare("cleanup", "-y", rid, cwd=project)
    assert cleanup.returncode == 1
    assert f"`git iterare finish {rid}` first" in cleanup.stderr
    prompt(project, "next", "echo next > next.txt\n")
    reuse = iterare("execute", "next", "--reuse", rid, cwd=project)
    assert reuse.returncode == 2
    assert f"git iterare finish {rid}" in reuse.stderr
    assert (worktree / "kept.txt").read_text() == "kept\n"

    still = iterare("finish", rid, cwd=project)
    assert still.returncode == 1
    assert still.stderr.startswith(f"error: run {rid}: its work still cannot be committed")

    lock.unlink()
    done = iterare("finish", rid, cwd=project)
    assert (done.returncode, done.stdout) == (
        0, f"run {rid}: work committed on iterare/{rid} (1 file changed against its base); "
           "status failed\n")
    rec = record(project, rid)
    assert rec["head"] == head_of(project, f"iterare/{rid}")
    assert "unfinished" not in rec["extra"]
    assert rec["error"] == "its work was committed later by `git iterare finish`"
    assert git("show", f"iterare/{rid}:kept.txt", cwd=project).stdout == "kept\n"
    assert rid in git("log", "-1", "--notes=iterare", "--format=%N", f"iterare/{rid}",
                      cwd=project).stdout
    again = iterare("finish", rid, cwd=project)
    assert again.stdout == f"run {rid}: nothing left to commit; its result is {rec['head']}\n"
    assert iterare("merge", "--yes", rid, cwd=project).returncode == 0
    assert iterare("cleanup", "-y", rid, cwd=project).returncode == 0


# -- 6. CRLF prompts ------------------------------------------------------------------------

def test_a_prompt_with_crlf_line_endings_runs_as_written(project: Path) -> None:
    (project / ".iterare" / "prompts" / "crlf.md").write_bytes(
        b"\xef\xbb\xbf---\r\nagent: shell\r\n---\r\necho a > c.txt\r\necho b >> c.txt\r\n")
    started = iterare("execute", "crlf", "-f", cwd=project)
    assert started.returncode == 0, started.stderr
    rid = run_id(started.stdout)
    assert [f for f in branch_files(project, rid) if f.startswith("c.")] == ["c.txt"]
    assert git("show", f"iterare/{rid}:c.txt", cwd=project).stdout == "a\nb\n"
    assert git("show", f"refs/iterare/runs/{rid}:prompt.md", cwd=project).stdout == (
        "echo a > c.txt\necho b >> c.txt\n")


# -- 7. names; a launch the engine refuses ------------------------------------------------

def test_names_docker_refuses_are_refused_before_anything_exists(project: Path) -> None:
    prompt(project, "hello", "echo hi\n")
    refused = iterare("execute", "hello", "--name", "ünï", cwd=project)
    assert (refused.returncode, refused.stderr.splitlines()[0]) == (
        2, "error: invalid run name 'ünï': it contains 'ü' (a name becomes a container name "
           "and file names, which take only ASCII letters, digits, '-', '_' and '.')")
    prompt(project, "ünï", "echo hi\n")
    by_file = iterare("execute", "ünï", cwd=project)
    assert by_file.returncode == 2
    assert "prompt name 'ünï': it contains 'ü'" in by_file.stderr
    prompt(project, "ws", "echo hi\n", front="agent: shell\nworkspace: caf\u00e9\n")
    by_front = iterare("execute", "ws", cwd=project)
    assert by_front.returncode == 2
    assert "workspace 'café': it contains 'é'" in by_front.stderr
    for name in ("a+b", "x,y"):
        assert iterare("execute", "hello", "--name", name, cwd=project).returncode == 2
    nothing_left(project)


def test_a_launch_the_engine_refuses_leaves_nothing_behind(project: Path) -> None:
    prompt(project, "hello", "echo hi\n")
    network = f"itr-no-such-network-{os.getpid()}"
    result = subprocess.run(["git", "-c", f"iterare.docker.network={network}", "iterare",
                             "execute", "hello"], cwd=project, capture_output=True,
                            text=True, check=False)
    assert result.returncode == 1, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert network in result.stderr
    nothing_left(project)
    # The same prompt runs once the cause is gone.
    assert iterare("execute", "hello", "-f", cwd=project).returncode == 0


# -- 10. exit codes -----------------------------------------------------------------------

def test_a_fork_bomb_outliving_the_agent_does_not_make_a_timeout(project: Path) -> None:
    # The agent exits 0 at once, leaving a fork bomb (bounded by docker.pids) behind; the
    # run is finished long after its timeout, by a later command.
    prompt(project, "bomb", "bomb() { bomb | bomb & }\nbomb &\necho left > left.txt\nexit 0\n")
    began = time.monotonic()
    started = iterare("execute", "bomb", "--timeout", "3", cwd=project)
    assert started.returncode == 0, started.stderr
    rid = run_id(started.stdout)
    container = record(project, rid)["container"]
    subprocess.run(["docker", "wait", container], capture_output=True, check=True,
                   timeout=120)
    # Finish it well past the timeout: no state to poll for, only the clock.
    time.sleep(max(0.0, began + 4 - time.monotonic()))
    rec = wait_status(project, rid, {"succeeded", "failed", "timed-out"})
    assert (rec["status"], rec["exit_code"], rec["error"]) == ("succeeded", 0, None)
    assert "left.txt" in branch_files(project, rid)


def test_the_exit_code_is_the_agents_and_a_timeout_says_so(project: Path) -> None:
    prompt(project, "own124", "exit 124\n")
    own = iterare("execute", "own124", "-f", "--timeout", "60", cwd=project)
    rec = record(project, run_id(own.stdout))
    assert (rec["status"], rec["exit_code"], rec["error"]) == (
        "failed", 124, "the agent exited with status 124")

    prompt(project, "slow", "sleep 60\n")
    slow = iterare("execute", "slow", "-f", "--timeout", "2", cwd=project)
    assert slow.returncode == 1
    rec = record(project, run_id(slow.stdout))
    assert (rec["status"], rec["exit_code"], rec["error"]) == (
        "timed-out", 124, "killed after the 2 s timeout")

    prompt(project, "deaf", "trap '' TERM\nsleep 60\n")
    deaf = iterare("execute", "deaf", "-f", "--timeout", "2", cwd=project)
    rec = record(project, run_id(deaf.stdout))
    assert (rec["status"], rec["exit_code"], rec["error"]) == (
        "timed-out", 137,
        "killed after the 2 s timeout (it ignored SIGTERM; SIGKILL 10 s later)")


# -- 11. detached HEAD ----------------------------------------------------------------------

def test_merge_into_a_detached_head_asks_first(project: Path) -> None:
    prompt(project, "det", "echo d > d.txt\n")
    rid = run_id(iterare("execute", "det", "-f", cwd=project).stdout)
    git("checkout", "-q", "--detach", cwd=project)
    before = head_of(project, "HEAD")
    refused = iterare("merge", rid, cwd=project, input="")
    assert (refused.returncode, refused.stderr) == (
        1, f"warning: HEAD is detached at {before[:12]}: the merge moves it, and no branch "
           "will hold the result\n"
           f"error: HEAD is detached at {before[:12]}: the merge would move it and no branch "
           "would hold the result; not merging (switch to a branch first (git switch NAME), "
           "or rerun with --yes)\n")
    assert head_of(project, "HEAD") == before
    assert record(project, rid)["status"] == "succeeded"

    merged = iterare("merge", "--yes", rid, cwd=project)
    assert merged.returncode == 0, merged.stderr
    after = head_of(project, "HEAD")
    assert after == head_of(project, f"iterare/{rid}")
    assert merged.stderr.splitlines()[-1] == (
        f"warning: HEAD is detached, now at {after[:12]}; keep it on a branch with "
        "`git switch -c NAME`")
    assert head_of(project, "main") == before  # no branch moved


# -- 12. runs shared with a team ------------------------------------------------------------

def test_a_run_fetched_from_a_teammate_works_by_its_record(project: Path, tmp_path: Path
                                                           ) -> None:
    bare = tmp_path / "team.git"
    git("init", "-q", "--bare", str(bare), cwd=tmp_path)
    git("remote", "add", "origin", str(bare), cwd=project)
    git("push", "-q", "origin", "main", cwd=project)
    prompt(project, "shared", "echo shared > shared.txt\n")
    rid = run_id(iterare("execute", "shared", "-f", cwd=project).stdout)
    head = record(project, rid)["head"]
    assert iterare("push", cwd=project).returncode == 0

    mate = tmp_path / "mate"
    git("clone", "-q", str(bare), str(mate), cwd=tmp_path)
    fetched = iterare("fetch", cwd=mate)
    assert fetched.returncode == 0, fetched.stderr
    assert fetched.stdout.splitlines()[-1] == (
        "1 run fetched without a branch here (a run's branch stays where it ran); diff, "
        f"merge and --reuse work by run id; to get a branch: git branch iterare/{rid} {head}")
    assert rid in iterare("list", cwd=mate).stdout
    assert iterare("show", rid, cwd=mate).returncode == 0
    assert iterare("diff", rid, "--name-only", cwd=mate).stdout == "shared.txt\n"

    merged = iterare("merge", rid, "--yes", cwd=mate)
    assert merged.returncode == 0, merged.stderr
    assert head_of(mate, "HEAD") == head  # fast-forward to the recorded result
    assert (mate / "shared.txt").read_text() == "shared\n"

    (mate / ".iterare" / "prompts").mkdir(parents=True, exist_ok=True)
    prompt(mate, "more", "cat shared.txt > again.txt\n")
    # A clone's settings are the teammate's to approve, like any repository's.
    assert "not approved" in iterare("execute", "more", "--reuse", rid, cwd=mate).stderr
    assert iterare("trust", "--yes", cwd=mate).returncode == 0
    reused = iterare("execute", "more", "--reuse", rid, "-f", cwd=mate)
    try:
        assert reused.returncode == 0, reused.stderr
        again = run_id(reused.stdout)
        assert record(mate, again)["base_commit"] == head
        assert git("show", f"iterare/{again}:again.txt", cwd=mate).stdout == "shared\n"
    finally:
        iterare("cleanup", "-y", "--force", run_id(reused.stdout), cwd=mate)

    # Cleanup touches only what is here: a branch made as fetch said, not the record.
    git("branch", f"iterare/{rid}", head, cwd=mate)
    cleaned = iterare("cleanup", "-y", rid, cwd=mate)
    assert (cleaned.returncode, cleaned.stdout) == (
        0, f"cleaned what is here of {rid} (it ran elsewhere; its shared record is left as "
           "it is)\n")
    assert git("branch", "--list", f"iterare/{rid}", cwd=mate).stdout == ""
    assert record(mate, rid)["status"] == "merged"
    assert iterare("push", cwd=mate).returncode == 0
    # Where it ran, its worktree and branch are still there for its own cleanup.
    assert iterare("fetch", cwd=project).returncode == 0
    assert record(project, rid)["status"] == "merged"
    assert (project / ".iterare" / "worktrees" / rid).is_dir()
    assert iterare("cleanup", "-y", rid, cwd=project).returncode == 0
    assert not (project / ".iterare" / "worktrees" / rid).exists()
