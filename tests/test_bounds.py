"""Bounded reads of what the agent wrote (issue 8, item 6): each exhaustion case runs in a
child process whose peak memory is asserted, against real git in temp repositories.

The agent's side is produced directly in the run's gitdir and worktree on the host (the
container's view, as in test_workspace.py); test_bounds_e2e.py does it through the sandbox.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from git_iterare import limits as lim
from git_iterare.loglimit import CappedLog, split_lines
from git_iterare.sandbox.egress import read_egress_report
from tests.conftest import git, iterare

#: Peak resident memory allowed to a host process handling an exhaustion case.
PEAK_BYTES = 300 * 1024 * 1024

ROOT = Path(__file__).resolve().parents[1]

#: Prepares a run, lets ``setup`` (Python source, with ``ws`` and ``os``) play the agent,
#: finishes the run and cleans it up, then prints a JSON report with the peak memory.
CHILD = """
import json, os, resource, sys, zlib
from pathlib import Path
from git_iterare.runner import importer
from git_iterare.runner import teardown, workspace
from git_iterare.git import repo as repo_mod
from git_iterare.errors import IterareError
r = repo_mod.discover(sys.argv[1])
ws = workspace.prepare_run(r, "demo-0123abcd", "HEAD", alternates=str(r.common_dir / "objects"))
(ws.worktree / "work.txt").write_text("work\\n")
exec(sys.argv[2])
res = importer.finish_run(r, ws, {"Iterare-Run": ws.run_id}, "leftovers")
out = {"rejected": res.rejected_head, "head": res.head,
       "skipped": [[s.path, s.reason] for s in res.skipped]}
try:
    teardown.cleanup_run(r, ws, force=True)
    out["cleaned"] = not ws.worktree.exists() and not ws.gitdir.exists()
except IterareError as exc:
    out["cleaned"] = exc.message
# VmHWM, not RUSAGE_SELF: Linux carries a process's maxrss across exec, so the latter would
# report the memory of the test process this one was forked from.
hwm = next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM:"))
out["peak"] = max(hwm, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss) * 1024
print(json.dumps(out))
"""


def agent_case(repo: Path, setup: str) -> dict:
    """Run :data:`CHILD` with ``setup``; the report, with the peak memory checked."""
    result = subprocess.run([sys.executable, "-c", CHILD, str(repo), setup], cwd=ROOT,
                            capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    report: dict = json.loads(result.stdout.splitlines()[-1])
    assert report["peak"] < PEAK_BYTES, report
    assert report["cleaned"] is True
    return report


def files(repo: Path, rev: str) -> list[str]:
    return git("ls-tree", "-r", "--name-only", rev, cwd=repo).stdout.split()


@pytest.fixture
def run_repo(repo: Path) -> Iterator[Path]:
    (repo / "tracked.txt").write_text("tracked\n")
    git("add", "tracked.txt", cwd=repo)
    git("commit", "-qm", "tracked", cwd=repo)
    yield repo
    # A deep tree left behind by a failure would break pytest's own (recursive) clean-up
    # of old temp dirs, in every later session on this machine.
    subprocess.run(["rm", "-rf", "--", str(repo)], check=False)


def test_sparse_1g_ref_file_is_refused_and_the_worktree_committed(run_repo: Path) -> None:
    report = agent_case(run_repo, "os.truncate(ws.gitdir / ws.ref, 1 << 30)")
    assert report["rejected"].endswith(
        "is 1073741824 bytes, more than the limit of 4096 (MAX_REF_FILE_BYTES)")
    assert "work.txt" in files(run_repo, report["head"])


def test_sparse_1g_packed_refs_is_refused(run_repo: Path) -> None:
    report = agent_case(run_repo, "os.unlink(ws.gitdir / ws.ref)\n"
                                  "open(ws.gitdir / 'packed-refs', 'wb').truncate(1 << 30)")
    assert "(MAX_PACKED_REFS_BYTES)" in report["rejected"]
    assert "work.txt" in files(run_repo, report["head"])


def test_ref_file_that_is_a_fifo_is_not_read(run_repo: Path) -> None:
    report = agent_case(run_repo, "os.unlink(ws.gitdir / ws.ref)\nos.mkfifo(ws.gitdir / ws.ref)")
    assert report["rejected"].endswith("is not a regular file; refusing to read it")


BOMB = """
sha = "ab" * 20
z = zlib.compressobj(9)
data = z.compress(b"blob %d\\0" % DECLARED)
for _ in range(1100):
    data += z.compress(bytes(1 << 20))
