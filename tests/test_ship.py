"""Unit tests of what a remote run brings back (git_iterare.runner.placement.tarball) and
of choosing a run's placement; no Docker."""

from __future__ import annotations

import io
import os
import stat
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from git_iterare.errors import OperationFailed, UserError
from git_iterare.limits import MAX_FETCH_BYTES
from git_iterare.runner.placement import kind_of, placement_for
from git_iterare.runner.placement import ship as ship_code
from git_iterare.runner.placement import tarball as ship
from git_iterare.runner.placement.remote import Remote
from git_iterare.sandbox.engine import Engine
from tests.conftest import git


def archive(*entries: tarfile.TarInfo | tuple[tarfile.TarInfo, bytes]) -> Iterator[bytes]:
    """A tar as the engine sends it, in small chunks."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for entry in entries:
            if isinstance(entry, tuple):
                info, data = entry
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
            else:
                tar.addfile(entry)
    data = buffer.getvalue()
    return iter([data[i:i + 1000] for i in range(0, len(data), 1000)])


def entry(name: str, kind: bytes = tarfile.REGTYPE, mode: int = 0o644,
          link: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.mode, info.linkname = kind, mode, link
    return info


def test_extract_keeps_files_links_and_folders(tmp_path: Path) -> None:
    done = ship.extract(archive(
        entry("workspace", tarfile.DIRTYPE, 0o755),
        (entry("workspace/a.txt"), b"a\n"),
        (entry("workspace/run.sh", mode=0o4755), b"#!/bin/sh\n"),
        entry("workspace/sub", tarfile.DIRTYPE, 0o700),
        (entry("workspace/sub/b.txt"), b"b\n"),
        entry("workspace/link", tarfile.SYMTYPE, link="/etc/passwd"),
        entry("workspace/hard", tarfile.LNKTYPE, link="workspace/a.txt"),
        entry("workspace/fifo", tarfile.FIFOTYPE),
    ), tmp_path)
    assert (tmp_path / "a.txt").read_text() == "a\n"
    assert (tmp_path / "sub" / "b.txt").read_text() == "b\n"
    assert os.readlink(tmp_path / "link") == "/etc/passwd"  # made, never followed
    assert (tmp_path / "hard").read_text() == "a\n"
    assert not (tmp_path / "hard").samefile(tmp_path / "a.txt")  # a copy
    mode = os.stat(tmp_path / "run.sh").st_mode
    assert stat.S_IMODE(mode) == 0o755  # executable, no set-uid bit
    assert not os.path.lexists(tmp_path / "fifo")
    assert done.notes == ["removed special file: fifo"]
    assert done.left_out == []


def test_extract_never_writes_outside_or_through_a_link(tmp_path: Path) -> None:
    dest, outside = tmp_path / "dest", tmp_path / "outside"
    dest.mkdir()
    outside.mkdir()
    ship.extract(archive(
        (entry("workspace/../escaped.txt"), b"x"),
        (entry("/abs.txt"), b"x"),
        entry("workspace/out", tarfile.SYMTYPE, link=str(outside)),
        (entry("workspace/out/through.txt"), b"x"),
        (entry("workspace/file"), b"f"),
        (entry("workspace/file/below.txt"), b"x"),
        (entry("workspace/.git"), b"gitdir: /elsewhere\n"),
        (entry("workspace/.git/config"), b"x"),
    ), dest, skip_top=(".git",))
    assert list(outside.iterdir()) == []
    assert not (tmp_path / "escaped.txt").exists()
    assert sorted(p.name for p in dest.iterdir()) == ["file", "out"]
    assert (dest / "file").read_text() == "f"


def test_extract_keeps_a_path_longer_than_its_destination_leaves_room_for(tmp_path: Path
                                                                          ) -> None:
    """A path as long as the engine can name (here 3,950 bytes) is kept below a folder
    whose own path is 300 bytes long: 4,250 bytes in all, more than one system call takes."""
    dest = tmp_path.joinpath(*["d" * 99] * 3)
    dest.mkdir(parents=True)
    folder = "/".join(["x" * 250] * 15)
    name = f"{folder}/{'f' * (3950 - len(folder) - 1)}"
    ship.extract(archive(
        (entry(f"workspace/{name}"), b"long\n"),
    ), dest)
    root = os.open(dest, os.O_RDONLY)
    try:
        fd = os.open(name, os.O_RDONLY, dir_fd=root)
        with os.fdopen(fd, "rb") as handle:
            assert handle.read() == b"long\n"
    finally:
        os.close(root)
    assert len(os.fsencode(str(dest))) + 1 + len(name) > 4096


def test_extract_leaves_out_files_over_the_callers_limit_and_disables_nested_repos(
        tmp_path: Path) -> None:
    done = ship.extract(archive(
        (entry("workspace/small.txt"), b"s" * 10),
        (entry("workspace/big.bin"), b"b" * 40),
        entry("workspace/again.bin", tarfile.LNKTYPE, link="workspace/big.bin"),
        (entry("workspace/big.bin/below.txt"), b"x"),
        (entry("workspace/lib/.git/config"), b"[core]\n\tfsmonitor = pwn\n"),
        (entry("workspace/.git"), b"gitdir: /git/run\n"),
    ), tmp_path, skip_top=(".git",), max_file=30)
    assert done.left_out == [("big.bin", 40), ("again.bin", 40)]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["lib", "small.txt"]
    assert (tmp_path / "lib" / ".git.disabled-by-iterare" / "config").is_file()
    assert not (tmp_path / "lib" / ".git").exists()


def test_extract_refuses_an_archive_over_the_fetch_limit_before_reading_it(
        tmp_path: Path) -> None:
    """A file the archive says is larger than MAX_FETCH_BYTES stops the extraction at its
    header: a sparse file of the agent's is never read through."""
    header = entry("workspace/huge.sparse")
    header.size = MAX_FETCH_BYTES + 1
    head = header.tobuf(tarfile.PAX_FORMAT)
    with pytest.raises(ship.FetchTooLarge, match=r"more than 4294967296 bytes"):
        ship.extract(iter([head, b"\0" * 4096]), tmp_path, max_file=10)


