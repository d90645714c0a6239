"""A long transfer's progress (git_iterare.meter, ui.Progress.meter): counted as the
engine reads it, one line redrawn on a terminal, nothing off one."""

from __future__ import annotations

import io
import secrets
import tarfile
import uuid

import pytest

from git_iterare.sandbox import meter
from git_iterare.sandbox.meter import Metered, transfer_line
from git_iterare.ui import Progress


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_reads_are_counted_and_the_end_always_shown(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(meter, "EVERY", 3600.0)  # only the first read and the end redraw
    data = secrets.token_bytes(meter.SHOWN_FROM + 5)
    seen: list[tuple[int, int]] = []
    body = Metered(io.BytesIO(data), len(data), lambda sent, total: seen.append((sent, total)))
    assert len(body) == len(data)
    assert b"".join(body) == data
    assert seen == [(meter.BLOCK, len(data)), (len(data), len(data))]


def test_small_transfers_show_nothing() -> None:
    seen: list[int] = []
    body = Metered(io.BytesIO(b"x" * 100), 100, lambda sent, total: seen.append(sent))
    assert body.read() == b"x" * 100 and body.read() == b""
    assert seen == []


def test_one_line_redrawn_on_a_terminal_and_nothing_off_one() -> None:
    assert transfer_line("sending", 3 << 20, 12 << 20) == "sending: 3.0 of 12.0 MiB (25%)"
    screen = Terminal()
    shown = Progress(screen)
    shown.meter("sending: 1.0 of 2.0 MiB (50%)")
    shown.meter("sending: 2.0 of 2.0 MiB (100%)")
    shown.clear()
    assert screen.getvalue() == ("sending: 1.0 of 2.0 MiB (50%)\n\033[1F\033[J"
                                 "sending: 2.0 of 2.0 MiB (100%)\n\033[1F\033[J")
    piped = io.StringIO()
    Progress(piped).meter("sending: 1.0 of 2.0 MiB (50%)")
    assert piped.getvalue() == ""


@pytest.mark.docker
def test_the_engine_takes_a_metered_archive_whole(sandbox_image: str) -> None:
    from git_iterare.sandbox.engine_client import client
    from git_iterare.sandbox.volumes import put_archive

    payload = secrets.token_bytes(meter.SHOWN_FROM * 2)
    archive = io.BytesIO()
    with tarfile.open(fileobj=archive, mode="w") as tar:
        info = tarfile.TarInfo("big.bin")
        info.size = len(payload)
        tar.addfile(info, io.BytesIO(payload))
    size = archive.tell()
    archive.seek(0)
    seen: list[int] = []
    container = client().containers.create(sandbox_image, command=["true"],
                                           name=f"meter-{uuid.uuid4().hex[:8]}")
    try:
        put_archive(container, "/tmp", Metered(archive, size, lambda s, t: seen.append(s)))
        chunks, _ = container.get_archive("/tmp/big.bin")
        with tarfile.open(fileobj=io.BytesIO(b"".join(chunks))) as back:
            member = back.extractfile("big.bin")
            assert member is not None and member.read() == payload
    finally:
        container.remove(force=True)
    assert seen[-1] == size
