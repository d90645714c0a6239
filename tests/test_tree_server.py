"""The tree server (git_iterare/sandbox/tree_server.py) as its own process on loopback, with
a folder of the test's as its root: trees out, results in, and hostile uploads refused with
nothing changed (no Docker: the swarm task's side is tested in test_swarm_start_e2e.py)."""

from __future__ import annotations

import http.client
import io
import json
import os
import shutil
import socket
import stat
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from git_iterare.sandbox import tree_server as ts

SERVER = Path(ts.__file__)
LIMIT = 256 * 1024
#: The server runs as it does in git-iterare's image: Debian's python3 when this machine
#: has it, not as root (an agent's uid, which no account has, when the tests run as root).
PYTHON = "/usr/bin/python3" if Path("/usr/bin/python3").exists() else sys.executable
UID = 1900000 if os.geteuid() == 0 else os.geteuid()
GID = 1900000 if os.geteuid() == 0 else os.getegid()


@dataclass
class Server:
    root: Path
    outside: Path
    port: int
    log: list[str]

    def request(self, method: str, path: str, body: bytes | None = None,
                chunked: bool = False, headers: dict[str, str] | None = None
                ) -> tuple[int, bytes]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            if chunked and body is not None:
                pieces = (body[i:i + 7000] for i in range(0, len(body), 7000))
                conn.request(method, path, body=pieces, encode_chunked=True,
                             headers={"Transfer-Encoding": "chunked", **(headers or {})})
            else:
                conn.request(method, path, body=body, headers=headers or {})
            response = conn.getresponse()
            return response.status, response.read()
        finally:
            conn.close()

    def logged(self, *parts: str) -> list[dict[str, object]]:
        """The log's JSON lines, once one holds all of ``parts`` (it is written after the
        answer) or after 5 s."""
        deadline = time.monotonic() + 5
        while not any(all(p in line for p in parts) for line in self.log):
            if time.monotonic() > deadline:
                break
            time.sleep(0.02)
        return [json.loads(line) for line in self.log if line.startswith("{")]


def _trees(root: Path) -> None:
    work, run, cache = root / "workspace", root / "git/run", root / "git/cache"
    for folder in (work / "src", run / "refs/heads", cache / "objects/ab"):
        folder.mkdir(parents=True)
    (work / "README").write_text("base\n")
    (work / "src/run.sh").write_text("#!/bin/sh\n")
    (work / "src/run.sh").chmod(0o755)
    (work / "link").symlink_to("/etc/passwd")
    (work / ".git").write_text("gitdir: /git/run\n")
    os.mkfifo(work / "fifo")
    (run / "HEAD").write_text("ref: refs/heads/iterare/x\n")
    (cache / "objects/ab/cdef").write_bytes(b"\x00object")
    (cache / "objects/ab/cdef").chmod(0o444)


@pytest.fixture
def server() -> Iterator[Server]:
    # Not under pytest's tmp_path, which only root may enter when the tests run as root.
    base = Path(tempfile.mkdtemp(prefix="itr-trees-"))
    root, outside = base / "root", base / "outside"
    _trees(root)
    outside.mkdir()
    for path in (base, *base.rglob("*")):
        os.lchown(path, UID, GID)
    env = dict(os.environ, ITERARE_TREES_ROOT=str(root), ITERARE_MAX_RESULT_BYTES=str(LIMIT))
    root_runs = os.geteuid() == 0
    proc = subprocess.Popen([PYTHON, str(SERVER), "0", "127.0.0.1"], env=env,
                            stderr=subprocess.PIPE, text=True,
                            user=UID if root_runs else None, group=GID if root_runs else None,
                            extra_groups=[] if root_runs else None)
    errors = proc.stderr
    assert errors is not None
    first = errors.readline()
    assert first.startswith("iterare-trees: listening on "), first
    log: list[str] = []
    reader = threading.Thread(target=lambda: log.extend(iter(errors.readline, "")),
                              daemon=True)
    reader.start()
    try:
        yield Server(root, outside, int(first.rsplit(" ", 1)[1]), log)
    finally:
        proc.terminate()
        proc.wait(10)
        shutil.rmtree(base)


