"""What reaches the terminal: agent-derived strings pass one sanitizer on every output, and
``merge`` reviews every changed file, highlighting those that would run on this machine.

Runs are records written with the RunStore API and branches made with git, as a hostile
agent (or a teammate's pushed record) would leave them; the commands run for real, on a
pseudo-terminal where the terminal matters.
"""

from __future__ import annotations

import json
import unicodedata
from collections.abc import Sequence
from pathlib import Path

import pytest

from git_iterare import ui
from git_iterare.git.hostexec import classify, kinds, rules
from git_iterare.runs.store import RunStore
from tests.conftest import git, iterare
from tests.runs_helpers import head_of, make_run
from tests.terminal import in_terminal

T0 = "2026-01-01T10:00:00Z"
T1 = "2026-01-01T10:02:05Z"

#: The file name that erased merge's warning on a terminal (issue 8, item 5).
ERASER = "\x1b[2K\x1b[1A\x1b[2Khide/Makefile"
ERASER_SHOWN = "^[[2K^[[1A^[[2Khide/Makefile"
#: The result line that set the terminal's title and color through ``show``.
OSC_RESULT = '{"type":"result","result":"\\u001b]2;X\\u0007\\u001b[31m all good"}\n'
TERMINAL_BYTES = (b"\x1b", b"\x07", b"\x9b", "\u202e".encode())


def agent_run(repo: Path, files: dict[str, str], name: str = "agent",
              removed: Sequence[str] = ()) -> str:
    """A finished run of Claude whose branch adds ``files`` (name -> text) on top of main
    and deletes the files ``removed``."""
    store = RunStore(repo)
    rec = make_run(repo, name, created=T0, agent="claude")
    git("checkout", "-q", "-b", f"iterare/{rec.id}", "main", cwd=repo)
    for path, text in files.items():
        (repo / path).parent.mkdir(parents=True, exist_ok=True)
        (repo / path).write_text(text)
        git("add", "--", path, cwd=repo)
    if removed:
        git("rm", "-q", "--", *removed, cwd=repo)
    git("commit", "-qm", "agent work", cwd=repo)
    head = head_of(repo)
    git("checkout", "-q", "main", cwd=repo)
    store.transition(rec.id, "running", started=T0)
    store.set_head(rec.id, head)
    store.transition(rec.id, "succeeded", finished=T1, exit_code=0)
    return rec.id


HOSTILE_FILES = {
    ".claude/settings.json": '{"hooks": {}}\n',
    ".mcp.json": "{}\n",
    "lefthook.yml": "pre-commit: {}\n",
    "sub/.husky/pre-commit": "echo hi\n",
    ERASER: "all:\n",
    "src/plain.py": "print('hi')\n",
}


def test_merge_lists_every_file_and_the_warning_survives_on_a_terminal(repo: Path) -> None:
    rid = agent_run(repo, HOSTILE_FILES)
    code, out = in_terminal(["git", "iterare", "merge", "--color=never", rid], repo,
                            b"n\n", ready=b"Merge anyway?")
    text = out.decode().replace("\r\n", "\n")
    assert code == 1, text
    assert not any(b in out for b in TERMINAL_BYTES), out
    lines = text.splitlines()
    assert lines[0] == f"run {rid} changes 6 files:"
    assert lines[1:7] == [
        f"  ! A  {ERASER_SHOWN}  (make recipes)",
        "  ! A  .claude/settings.json  (Claude Code project settings: hooks run commands on "
        "this machine, commands and agents steer it)",
        "  ! A  .mcp.json  (MCP servers: commands Claude Code and other agents start on this "
        "machine)",
        "  ! A  lefthook.yml  (lefthook git hooks: commands run on commit/push)",
        "    A  src/plain.py",
        "  ! A  sub/.husky/pre-commit  (husky git hooks, run by git on commit/push)",
    ]
    assert lines[7].startswith("warning: 5 of them would run on this machine")
    assert "Merge anyway? [y/N]: n" in lines[8]
    assert "error: merge cancelled" in text
    assert not (repo / ".mcp.json").exists()

    colored = in_terminal(["git", "iterare", "merge", rid], repo, b"n\n",
                          ready=b"Merge anyway?")[1]
    assert b"\x1b[2K" not in colored and b"\x1b[1A" not in colored
    assert b"\x1b[31m\x1b[1m  ! A  .mcp.json\x1b[0m" in colored  # highlighted
    assert ERASER_SHOWN.encode() in colored and b"would run on this machine" in colored