def test_hard_links_count_as_the_copies_they_become(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """One file and hard links to it: each link is a copy on the user's disk, so a million
    links to a file under the limit would write a million times as much."""
    monkeypatch.setattr("git_iterare.runner.placement.tarball.MAX_FETCH_BYTES", 250)
    links = [entry(f"workspace/copy{n}", tarfile.LNKTYPE, link="workspace/file")
             for n in range(2)]
    with pytest.raises(ship.FetchTooLarge, match=r"more than 250 bytes"):
        ship.extract(archive((entry("workspace/file"), b"x" * 100), *links), tmp_path)


def test_extract_of_nothing_and_of_garbage(tmp_path: Path) -> None:
    assert ship.extract(iter([]), tmp_path) == ship.Unpacked()
    with pytest.raises(OperationFailed, match="not a valid archive"):
        ship.extract(iter([b"not a tar" * 200]), tmp_path)


def test_only_a_unix_socket_gets_the_local_placement() -> None:
    assert placement_for(Engine("default", "unix:///var/run/docker.sock")).kind == "local"
    assert placement_for(Engine("podman", "unix:///run/podman/podman.sock")).kind == "local"
    assert placement_for(Engine("default", "ssh://me@box")).kind == "remote"
    assert placement_for(Engine("box", "tcp://box:2376")).kind == "remote"


def test_a_records_placement_is_its_field_or_for_older_records_its_engine() -> None:
    from typing import cast

    from git_iterare.runs.extra import RunExtra
    from git_iterare.runs.record import RunRecord

    def record(extra: dict[str, object], placement: str | None = None) -> RunRecord:
        return RunRecord(id="r-1", name="r", prompt_name="p", base_commit="0" * 40,
                         agent="shell", status="running", extra=cast("RunExtra", extra),
                         placement=placement)

    assert kind_of(record({}, "remote")) == "remote"
    assert kind_of(record({"engine": {"url": "ssh://box"}}, "local")) == "local"
    assert kind_of(record({"engine": {"name": "default", "url": "ssh://box"}})) == "remote"
    assert kind_of(record({"engine": {"name": "default",
                                      "url": "unix:///var/run/docker.sock"}})) == "local"
    assert kind_of(record({})) == "local"  # older records ran locally
    assert kind_of(record({}, "no such")) == "local"


def test_host_mounts_are_refused_for_a_remote_engine(repo: Path) -> None:
    from git_iterare.git.repo import discover
    from git_iterare.sandbox import Mount

    here = discover(repo)
    base = git("rev-parse", "HEAD", cwd=repo).stdout.strip()
    Remote().check(here, base, [])
    with pytest.raises(UserError, match=r"the mount of /srv/data cannot be used"):
        Remote().check(here, base, [Mount(Path("/srv/data"), "/data")])


def test_cache_key_is_made_once(repo: Path) -> None:
    from git_iterare.git.repo import discover

    here = discover(repo)
    key = ship_code.cache_key(here)
    assert len(key) == 16 and key == ship_code.cache_key(here)
    assert (here.common_dir / "iterare" / "cache-id").read_text() == key + "\n"


def test_the_agents_files_and_a_remote_runs_files_go_in_one_archive(tmp_path: Path) -> None:
    """One put into the agent's container (each is a round trip to a remote engine): its
    accounts and start script, and the run's files (the prompt), root's and readable."""
    from git_iterare.sandbox import EgressPolicy, Limits, SandboxSpec
    from git_iterare.sandbox.accounts import agent_files
    from git_iterare.sandbox.spec import VolumeTrees

    spec = SandboxSpec(image="i", sidecar_image="i", name="n", command=("true",),
                       policy=EgressPolicy(), out_dir=tmp_path,
                       limits=Limits(cpus=1.0, memory="64m", pids=16),
                       volumes=VolumeTrees("w", "g", "c", {"/run/iterare/prompt.md": b"do it\n"}))
    data = agent_files(spec, b"root:x:0:0::/root:/bin/sh\n", b"root:x:0:\n")
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        members = {m.name: m for m in tar.getmembers()}
        prompt = members["run/iterare/prompt.md"]
        assert (prompt.uid, prompt.mode) == (0, 0o644)
        assert tar.extractfile(prompt).read() == b"do it\n"  # type: ignore[union-attr]
        assert [m.name for m in tar.getmembers()].count("run/iterare") == 1
        assert "run/iterare/agent-start" in members and "etc/passwd" in members