def _tar(*members: tuple[tarfile.TarInfo, bytes]) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for info, data in members:
            info.size = len(data) if info.isreg() else 0
            tar.addfile(info, io.BytesIO(data) if info.isreg() else None)
    return out.getvalue()


def _member(name: str, data: bytes = b"", kind: bytes = tarfile.REGTYPE, mode: int = 0o644,
            link: str = "") -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.type, info.mode, info.linkname, info.mtime = kind, mode, link, 1_700_000_000
    return info, data


def _state(root: Path) -> dict[str, tuple[int, bytes]]:
    """Every path under ``root`` -> (mode, content or link target)."""
    out = {}
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            path = Path(folder, name)
            st = path.lstat()
            data = (os.readlink(path).encode() if path.is_symlink() else
                    path.read_bytes() if stat.S_ISREG(st.st_mode) else b"")
            out[str(path.relative_to(root))] = (st.st_mode, data)
    return out


def test_ready_and_trees_out(server: Server) -> None:
    assert server.request("GET", "/ready") == (200, b"ready\n")
    status, body = server.request("GET", "/trees")
    assert status == 200
    with tarfile.open(fileobj=io.BytesIO(body), mode="r:") as tar:
        members = {m.name: m for m in tar.getmembers()}
        readme = tar.extractfile("workspace/README")
        assert readme is not None and readme.read() == b"base\n"
    assert "workspace" not in members and "git" not in members  # the agent's mount points
    assert {"workspace/src/run.sh", "git/run", "git/run/HEAD",
            "git/cache/objects/ab/cdef"} <= set(members)
    assert "workspace/fifo" not in members
    assert members["git/run"].isdir() and members["workspace/src"].isdir()
    assert members["workspace/src/run.sh"].isreg()
    assert members["workspace/link"].issym()
    assert members["workspace/link"].linkname == "/etc/passwd"
    assert members["git/run"].isdir() and members["workspace/src"].isdir()
    assert members["git/run/HEAD"].isreg()
    assert stat.S_IMODE(members["workspace/src/run.sh"].mode) == 0o755
    assert stat.S_IMODE(members["git/cache/objects/ab/cdef"].mode) == 0o444
    assert {(m.uid, m.gid) for m in members.values()} == {(UID, GID)}
    assert {"trees": "GET /trees", "status": 200, "members": 13} in server.logged("/trees")


def test_an_upload_replaces_both_trees(server: Server) -> None:
    cache = _state(server.root / "git/cache")
    upload = _tar(_member("workspace", kind=tarfile.DIRTYPE, mode=0o755),
                  _member("workspace/new.txt", b"new\n"),
                  _member("workspace/bin", kind=tarfile.DIRTYPE, mode=0o555),
                  _member("workspace/bin/tool", b"#!/bin/sh\n", mode=0o755),
                  _member("workspace/bin/locked", kind=tarfile.DIRTYPE, mode=0o000),
                  _member("workspace/bin/locked/in", b"x"),
                  _member("workspace/bin/same", kind=tarfile.LNKTYPE, link="workspace/bin/tool"),
                  _member("workspace/up", kind=tarfile.SYMTYPE, link="../outside"),
                  _member("git/run/HEAD", b"ref: refs/heads/iterare/y\n"))
    for chunked in (False, True):
        status, body = server.request("PUT", "/result", upload, chunked=chunked)
        assert status == 200, body
        assert json.loads(body) == {"bytes": len(upload), "files": 5}
    work = server.root / "workspace"
    assert sorted(p.name for p in work.iterdir()) == ["bin", "new.txt", "up"]
    assert (work / "bin/same").stat().st_ino == (work / "bin/tool").stat().st_ino
    assert stat.S_IMODE((work / "bin").stat().st_mode) == 0o555
    assert stat.S_IMODE((work / "bin/tool").stat().st_mode) == 0o755
    assert (work / "new.txt").stat().st_mtime == 1_700_000_000
    assert os.readlink(work / "up") == "../outside"
    assert os.listdir(server.root / "git/run") == ["HEAD"]
    assert _state(server.root / "git/cache") == cache
    # What was uploaded is what goes out next.
    status, out = server.request("GET", "/trees")
    with tarfile.open(fileobj=io.BytesIO(out), mode="r:") as tar:
        names = set(tar.getnames())
    assert {"workspace/new.txt", "workspace/bin/tool", "git/run/HEAD"} <= names
    assert "workspace/README" not in names