def test_merge_without_a_terminal_needs_yes_and_plain_changes_need_nothing(repo: Path
                                                                           ) -> None:
    rid = agent_run(repo, {".mcp.json": "{}\n"})
    refused = iterare("merge", rid, cwd=repo)
    assert refused.returncode == 1
    assert "  ! A  .mcp.json  (MCP servers" in refused.stderr
    accepted = iterare("merge", "--yes", rid, cwd=repo)
    assert accepted.returncode == 0, accepted.stderr
    assert (repo / ".mcp.json").exists()
    plain = agent_run(repo, {"notes.txt": "x\n"}, name="plain")
    done = iterare("merge", plain, cwd=repo)
    assert done.returncode == 0, done.stderr
    assert done.stderr == f"run {plain} changes 1 file:\n    A  notes.txt\n"


def test_show_prints_no_terminal_sequences(repo: Path) -> None:
    store = RunStore(repo)
    rid = agent_run(repo, {ERASER: "x\n"})
    store.set_log(rid, OSC_RESULT.encode())
    store.update(rid, lambda r: r.replace(
        error="agent said \x1b]2;pwned\x07 \u202eexe.txt", cost_usd=0.12, turns=3,
        tokens={"input\x1b[2K": 5},
        egress={"blocked": ["\x1b]52;c;ZWNobw==\x07.evil.example", "a\u202eb.example"]}),
        "forged by the agent")
    code, out = in_terminal(["git", "iterare", "show", "--color=never", rid], repo, b"", b"")
    assert code == 0, out
    assert not any(b in out for b in TERMINAL_BYTES), out
    text = out.decode().replace("\r\n", "\n")
    assert "    last result (reported by the agent): ^[]2;X^G^[[31m all good\n" in text
    assert "cost:      $0.12 (reported by the agent)\n" in text
    assert "turns:     3 (reported by the agent)\n" in text
    assert "tokens:    input^[[2K 5 (reported by the agent)\n" in text
    assert "error:     agent said ^[]2;pwned^G <U+202E>exe.txt\n" in text
    assert "    ^[]52;c;ZWNobw==^G.evil.example  \"\\u001b]52;c;ZWNobw==\\u0007.evil.example\"," \
        in text
    colored = in_terminal(["git", "iterare", "show", "--color=always", rid], repo, b"",
                          b"")[1]
    assert b"\x07" not in colored and b"\x1b]" not in colored and b"\x1b[2K" not in colored


def test_list_sanitizes_the_table_and_keeps_json_exact(repo: Path) -> None:
    store = RunStore(repo)
    rid = agent_run(repo, {"a.txt": "a\n"})
    branch = "iterare/x\x1b]2;X\x07\u2066y"
    store.update(rid, lambda r: r.replace(branch=branch, agent="sh\x1b[1Aell", cost_usd=1.0),
                 "forged")
    code, out = in_terminal(["git", "iterare", "list", "--color=never"], repo, b"", b"")
    assert code == 0
    assert not any(b in out for b in (b"\x1b", b"\x07", "\u2066".encode())), out
    assert b"iterare/x^[]2;X^G<U+2066>y" in out and b"sh^[[1Aell" in out
    assert out.replace(b"\r\n", b"\n").endswith(b"\n* cost (reported by the agent)\n")
    porcelain = iterare("list", "--format", "porcelain", cwd=repo).stdout
    assert "\x1b" not in porcelain and "iterare/x^[]2;X^G<U+2066>y" in porcelain
    data = json.loads(iterare("list", "--format", "json", cwd=repo).stdout)
    assert data["runs"][0]["branch"] == branch  # JSON stays exact (and JSON-escaped)


def test_errors_and_diff_show_agent_names_visibly(repo: Path) -> None:
    name = "\x1b]2;X\x07clash\u202e.txt"
    (repo / name).write_text("base\n")
    git("add", "--", name, cwd=repo)
    git("commit", "-qm", "base", cwd=repo)
    rid = agent_run(repo, {name: "agent\n"})
    (repo / name).write_text("user\n")
    git("commit", "-qam", "user", cwd=repo)
    failed = iterare("merge", "--yes", rid, cwd=repo)
    assert failed.returncode == 1
    assert "\x1b" not in failed.stderr and "\x07" not in failed.stderr
    assert "conflicts in ^[]2;X^Gclash<U+202E>.txt; nothing was changed" in failed.stderr
    for args in (["diff", rid], ["diff", "--stat", rid], ["diff", "--name-status", rid]):
        shown = iterare(*args, cwd=repo)
        assert shown.returncode == 0, shown.stderr
        assert "\x1b" not in shown.stdout and "\x07" not in shown.stdout  # git quotes names
        assert "\u202e" not in shown.stdout
        assert "clash" in shown.stdout


