"""The commands behave as git, the docker CLI and gh do where users expect it: option
errors that say what is wanted, TOML errors in one readable line, ``show -p`` and
``show --format json`` (its shape pinned, as pipx pins its result contract), ``list``
through git's pager and with ``-n``, and ``forget`` for records of cleaned runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from git_iterare.runs.store import RunStore
from tests.conftest import git, iterare
from tests.runs_helpers import commit_on_branch, make_run
from tests.terminal import in_terminal

T0 = "2026-01-01T10:00:00Z"
T1 = "2026-01-01T10:02:05Z"


@pytest.mark.parametrize(("args", "message"), [
    (("execute", "p", "--timeout", "abc"),
     "Invalid value for '--timeout': 'abc' is not a whole number of seconds (0 or more; "
     "0: no limit) (see 'git iterare execute -h')"),
    (("execute", "p", "--timeout", "1.5"),
     "Invalid value for '--timeout': '1.5' is not a whole number of seconds (0 or more; "
     "0: no limit) (see 'git iterare execute -h')"),
    (("execute", "p", "--max-budget-usd", "nan"),
     "Invalid value for '--max-budget-usd': 'nan' is not a number of US dollars (0 or more; "
     "0: no limit) (see 'git iterare execute -h')"),
    (("log", "-v", "3"),
     "Invalid value for '-v' / '--verbosity': '3' is not 0, 1 or 2 (see 'git iterare log -h')"),
    (("stop", "--grace", "-1"),
     "Invalid value for '--grace': '-1' is not a number of seconds (0 or more) "
     "(see 'git iterare stop -h')"),
    (("list", "-n", "some"),
     "Invalid value for '--max-count' / '-n': 'some' is not a whole number of runs "
     "(0 or more) (see 'git iterare list -h')"),
])
def test_a_bad_number_says_what_is_wanted(repo: Path, args: tuple[str, ...],
                                          message: str) -> None:
    result = iterare(*args, cwd=repo)
    assert (result.returncode, result.stderr) == (2, f"error: {message}\n")


@pytest.mark.parametrize(("text", "where", "message"), [
    ("[run]\ntimeout = 1\n[run]\n", "3:5", "Cannot declare run twice"),
    ('[claude."a b"]\n[claude."a b"]\n', "2:14", 'Cannot declare claude."a b" twice'),
    ("a = {b = 1}\na.c = 2\n", "2:8", "Cannot mutate immutable namespace a"),
])
def test_a_toml_error_is_one_line_naming_the_key(repo: Path, text: str, where: str,
                                                 message: str) -> None:
    config = repo / ".iterare" / "config.toml"
    config.parent.mkdir()
    config.write_text(text)
    result = iterare("config", cwd=repo)
    assert (result.returncode, result.stderr) == (2, f"error: {config}:{where}: {message}\n")


def _finished_with_work(repo: Path) -> tuple[str, str]:
    """A succeeded run whose branch adds ``notes.txt`` (with an escape sequence in it) and
    a Makefile; returns (run id, head)."""
    store = RunStore(repo)
    rec = make_run(repo, "fix-bug", created=T0, prompt_text="Fix it.\n")
    git("checkout", "-q", "-b", f"iterare/{rec.id}", "main", cwd=repo)
    (repo / "notes.txt").write_text("plain\n\x1b]0;owned\x07\n")
    (repo / "Makefile").write_text("all:\n\ttrue\n")
    git("add", ".", cwd=repo)
    git("commit", "-qm", "work", cwd=repo)
    head = git("rev-parse", "HEAD", cwd=repo).stdout.strip()
    git("checkout", "-q", "main", cwd=repo)
    store.transition(rec.id, "running", started=T0)
    store.set_head(rec.id, head)
    store.set_log(rec.id, b"one\ntwo\n")
    store.transition(rec.id, "succeeded", finished=T1, exit_code=0)
    return rec.id, head


def test_show_json_shape_is_pinned(repo: Path) -> None:
    rid, head = _finished_with_work(repo)
    stored = json.loads(git("show", f"refs/iterare/runs/{rid}:run.json", cwd=repo).stdout)
    out = iterare("show", "--format", "json", rid, cwd=repo)
    assert out.returncode == 0, out.stderr
    assert out.stdout.isascii() and out.stdout.count("\n") == 1
    document = json.loads(out.stdout)
    assert list(document) == ["v", "run", "duration_s", "prompt", "log", "files", "patch"]
    assert document == {
        "v": 1, "run": stored, "duration_s": 125.0, "prompt": "Fix it.\n",
        "log": {"lines": 2, "last_result": "two"},  # the shell agent: its last line
        "files": [{"status": "A", "path": "Makefile", "runs_on_host": "make recipes"},
                  {"status": "A", "path": "notes.txt", "runs_on_host": None}],
        "patch": None}
    patched = json.loads(iterare("show", "--format=json", "-p", rid, cwd=repo).stdout)
    assert patched["patch"] == git("diff", "--no-color", f"{stored['base_commit']}..{head}",
                                   cwd=repo).stdout
    assert "\x1b]0;owned\x07" in patched["patch"]  # exact in JSON, escaped as \u001b


def test_show_p_adds_the_patch_sanitized(repo: Path) -> None:
    rid, _ = _finished_with_work(repo)
    plain = iterare("show", rid, cwd=repo).stdout
    patched = iterare("show", "-p", rid, cwd=repo)
    assert patched.returncode == 0, patched.stderr
    assert patched.stdout.startswith(plain + "\ndiff --git a/Makefile b/Makefile\n")
    assert "+^[]0;owned^G\n" in patched.stdout and "\x1b" not in patched.stdout
    colored = iterare("show", "-p", "--color=always", rid, cwd=repo).stdout
    assert "\x1b[32m+plain\x1b[0m\n" in colored and "\x1b[36m@@ -0,0 +1,2 @@\x1b[0m" in colored


def test_list_max_count(repo: Path) -> None:
    runs = [make_run(repo, f"r{i}", created=f"2026-01-0{i + 1}T00:00:00Z").id
            for i in range(3)]
    newest = iterare("list", "-n", "2", "--format", "porcelain", cwd=repo).stdout
    assert [line.split("\t")[0] for line in newest.splitlines()] == [runs[2], runs[1]]
    one = json.loads(iterare("list", "--max-count=1", "--format", "json", cwd=repo).stdout)
    assert [r["id"] for r in one["runs"]] == [runs[2]]
    assert len(iterare("list", "-n", "1", cwd=repo).stdout.splitlines()) == 2  # header, run


def _list_on_terminal(repo: Path, *git_args: str) -> str:
    """What ``git [git_args] iterare list`` shows on a terminal."""
    status, output = in_terminal(["git", *git_args, "iterare", "list"], repo, b"", b"\0",
                                 timeout=30)
    assert status == 0, output
    return output.decode().replace("\r\n", "\n")


def test_list_pages_on_a_terminal_as_git_does(repo: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    rid = make_run(repo, "paged").id
    monkeypatch.setenv("GIT_PAGER", "sed 's/^/paged: /'")
    shown = _list_on_terminal(repo)
    assert shown.startswith("paged: ID ") and f"paged: {rid} " in shown
    # Into a pipe no pager starts, as git starts none.
    assert iterare("list", cwd=repo).stdout.startswith("ID ")
    # pager.iterare-list=false (the key git reads for `git iterare-list`) turns it off,
    # and git --no-pager does too.
    assert _list_on_terminal(repo, "-c", "pager.iterare-list=false").startswith("ID ")
    assert _list_on_terminal(repo, "--no-pager").startswith("ID ")
    # Without GIT_PAGER: pager.iterare-list naming a program, then core.pager, then PAGER.
    monkeypatch.delenv("GIT_PAGER")
    monkeypatch.setenv("PAGER", "sed 's/^/from PAGER: /'")
    assert _list_on_terminal(repo).startswith("from PAGER: ID ")
    assert _list_on_terminal(repo, "-c", "core.pager=sed 's/^/core: /'").startswith("core: ID")
    assert _list_on_terminal(repo, "-c", "core.pager=sed 's/^/core: /'", "-c",
                             "pager.iterare-list=sed 's/^/own: /'").startswith("own: ID ")
    # The pager gets git's LESS default, and a pager of cat is none.
    monkeypatch.setenv("PAGER", 'echo "LESS=$LESS"; cat')
    assert _list_on_terminal(repo).startswith("LESS=FRX\nID ")
    monkeypatch.setenv("PAGER", "cat")
    assert _list_on_terminal(repo).startswith("ID ")
    # A pager that is not there: said once, and the list is printed, as git does.
    monkeypatch.setenv("PAGER", "no-such-pager")
    assert _list_on_terminal(repo).startswith(
        "\x1b[33mwarning:\x1b[0m cannot run the pager no-such-pager: not found\nID ")


def _cleaned(repo: Path, name: str, *, keep_work: bool) -> tuple[str, str]:
    """A cleaned-up run whose result commit is on main (``keep_work``) or held by its
    record only; returns (run id, head)."""
    store = RunStore(repo)
    rec = make_run(repo, name)
    head = commit_on_branch(repo, f"iterare/{rec.id}", f"{name}.txt", f"{name}\n")
    store.transition(rec.id, "running", started=T0)
    store.set_head(rec.id, head)
    store.transition(rec.id, "succeeded", finished=T1)
    if keep_work:
        git("merge", "-q", "--ff-only", f"iterare/{rec.id}", cwd=repo)
    git("branch", "-q", "-D", f"iterare/{rec.id}", cwd=repo)
    store.transition(rec.id, "cleaned")
    return rec.id, head


def test_forget_deletes_records_of_cleaned_runs(repo: Path) -> None:
    kept, kept_head = _cleaned(repo, "kept", keep_work=True)
    dropped, dropped_head = _cleaned(repo, "dropped", keep_work=False)
    active = make_run(repo, "active").id
    # Off a terminal it asks nobody and refuses, as cleanup does; a run it cannot forget
    # is refused before anything is asked.
    asked = iterare("forget", kept, cwd=repo)
    assert (asked.returncode, asked.stderr) == (
        1, "error: forget not confirmed (rerun with --yes)\n")
    refused = iterare("forget", active, cwd=repo)
    assert (refused.returncode, refused.stderr) == (
        1, f"error: run {active} is created, not cleaned up; its record is kept "
           f"(`git iterare cleanup {active}` first)\n")
    # Work that only its record holds is not left to git gc without --force.
    lost = iterare("forget", "-y", dropped, cwd=repo)
    assert (lost.returncode, lost.stderr) == (
        1, f"error: run {dropped}: its work ({dropped_head[:12]}) is on no branch; without "
           "its record `git gc` would delete it (keep it on a branch (`git branch NAME "
           f"{dropped_head[:12]}`), or `git iterare forget --force {dropped}`)\n")
    done = iterare("forget", "-y", kept, cwd=repo)
    assert (done.returncode, done.stdout, done.stderr) == (0, f"forgot {kept}\n", "")
    assert git("for-each-ref", "refs/iterare/runs/", "--format=%(refname:strip=3)",
               cwd=repo).stdout.split() == sorted([dropped, active])
    assert not (repo / ".git" / "logs" / "refs" / "iterare" / "runs" / kept).exists()
    assert kept not in iterare("list", "--all", cwd=repo).stdout
    assert git("cat-file", "-t", kept_head, cwd=repo).stdout == "commit\n"  # on main
    # --cleaned forgets the cleaned runs whose work is safe and names the others.
    swept = iterare("forget", "--cleaned", "-y", cwd=repo)
    assert (swept.returncode, swept.stdout) == (0, "nothing to forget\n")
    assert swept.stderr == (f"warning: run {dropped}: its work is on no branch; its record is "
                            f"kept (`git iterare forget --force {dropped}` forgets it)\n")
    forced = iterare("forget", "--force", "-y", dropped, cwd=repo)
    assert (forced.returncode, forced.stdout) == (0, f"forgot {dropped}\n")
    assert git("for-each-ref", "refs/iterare/runs/", "--format=%(refname:strip=3)",
               cwd=repo).stdout.split() == [active]


def test_forget_bad_usage(repo: Path) -> None:
    none = iterare("forget", cwd=repo)
    assert (none.returncode, none.stderr) == (
        2, "error: give the runs to forget, or --cleaned (see `git iterare list --all`)\n")
    both = iterare("forget", "--cleaned", "x", cwd=repo)
    assert (both.returncode, both.stderr) == (
        2, "error: give the runs to forget, or --cleaned, not both "
           "(see `git iterare list --all`)\n")
    unknown = iterare("forget", "-y", "zzz", cwd=repo)
    assert (unknown.returncode, unknown.stderr) == (
        1, "error: no run matches 'zzz' (see `git iterare list --all`)\n")

