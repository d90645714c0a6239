"""Terminal sessions that are detached, attached again and ended (issue 22, item 12), on a
pseudo-terminal against the real engine with the shell: ``git iterare attach`` finds the
session, and every way a session ends says how it ended and what to do next."""

from __future__ import annotations

import os
import pwd
import re
import shutil
from pathlib import Path

import pytest

from tests.conftest import git, iterare
from tests.terminal import in_terminal
from tests.test_runs_e2e import project, prompt, record, run_id  # noqa: F401  (fixture)
from tests.test_trust_boundary_e2e import user, user_repo  # noqa: F401  (fixtures)

pytestmark = pytest.mark.docker

DETACH = b"\x10\x11"  # Ctrl-P Ctrl-Q, docker's detach keys


def last_line(output: bytes) -> str:
    """The last line the terminal shows, without colors and title sequences."""
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07", "",
                  output.decode(errors="replace"))
    return text.replace("\r", "").rstrip("\n").splitlines()[-1]


def test_a_detached_session_is_attached_again_and_its_end_said(project: Path  # noqa: F811
                                                                ) -> None:
    code, output = in_terminal(
        ["git", "iterare", "interactive", "--worktree", "--shell", "--workspace", "tty"],
        project, b"echo one > one.txt\n" + DETACH, ready=b"/workspace$")
    assert code == 0, output.decode(errors="replace")
    runs = git("for-each-ref", "--format=%(refname:strip=3)", "refs/iterare/runs",
               cwd=project).stdout.split()
    assert len(runs) == 1
    rid = runs[0]
    assert last_line(output) == (f"detached; run {rid} goes on (`git iterare attach {rid}` "
                                 f"attaches it again, `git iterare stop {rid}` ends it)")
    assert record(project, rid)["status"] == "running"

    # Two live sessions: attach needs to be told which.
    code, output = in_terminal(
        ["git", "iterare", "interactive", "--worktree", "--shell", "--workspace", "other"],
        project, DETACH, ready=b"/workspace$")
    assert code == 0, output.decode(errors="replace")
    other = next(r for r in git("for-each-ref", "--format=%(refname:strip=3)",
                                "refs/iterare/runs", cwd=project).stdout.split()
                 if r.startswith("other-"))
    code, output = in_terminal(["git", "iterare", "attach"], project, b"", b"")
    assert (code, last_line(output)) == (
        2, f"error: 2 terminal sessions are running: {', '.join(sorted([rid, other]))} "
           "(name one: `git iterare attach RUN`)")
    assert iterare("stop", "--grace", "1", other, cwd=project).returncode == 0

    # Without RUN: the only terminal session that is live.
    code, output = in_terminal(["git", "iterare", "attach"], project,
                               b"echo two > two.txt; exit 3\n", ready=b"detaches)")
    text = output.decode(errors="replace")
    assert code == 3, text
    assert f"run {rid}: attaching (Ctrl-P Ctrl-Q detaches)" in text
    assert last_line(output) == (
        f"run {rid} failed: the agent exited with status 3; its work is on iterare/{rid} "
        f"(`git iterare diff {rid}`, then `git iterare merge {rid}`)")
    rec = record(project, rid)
    assert (rec["status"], rec["exit_code"]) == ("failed", 3)
    assert git("show", f"iterare/{rid}:one.txt", cwd=project).stdout == "one\n"
    assert git("show", f"iterare/{rid}:two.txt", cwd=project).stdout == "two\n"

    # It has ended: nothing to attach to, by name or by default.
    ended = in_terminal(["git", "iterare", "attach", rid], project, b"", b"")
    assert (ended[0], last_line(ended[1])) == (
        1, f"error: run {rid} has ended (failed) (see `git iterare show {rid}`)")
    none = in_terminal(["git", "iterare", "attach"], project, b"", b"")
    assert (none[0], last_line(none[1])) == (
        1, "error: no terminal session is running (start one with "
           "`git iterare interactive --worktree`)")


def test_a_session_that_exits_says_so(project: Path) -> None:  # noqa: F811
    code, output = in_terminal(
        ["git", "iterare", "interactive", "--worktree", "--shell", "--workspace", "calm"],
        project, b"exit 0\n", ready=b"/workspace$")
    assert code == 0, output.decode(errors="replace")
    rid = git("for-each-ref", "--format=%(refname:strip=3)", "refs/iterare/runs",
              cwd=project).stdout.split()[0]
    assert last_line(output) == f"run {rid} succeeded; it changed nothing"


def test_attach_refuses_what_is_no_terminal_session(project: Path) -> None:  # noqa: F811
    prompt(project, "busy", "sleep 600\n")
    started = iterare("execute", "busy", cwd=project)
    assert started.returncode == 0, started.stderr
    rid = run_id(started.stdout)
    code, output = in_terminal(["git", "iterare", "attach", rid], project, b"", b"")
    assert (code, last_line(output)) == (
        2, f"error: run {rid} is no terminal session (follow its log with "
           f"`git iterare log -f {rid}`)")
    # and attach needs a terminal, like interactive
    piped = iterare("attach", rid, cwd=project)
    assert (piped.returncode, piped.stderr) == (
        2, "error: attach needs a terminal (follow a run's log with `git iterare log -f`)\n")
    assert iterare("stop", rid, cwd=project).returncode == 0


def test_a_session_on_the_checkout_says_how_it_ended(user: pwd.struct_passwd,  # noqa: F811
                                                     user_repo: Path) -> None:  # noqa: F811
    """A session on the checkout (refused as root) has no run to attach to again: when
    detached it is ended, and says so; when it exits, where its changes are."""
    runuser = shutil.which("runuser", path="/usr/sbin:/sbin:/usr/bin:/bin") or "runuser"
    home = user.pw_dir
    bin_dir = user_repo.parent / "bin"
    argv = [runuser, "-u", user.pw_name, "--", "env", "-i", f"HOME={home}",
            f"USER={user.pw_name}", f"PATH={bin_dir}:/usr/local/bin:/usr/bin:/bin",
            "LANG=C.UTF-8", f"TERM={os.environ.get('TERM', 'xterm')}",
            "git", "iterare", "interactive", "--shell"]
    code, output = in_terminal(argv, user_repo, b"echo mine > mine.txt; exit 0\n",
                               ready=b"/workspace$")
    assert code == 0, output.decode(errors="replace")
    assert last_line(output) == ("session ended (exit status 0); its changes are in your "
                                 "checkout, not committed (`git status`)")
    assert (user_repo / "mine.txt").read_text() == "mine\n"
    code, output = in_terminal(argv, user_repo, DETACH, ready=b"/workspace$")
    assert code == 0, output.decode(errors="replace")
    assert last_line(output) == (
        "detached; a session on your checkout cannot be attached again, so it was ended "
        "(`git iterare interactive --worktree` makes one that goes on)")
