"""Another user's repository, reached through a copy of its ``.git``, ``GIT_WORK_TREE`` or
``GIT_COMMON_DIR``: trees the user cannot even look at are refused in one line and never
given to this user (placement.local.reclaim_if_foreign; trees of the agent's uid are
reclaimed), and so is a run lock the user cannot open. Root can open everything, so the
refusals' ``lstat`` and lock are faked; the real reclaim is in the Docker tests of
interrupted launches."""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from git_iterare.errors import OperationFailed
from git_iterare.runner.placement import local

#: What of a run record reclaim_if_foreign reads.
RECORD: Any = SimpleNamespace(id="r-1", extra={})


def test_trees_the_user_cannot_look_at_are_refused(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    reclaimed: list[object] = []
    monkeypatch.setattr(local, "reclaim", lambda *args: reclaimed.append(args))

    def denied(path: object) -> os.stat_result:
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(os, "lstat", denied)
    with pytest.raises(OperationFailed) as raised:
        local.reclaim_if_foreign(RECORD, [tmp_path / "w"], tmp_path / "out")
    assert raised.value.render().splitlines()[0].startswith(
        f"cannot look at {tmp_path / 'w'} of run r-1: permission denied")
    assert reclaimed == []


def test_trees_of_another_uid_are_reclaimed_and_missing_ones_skipped(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    reclaimed: list[object] = []
    monkeypatch.setattr(local, "reclaim", lambda *args: reclaimed.append(args))
    (tmp_path / "w").mkdir()
    local.reclaim_if_foreign(RECORD, [tmp_path / "gone", tmp_path / "w"],
                             tmp_path / "out")
    assert reclaimed == []  # all the user's
    monkeypatch.setattr(os, "getuid", lambda: 12345)
    local.reclaim_if_foreign(RECORD, [tmp_path / "gone", tmp_path / "w"],
                             tmp_path / "out")
    assert len(reclaimed) == 1


def test_a_run_lock_the_user_cannot_open_is_refused(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    from git_iterare import marks
    from git_iterare.runner.paths import run_lock

    def denied(path: Path, **_: object) -> int:
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(marks, "hold", denied)
    repo: Any = SimpleNamespace(common_dir=tmp_path)
    with pytest.raises(OperationFailed) as raised, run_lock(repo, "r-1"):
        pass
    assert raised.value.render() == (
        f"cannot lock run r-1: {tmp_path}/iterare/state/r-1.lock: permission denied "
        "(run it as the user whose repository this is)")