data += z.flush()
assert len(data) < 1200 * 1024
(ws.gitdir / "objects" / sha[:2]).mkdir()
(ws.gitdir / "objects" / sha[:2] / sha[2:]).write_bytes(data)
(ws.gitdir / ws.ref).write_text(sha + "\\n")
"""


def test_zlib_bomb_claiming_its_size_is_refused_before_inflating(run_repo: Path) -> None:
    report = agent_case(run_repo, BOMB.replace("DECLARED", str(1100 << 20)))
    assert report["rejected"] == (f"object {'ab' * 20} in the run gitdir is 1153433600 bytes, "
                                  "more than the limit of 104857600 (MAX_OBJECT_BYTES)")
    assert "work.txt" in files(run_repo, report["head"])


def test_zlib_bomb_lying_about_its_size_stops_inflating_at_it(run_repo: Path) -> None:
    report = agent_case(run_repo, BOMB.replace("DECLARED", "10"))
    assert report["rejected"] == (f"object {'ab' * 20} in the run gitdir does not match its "
                                  "declared size; refusing to import")


def test_1500_deep_directories_are_committed_and_cleaned_up(run_repo: Path) -> None:
    report = agent_case(run_repo, """
import subprocess
deep = ws.worktree / "/".join(["d"] * 1500)
subprocess.run(["mkdir", "-p", str(deep)], check=True)
(deep / "deep.txt").write_text("deep\\n")
""")
    assert report["rejected"] is None
    assert "/".join(["d"] * 1500) + "/deep.txt" in files(run_repo, report["head"])


def test_directories_beyond_the_depth_limit_are_skipped(run_repo: Path) -> None:
    report = agent_case(run_repo, f"""
import subprocess
deep = ws.worktree / "/".join(["d"] * {lim.MAX_TREE_DEPTH + 5})
subprocess.run(["mkdir", "-p", str(deep)], check=True)
(deep / "deep.txt").write_text("deep\\n")
""")
    assert report["skipped"] == [["/".join(["d"] * (lim.MAX_TREE_DEPTH + 1)),
                                  "deeper than MAX_TREE_DEPTH (1700)"]]
    assert "work.txt" in files(run_repo, report["head"])
    assert not any(f.startswith("d/") for f in files(run_repo, report["head"]))


def test_fifo_socket_and_oversized_file_are_skipped_and_the_rest_committed(run_repo: Path
                                                                          ) -> None:
    report = agent_case(run_repo, """
import socket
os.unlink(ws.worktree / "tracked.txt")
os.mkfifo(ws.worktree / "tracked.txt")
os.mkfifo(ws.worktree / "new.fifo")
socket.socket(socket.AF_UNIX).bind(str(ws.worktree / "sock"))
with open(ws.worktree / "huge.bin", "wb") as f:
    f.truncate(1 << 30)
""")
    assert sorted(report["skipped"]) == [
        ["huge.bin", "larger than MAX_OBJECT_BYTES (104857600 bytes)"],
        ["new.fifo", "a FIFO"], ["sock", "a socket"], ["tracked.txt", "a FIFO"]]
    # The tracked file the FIFO replaced is left out of the commit: kept as it was.
    assert files(run_repo, report["head"]) == ["README.md", "tracked.txt", "work.txt"]
    assert git("diff", "--name-only", "HEAD", report["head"], cwd=run_repo
               ).stdout.split() == ["work.txt"]


def test_a_line_break_in_a_skipped_name_leaves_nothing_else_out(run_repo: Path) -> None:
    """An exclude line cannot name a path holding CR or LF; what stands for the line
    break must not leave out the agent's other files (``lib_x``, ``big_file``)."""
    report = agent_case(run_repo, f"""
import subprocess
subprocess.run(["git", "init", "-q", str(ws.worktree / "lib\\nx")], check=True)
(ws.worktree / "lib\\nx" / "in.txt").write_text("nested\\n")
(ws.worktree / "lib_x").mkdir()
(ws.worktree / "lib_x" / "new.txt").write_text("work\\n")
with open(ws.worktree / "big\\rfile", "wb") as f:
    f.truncate({lim.MAX_OBJECT_BYTES} + 1)
(ws.worktree / "big_file").write_text("work\\n")
""")
    assert [path for path, _ in report["skipped"]] == ["big\rfile", "lib\nx"]
    committed = git("ls-tree", "-r", "-z", "--name-only", report["head"], cwd=run_repo
                    ).stdout.split("\0")
    assert {"lib_x/new.txt", "big_file", "work.txt"} <= set(committed)
    assert not any(name.startswith(("lib\n", "big\r")) for name in committed)