HOSTILE = {
    "dotdot": lambda out: _tar(_member("workspace/ok", b"x"),
                               _member("workspace/../../outside/f", b"x")),
    "absolute": lambda out: _tar(_member("workspace/ok", b"x"), _member(f"{out}/f", b"x")),
    "symlink parent": lambda out: _tar(_member("workspace/l", kind=tarfile.SYMTYPE, link=str(out)),
                                       _member("workspace/l/f", b"x")),
    "file parent": lambda out: _tar(_member("workspace/f", b"x"), _member("workspace/f/g", b"x")),
    "wrong top": lambda out: _tar(_member("workspace/ok", b"x"), _member("git/cache/objects/x")),
    "other top": lambda out: _tar(_member("etc/passwd", b"x")),
    "git as a file": lambda out: _tar(_member("git", b"x")),
    "hard link outside": lambda out: _tar(_member("workspace/h", kind=tarfile.LNKTYPE,
                                                  link="/etc/passwd")),
    "hard link to no member": lambda out: _tar(_member("workspace/h", kind=tarfile.LNKTYPE,
                                                       link="workspace/README")),
    "hard link across trees": lambda out: _tar(_member("git/run/HEAD", b"x"),
                                               _member("workspace/h", kind=tarfile.LNKTYPE,
                                                       link="git/run/HEAD")),
    "file over a folder": lambda out: _tar(_member("workspace/d", kind=tarfile.DIRTYPE),
                                           _member("workspace/d", b"x")),
    "not a tar": lambda out: b"GIF89a" + bytes(2000),
    # An upload whose tar broke off at a member's end (tar killed midway): no end block.
    "broken off": lambda out: _tar(_member("workspace/a", b"x" * 600),
                                   _member("git/run/HEAD", b"x"))[:1536],
    "broken header": lambda out: (lambda t: t[:1536] + b"\x01" * 512 + bytes(1024))(
        _tar(_member("workspace/a", b"x" * 600), _member("git/run/HEAD", b"x"))),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_uploads_change_nothing(server: Server, case: str) -> None:
    outside = server.outside
    before = _state(server.root)
    status, body = server.request("PUT", "/result", HOSTILE[case](outside))
    assert status == 400, body
    assert body.startswith(b"iterare-trees: ") and body.count(b"\n") == 1
    assert _state(server.root) == before
    assert list(outside.iterdir()) == []


def test_uploads_over_the_limit_change_nothing(server: Server) -> None:
    before = _state(server.root)
    big = _tar(_member("workspace/big", bytes(LIMIT)))
    assert server.request("PUT", "/result", big)[0] == 413  # by its Content-Length
    assert server.request("PUT", "/result", big, chunked=True)[0] == 413  # as it comes
    assert _state(server.root) == before
    assert server.request("PUT", "/result", b"x" * 10)[0] == 400
    assert _state(server.root) == before


def test_special_members_are_left_out_and_set_id_bits_dropped(server: Server) -> None:
    upload = _tar(_member("workspace/null", kind=tarfile.CHRTYPE),
                  _member("workspace/disk", kind=tarfile.BLKTYPE),
                  _member("workspace/pipe", kind=tarfile.FIFOTYPE),
                  _member("workspace/suid", b"#!/bin/sh\n", mode=0o6755),
                  _member("workspace/shared", kind=tarfile.DIRTYPE, mode=0o3775),
                  _member("git/run/HEAD", b"x"))
    status, body = server.request("PUT", "/result", upload)
    assert status == 200, body
    work = server.root / "workspace"
    assert sorted(p.name for p in work.iterdir()) == ["shared", "suid"]
    assert stat.S_IMODE((work / "suid").stat().st_mode) == 0o755
    assert stat.S_IMODE((work / "shared").stat().st_mode) == 0o1775


def test_concurrent_uploads_are_served_one_at_a_time(server: Server) -> None:
    def upload(n: int) -> bytes:
        return _tar(*(_member(f"workspace/f{i}", str(n).encode() * 200) for i in range(80)),
                    _member("git/run/who", str(n).encode()))

    results: list[int] = []
    threads = [threading.Thread(target=lambda n=n: results.append(
        server.request("PUT", "/result", upload(n), chunked=True)[0])) for n in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results == [200] * 6
    who = (server.root / "git/run/who").read_text()
    work = server.root / "workspace"
    assert {(work / f"f{i}").read_text() for i in range(80)} == {who * 200}
    assert sorted(os.listdir(work)) == sorted(f"f{i}" for i in range(80))


def test_bad_requests(server: Server) -> None:
    assert server.request("GET", "/nothing")[0] == 404
    assert server.request("POST", "/result", b"")[0] == 405
    assert server.request("GET", "/ready", headers={"X-Long": "a" * 9000})[0] == 400
    answer = _read_all(_raw(server.port, b"GET /\x1b[31m\xff" + b"x" * 500 + b" HTTP/1.1\r\n\r\n"))
    assert answer.startswith(b"HTTP/1.1 404 ")
    lines = server.logged("x1b")
    assert {line["status"] for line in lines} >= {404, 405, 400}
    logged = [str(line["trees"]) for line in lines if "x1b" in str(line["trees"])]
    assert logged == ["GET /\\x1b[31m\\xff" + "x" * 193 + "..."]


def _journal(tmp_path: Path, committed: bool, swapped: list[str] | None = None) -> str:
    path = str(tmp_path / "journal")
    ts.Journal(path, {"workspace": ".iterare-put-w", "git/run": ".iterare-put-r"},
               committed, swapped or []).write()
    return path


def test_a_committed_upload_is_finished_after_a_crash(tmp_path: Path) -> None:
    root = tmp_path / "root"
    _trees(root)
    # What a server stopped midway through swapping leaves: the upload committed, the
    # worktree's old contents half moved out.
    work, run = root / "workspace", root / "git/run"
    for tree, scratch, new in ((work, ".iterare-put-w", "done"), (run, ".iterare-put-r", "HEAD")):
        (tree / scratch / "new").mkdir(parents=True)
        (tree / scratch / "old").mkdir()
        (tree / scratch / "new" / new).write_text("new\n")
    (work / "README").rename(work / ".iterare-put-w/old/README")
    journal = _journal(tmp_path, committed=True)
    ts.recover(str(root), journal)
    assert sorted(os.listdir(work)) == ["done"]
    assert sorted(os.listdir(run)) == ["HEAD"] and (run / "HEAD").read_text() == "new\n"
    assert not os.path.exists(journal)


def test_a_tree_swapped_before_a_crash_is_not_swapped_again(tmp_path: Path) -> None:
    root = tmp_path / "root"
    _trees(root)
    run = root / "git/run"
    # The run gitdir was swapped and its scratch folder half removed: its "moved" mark is
    # gone, which must not make its new contents be moved out again.
    (run / ".iterare-put-r/old").mkdir(parents=True)
    (root / "workspace/.iterare-put-w/new").mkdir(parents=True)
    (root / "workspace/.iterare-put-w/old").mkdir()
    (root / "workspace/.iterare-put-w/new/done").write_text("new\n")
    ts.recover(str(root), _journal(tmp_path, committed=True, swapped=["git/run"]))
    assert sorted(os.listdir(run)) == ["HEAD", "refs"]
    assert sorted(os.listdir(root / "workspace")) == ["done"]


def test_an_uncommitted_upload_is_dropped_after_a_crash(tmp_path: Path) -> None:
    root = tmp_path / "root"
    _trees(root)
    before = _state(root)
    (root / "workspace/.iterare-put-w/new").mkdir(parents=True)
    (root / "workspace/.iterare-put-w/new/half").write_text("x")
    journal = _journal(tmp_path, committed=False)
    ts.recover(str(root), journal)
    assert _state(root) == before and not os.path.exists(journal)


def test_the_trees_own_scratch_like_names_are_theirs(server: Server, tmp_path: Path) -> None:
    """A repository's ``.iterare-put-*`` entries, even one holding a "commit" mark as the
    server once used, go out and come back as they are, and nothing is swapped for them."""
    work = server.root / "workspace"
    (work / ".iterare-put-x").mkdir()
    (work / ".iterare-put-x/commit").write_text(".iterare-put-y\n")
    (work / ".iterare-put-x/new").mkdir()
    (work / ".iterare-put-x/new/evil").write_text("x")
    (server.root / "git/run/.iterare-put-y").mkdir()
    for path in (work / ".iterare-put-x", *(work / ".iterare-put-x").rglob("*"),
                 server.root / "git/run/.iterare-put-y"):
        os.lchown(path, UID, GID)
    before = _state(server.root)
    status, body = server.request("GET", "/trees")
    assert status == 200 and _state(server.root) == before
    with tarfile.open(fileobj=io.BytesIO(body), mode="r:") as tar:
        names = set(tar.getnames())
    assert {"workspace/.iterare-put-x/commit", "workspace/.iterare-put-x/new/evil",
            "git/run/.iterare-put-y"} <= names
    upload = _tar(_member("workspace/.iterare-put-x", kind=tarfile.DIRTYPE, mode=0o755),
                  _member("workspace/.iterare-put-x/commit", b".iterare-put-y\n"),
                  _member("workspace/kept", b"k"), _member("git/run/HEAD", b"x"))
    status, body = server.request("PUT", "/result", upload)
    assert status == 200, body
    assert sorted(os.listdir(work)) == [".iterare-put-x", "kept"]
    assert os.listdir(work / ".iterare-put-x") == ["commit"]
    assert os.listdir(server.root / "git/run") == ["HEAD"]


def test_far_times_deep_trees_and_big_headers(server: Server) -> None:
    """A time past what the kernel takes is set to the latest taken; a tree as deep as a
    path may be long goes out, comes in and is replaced; an extended header over the
    limit is refused before it is read."""
    far = tarfile.TarInfo("workspace/far")
    far.mtime = 2**70
    upload = _tar((far, b"x"), _member("git/run/HEAD", b"x"))
    status, body = server.request("PUT", "/result", upload)
    assert status == 200, body
    assert (server.root / "workspace/far").stat().st_mtime == ts.MAX_MTIME
    deep = "workspace/" + "d/" * 1500
    # (Its folders are made as the leaf's parents: 1500 members with long names would be
    # over the test server's upload limit.)
    upload = _tar(_member(deep + "leaf", b"deep\n"), _member("git/run/HEAD", b"x"))
    for _ in range(2):  # the second replaces (removes) the first
        status, body = server.request("PUT", "/result", upload)
        assert status == 200, body
    status, body = server.request("GET", "/trees")
    assert status == 200
    with tarfile.open(fileobj=io.BytesIO(body), mode="r:") as tar:
        leaf = tar.extractfile(deep + "leaf")
        assert leaf is not None and leaf.read() == b"deep\n"
    # The server removes it (this process could not walk it: os.walk recurses).
    status, body = server.request("PUT", "/result", _tar(_member("git/run/HEAD", b"x")))
    assert status == 200 and os.listdir(server.root / "workspace") == [], body
    before = _state(server.root)
    name = "workspace/" + "n" * (ts.MAX_EXTENDED_HEADER + 1000)
    status, body = server.request("PUT", "/result", _tar(_member(name, b"x")))
    assert status == 400 and b"an extended header over" in body, body
    assert _state(server.root) == before


def _raw(port: int, data: bytes) -> socket.socket:
    conn = socket.create_connection(("127.0.0.1", port), timeout=10)
    conn.sendall(data)
    return conn


def _read_all(conn: socket.socket) -> bytes:
    out = b""
    while chunk := conn.recv(65536):
        out += chunk
    conn.close()
    return out


def test_expect_100_continue_and_too_many_connections(server: Server) -> None:
    upload = _tar(_member("workspace/a", b"a"), _member("git/run/HEAD", b"x"))
    conn = _raw(server.port, b"PUT /result HTTP/1.1\r\nHost: trees\r\nExpect: 100-continue\r\n"
                b"Content-Length: %d\r\n\r\n" % len(upload))
    assert conn.recv(100).startswith(b"HTTP/1.1 100 Continue\r\n\r\n")
    conn.sendall(upload)
    assert _read_all(conn).startswith(b"HTTP/1.1 200 OK\r\n")
    # Idle connections hold every slot: the next one is turned away at once.
    idle = [_raw(server.port, b"GET /rea") for _ in range(ts.MAX_CONNECTIONS)]
    time.sleep(0.3)
    try:
        assert _read_all(_raw(server.port, b"GET /ready HTTP/1.1\r\n\r\n")).startswith(
            b"HTTP/1.1 503 ")
    finally:
        for conn in idle:
            conn.close()
    deadline = time.monotonic() + 5
    while server.request("GET", "/ready")[0] != 200:  # the slots come back
        assert time.monotonic() < deadline
        time.sleep(0.1)


def test_bad_chunks_change_nothing(server: Server) -> None:
    before = _state(server.root)
    upload = _tar(_member("workspace/a", b"a"), _member("git/run/HEAD", b"x"))
    for size in (b"-1", b"0x10", b"1_0", b"", b"g"):
        conn = _raw(server.port, b"PUT /result HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
                    + size + b"\r\n" + upload + b"\r\n0\r\n\r\n")
        assert _read_all(conn).startswith(b"HTTP/1.1 400 "), size
    assert _state(server.root) == before
    conn = _raw(server.port, b"PUT /result HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
                + b"%x\r\n" % len(upload) + upload + b"\r\n0\r\n\r\n")
    assert _read_all(conn).startswith(b"HTTP/1.1 200 ")
    assert (server.root / "workspace/a").read_text() == "a"


def test_names_that_are_not_utf8_go_out_and_come_back(server: Server) -> None:
    name = os.fsdecode(b"caf\xe9 \xff.txt")
    (server.root / "workspace" / name).write_text("x")
    status, body = server.request("GET", "/trees")
    assert status == 200
    upload = io.BytesIO()
    with tarfile.open(fileobj=io.BytesIO(body), mode="r:") as tar, \
            tarfile.open(fileobj=upload, mode="w", format=tarfile.GNU_FORMAT) as out:
        for info in tar:
            if info.name.startswith(("workspace/", "git/run")):
                out.addfile(info, tar.extractfile(info) if info.isreg() else None)
    (server.root / "workspace" / name).unlink()
    assert server.request("PUT", "/result", upload.getvalue())[0] == 200
    assert os.fsencode(name) in os.listdir(os.fsencode(server.root / "workspace"))


def test_ready_waits_for_the_egress(tmp_path: Path) -> None:
    """With ITERARE_TREES_AFTER, GET /ready says 503 until that address takes a
    connection, and ready from then on."""
    egress = socket.socket()
    egress.bind(("127.0.0.1", 0))
    port = egress.getsockname()[1]
    server = ts.TreeServer(str(tmp_path), LIMIT, log=lambda line: None,
                           after=("127.0.0.1", port))
    listener = socket.create_server(("127.0.0.1", 0))
    threading.Thread(target=server.serve, args=(listener,), daemon=True).start()
    at = Server(tmp_path, tmp_path, listener.getsockname()[1], [])
    assert at.request("GET", "/ready") == (503, f"iterare-trees: waiting for 127.0.0.1:"
                                                f"{port}\n".encode())
    egress.listen()
    assert at.request("GET", "/ready") == (200, b"ready\n")
    egress.close()
    assert at.request("GET", "/ready") == (200, b"ready\n")
    listener.close()