def test_sanitize_makes_every_invisible_or_control_character_visible() -> None:
    for code in range(0x110000):
        char = chr(code)
        if unicodedata.category(char) in ("Cc", "Cf", "Zl", "Zp", "Cs") and char not in "\t\n":
            assert ui.sanitize(char) != char, hex(code)
    assert ui.sanitize("tab\tnewline\né ✓ 名前") == "tab\tnewline\né ✓ 名前"
    assert ui.sanitize_line("a\tb\nc\rd") == "a^Ib^Jc^Md"
    assert ui.sanitize("\x1b\x07\x7f\x9b\u202e\u2066\u200b\udcff") == \
        "^[^G^?\\x9b<U+202E><U+2066><U+200B>\\xff"


def test_warn_and_error_are_one_visible_line(capsys: pytest.CaptureFixture[str]) -> None:
    ui.warn("file \x1b[2K\nhint: fake")
    ui.error("bad \x07 \u202e")
    err = capsys.readouterr().err
    assert err == "warning: file ^[[2K^Jhint: fake\nerror: bad ^G <U+202E>\n"


@pytest.mark.parametrize(("path", "reason_part"), [
    (".claude/settings.json", "Claude Code project settings"),
    (".claude/commands/x.md", "Claude Code project settings"),
    (".mcp.json", "MCP servers"),
    ("lefthook.yml", "lefthook"),
    ("sub/.husky/pre-commit", "husky"),
    ("pkg/.envrc", "direnv"),
    ("AGENTS.md", "instructions Codex"),
    ("CLAUDE.md", "instructions Claude Code"),
    (".cursor/mcp.json", "Cursor"),
    (".vscode/settings.json", "VS Code settings"),
    ("web/vite.config.ts", "TypeScript configuration"),
    ("crate/build.rs", "cargo build script"),
    (".Claude/Settings.json", "Claude Code"),  # case-insensitive file systems
    ("gradle/wrapper/gradle-wrapper.jar", "gradle wrapper"),
    (".iterare/anything", "git iterare project files"),
    (ERASER, "make recipes"),
])
def test_host_executable_kinds(path: str, reason_part: str) -> None:
    reason = classify(path, "100644")
    assert reason is not None and reason_part in reason, (path, reason)


@pytest.mark.parametrize("path", ["src/main.py", "docs/.github/workflows/x.yml",
                                  "notes/claude.txt", "README.md"])
def test_ordinary_files_are_not_flagged(path: str) -> None:
    assert classify(path, "100644") is None


def test_the_list_is_data_and_each_kind_is_documented() -> None:
    assert set(kinds()) == {"iterare", "git-hooks", "agent-tools", "env-loaders", "editors",
                            "repl-rc", "language-servers", "tool-configs", "build",
                            "task-runners", "dependencies", "ci", "shell-rc"}
    assert all(rule.reason and rule.kind in kinds() for rule in rules())
    page = (Path(__file__).parent.parent / "man" / "git-iterare-merge.1").read_text()
    for title in kinds().values():
        assert title.split(" (")[0] in page.replace("\\-", "-"), title


def test_a_long_path_is_cut_in_the_middle_keeping_its_file_name() -> None:
    from git_iterare.ui import elide_path

    long = "d" * 300 + "/report.txt"
    cut = elide_path(long)
    assert len(cut) == 120 and cut.startswith("ddd") and cut.endswith("/report.txt")
    assert "..." in cut
    assert elide_path("src/short.py") == "src/short.py"


def test_diff_makes_what_the_agent_wrote_visible_and_keeps_gits_own_output(repo: Path) -> None:
    """A file the run wrote holds an OSC 52 sequence (it writes the clipboard): ``diff``
    shows it as text, as ``show -p`` does, while the diff is otherwise git's."""
    from tests.runs_helpers import commit_on_branch, make_run

    head = commit_on_branch(repo, "iterare/osc-0123abcd", "evil.txt",
                            "plain\n\x1b]52;c;ZWNobyBwd25lZAo=\x07\n")
    record = make_run(repo, "osc", status="succeeded", head=head)
    shown = iterare("diff", record.id, cwd=repo)
    assert shown.returncode == 0, shown.stderr
    assert "\x1b" not in shown.stdout and "\x07" not in shown.stdout, shown.stdout
    assert "+^[]52;c;ZWNobyBwd25lZAo=^G\n" in shown.stdout, shown.stdout
    assert "+++ b/evil.txt\n" in shown.stdout and "+plain\n" in shown.stdout
    forced = iterare("diff", record.id, "--color=always", cwd=repo)
    assert "\x1b[32mplain\x1b[m" in forced.stdout, forced.stdout  # git's colors kept
    assert "\x1b[32m^[]52;c;ZWNobyBwd25lZAo=^G\x1b[m" in forced.stdout, forced.stdout