def test_a_large_file_the_base_tracks_is_not_named_when_left_alone(run_repo: Path) -> None:
    """The base tracks a file over MAX_OBJECT_BYTES: a run that leaves it alone names
    nothing as not committed (so cleanup has nothing to keep)."""
    with open(run_repo / "huge.bin", "wb") as f:
        f.truncate(lim.MAX_OBJECT_BYTES + 1)
    git("add", "huge.bin", cwd=run_repo)
    git("commit", "-qm", "huge", cwd=run_repo)
    report = agent_case(run_repo, "")
    assert report["skipped"] == []
    assert git("diff", "--name-only", "HEAD", report["head"], cwd=run_repo
               ).stdout.split() == ["work.txt"]


def test_tracked_files_over_the_limits_keep_their_base_version(run_repo: Path) -> None:
    """A tracked file grown over MAX_OBJECT_BYTES, one below a path over MAX_PATH_BYTES
    and one below a directory over MAX_TREE_DEPTH are not committed: the run's branch
    keeps them as the base has them (a merge must not delete them)."""
    long_dir = "/".join(["p" * 200] * (lim.MAX_PATH_BYTES // 201 + 1))
    deep_dir = "/".join(["d"] * (lim.MAX_TREE_DEPTH + 1))
    for rel in (f"{long_dir}/long.txt", f"{deep_dir}/deep.txt"):
        subprocess.run(["mkdir", "-p", rel.rsplit("/", 1)[0]], cwd=run_repo, check=True)
        subprocess.run(["sh", "-c", f'echo base > "{rel}"'], cwd=run_repo, check=True)
        git("add", rel, cwd=run_repo)
    git("commit", "-qm", "long and deep", cwd=run_repo)
    report = agent_case(run_repo, f"""
import subprocess
with open(ws.worktree / "tracked.txt", "wb") as f:
    f.truncate({lim.MAX_OBJECT_BYTES} + 1)
for rel in ("{long_dir}/long.txt", "{deep_dir}/deep.txt"):
    subprocess.run(["sh", "-c", f'echo changed > "{{rel}}"'], cwd=ws.worktree, check=True)
""")
    assert "tracked.txt" in [path for path, _ in report["skipped"]]
    assert len(report["skipped"]) == 3, report["skipped"]
    assert git("diff", "--name-only", "HEAD", report["head"], cwd=run_repo
               ).stdout.split() == ["work.txt"]


def test_packed_objects_of_the_agent_are_imported(run_repo: Path) -> None:
    report = agent_case(run_repo, """
import subprocess
env = dict(os.environ, GIT_DIR=str(ws.gitdir), GIT_WORK_TREE=str(ws.worktree))
for i in range(3):
    (ws.worktree / f"c{i}.txt").write_text(f"{i}\\n" * 1000)
    subprocess.run(["git", "add", "-A"], cwd=ws.worktree, env=env, check=True)
    subprocess.run(["git", "commit", "-qm", f"c{i}"], cwd=ws.worktree, env=env, check=True)
subprocess.run(["git", "repack", "-adlq"], cwd=ws.worktree, env=env, check=True)
assert not list((ws.gitdir / "objects").glob("??/*"))
""")
    assert report["rejected"] is None
    assert git("log", "--format=%s", report["head"], cwd=run_repo).stdout.split() == [
        "c2", "c1", "c0", "tracked", "initial"]


def test_20000_dns_names_give_a_bounded_report(tmp_path: Path) -> None:
    lines = []
    for i in range(20000):
        name = f"n{i}.{'x' * 40}.blocked.test"
        lines.append(f"Nov 29 17:02:25 dnsmasq[22]: {i} 127.0.0.1/4 query[A] {name} from x\n"
                     f"Nov 29 17:02:25 dnsmasq[22]: {i} 127.0.0.1/4 config {name} is NXDOMAIN\n")
    lines.append("Nov 29 17:02:25 dnsmasq[22]: 1 127.0.0.1/4 query[A] "
                 f"{'y' * 100000}.test from x\n")
    (tmp_path / "dns.log").write_text("".join(lines))
    report = read_egress_report(tmp_path)
    assert len(report.blocked) == lim.MAX_EGRESS_NAMES
    assert report.more_blocked == 20000 - lim.MAX_EGRESS_NAMES
    assert all(len(name) <= lim.MAX_DNS_NAME_CHARS for name in report.allowed)
    assert len(json.dumps([report.allowed, report.blocked])) < 20_000


def test_dns_log_that_is_a_fifo_is_not_read(tmp_path: Path) -> None:
    import os

    os.mkfifo(tmp_path / "dns.log")
    os.mkfifo(tmp_path / "refused.json")
    report = read_egress_report(tmp_path)  # would block forever if opened for reading
    assert (report.allowed, report.refused_connections.recorded) == ({}, False)


def test_split_lines_bounds_every_line() -> None:
    chunks = [b"a" * 700, b"b" * 700 + b"\nshort\n", b"tail"]
    assert list(split_lines(chunks, max_line=1000)) == [
        b"a" * 700 + b"b" * 300, b"b" * 400 + b"\n", b"short\n", b"tail"]


def test_capped_log_keeps_head_and_tail_with_a_marker() -> None:
    log = CappedLog(head=20, tail=20)
    for i in range(100):
        log.add(b"line %02d\n" % i)
    data = log.data().splitlines()
    assert data[:2] == [b"line 00", b"line 01"]
    assert data[-2:] == [b"line 98", b"line 99"]
    assert data[2].startswith(b"[git iterare: 768 bytes (96 lines) of output dropped here")


def test_man_page_lists_every_limit_with_its_value() -> None:
    text = (ROOT / "man" / "git-iterare-execute.1").read_text()
    section = text.split(".SH LIMITS", 1)[1].split("\n.SH ", 1)[0]
    for name, value in lim.ALL.items():
        assert f'{name} " {lim.human(value)}"' in section, name
    listed = set(re.findall(r"\b((?:MAX|LOG)_[A-Z_]+|IMPORT_BATCH_BYTES)\b", section))
    assert listed == set(lim.ALL)


def test_show_of_a_record_with_20000_blocked_names(repo: Path) -> None:
    from git_iterare.runs.store import RunStore

    store = RunStore(repo)
    rec = store.create("demo", prompt_name="demo", prompt_path=None, prompt_text="x",
                       base_commit=None, base_branch=None, agent="shell", status="failed")
    names = {f"n{i}.{'x' * 150}.test": 1 for i in range(20000)}
    store.update(rec.id, lambda r: r.replace(egress={"blocked": names}), "forged")
    result = subprocess.run(["/usr/bin/time", "-f", "%M", "git", "iterare", "show", rec.id],
                            cwd=repo, capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    assert int(result.stderr.split()[-1]) * 1024 < PEAK_BYTES
    assert f"and {20000 - lim.MAX_EGRESS_NAMES} more" in result.stdout
    assert result.stdout.count(".test  ") == lim.MAX_EGRESS_NAMES
    assert iterare("show", rec.id, cwd=repo).returncode == 0


def test_the_sandbox_gives_its_output_only_as_bounded_lines() -> None:
    """The agent's output comes as lines of at most MAX_LINE_BYTES, streamed
    (``output``); no call returns all of it at once (the product never needed one, and
    an agent can print without limit)."""
    from git_iterare import sandbox
    from git_iterare.sandbox.backend import Backend
    from git_iterare.sandbox.docker_backend import DockerBackend

    for api in (sandbox, Backend, DockerBackend):
        assert not hasattr(api, "logs"), api
        assert hasattr(api, "output"), api
