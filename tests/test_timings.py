"""The phase timings benchmarks read (git_iterare.timings)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from git_iterare import timings


def test_a_phase_is_written_only_when_the_environment_names_a_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = tmp_path / "timings"
    monkeypatch.delenv(timings.ENV, raising=False)
    with timings.phase("start.quiet"):
        pass
    assert not log.exists() and list(tmp_path.iterdir()) == []
    monkeypatch.setenv(timings.ENV, str(log))
    with timings.phase("start.checkout"):
        time.sleep(0.02)
    with timings.phase("start.checkout"):
        pass
    found = timings.read(log)
    assert list(found) == ["start.checkout"] and len(found["start.checkout"]) == 2
    assert found["start.checkout"][0] >= 0.02 > found["start.checkout"][1]


def test_a_phase_that_raises_is_written_and_the_error_goes_on(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = tmp_path / "timings"
    monkeypatch.setenv(timings.ENV, str(log))
    with pytest.raises(ValueError, match="boom"), timings.phase('odd "name"\n'):
        raise ValueError("boom")
    assert list(timings.read(log)) == ["odd _name__"]


def test_an_unwritable_file_fails_nothing(tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(timings.ENV, str(tmp_path / "missing" / "timings"))
    with timings.phase("finish"):
        pass
    assert timings.read(tmp_path / "missing" / "timings") == {}


def test_lines_that_do_not_parse_are_skipped(tmp_path: Path) -> None:
    log = tmp_path / "timings"
    log.write_text('{"phase": "finish", "seconds": 0.5}\nnot json\n{"phase": "x"}\n'
                   '{"phase": "finish", "seconds": 1.5}\n')
    assert timings.read(log) == {"finish": [0.5, 1.5]}
