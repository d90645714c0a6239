"""boundedfs.remove_tree: a whole tree removed without recursion, and two removals of one
tree at once (two cleanups of a run) both end without an error, with the tree gone."""

from __future__ import annotations

import threading
from pathlib import Path

from git_iterare import boundedfs


def _tree(top: Path, folders: int, files: int) -> None:
    for i in range(folders):
        sub = top / f"d{i}" / "deeper"
        sub.mkdir(parents=True)
        for j in range(files):
            (sub / f"f{j}").write_bytes(b"x")
        (top / f"d{i}" / "link").symlink_to("deeper")


def test_a_tree_is_removed_and_a_missing_one_is_no_error(tmp_path: Path) -> None:
    _tree(tmp_path / "t", 3, 3)
    boundedfs.remove_tree(tmp_path / "t")
    assert not (tmp_path / "t").exists()
    boundedfs.remove_tree(tmp_path / "t")


def _remove_at_once(top: Path) -> list[BaseException]:
    """Two threads remove ``top`` at once; what they raised."""
    errors: list[BaseException] = []
    start = threading.Barrier(2)

    def remove() -> None:
        start.wait()
        try:
            boundedfs.remove_tree(top)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=remove) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return errors


def test_two_removals_of_one_tree_at_once_both_succeed(tmp_path: Path) -> None:
    for attempt in range(5):  # a race: each attempt overlaps the two removals anew
        top = tmp_path / f"t{attempt}"
        _tree(top, 40, 100)
        assert _remove_at_once(top) == []
        assert not top.exists()
