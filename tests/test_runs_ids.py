"""Run names and ids."""

from __future__ import annotations

import re

import pytest

from git_iterare.errors import UserError
from git_iterare.runs import ids


@pytest.mark.parametrize("name", ["fix-bug", "a", "A_b.c-9", "x" * 100, "über"])
def test_valid_names(name: str) -> None:
    run_id = ids.new_run_id(name)
    assert re.fullmatch(re.escape(name) + r"-[0-9a-f]{8}", run_id)
    assert ids.is_run_id(run_id)


@pytest.mark.parametrize("name, why", [
    ("", "it is empty"),
    ("a..b", "it contains '..'"),
    ("a/b", "it contains '/'"),
    ("a b", "it contains whitespace"),
    ("a\tb", "it contains a control character"),
    ("-x", "it starts with '-'"),
    (".x", "it starts with '.'"),
    ("x.lock", "it ends with '.' or '.lock'"),
    ("x.", "it ends with '.' or '.lock'"),
    ("a@{b", "it contains '@{' or is '@'"),
    ("@", "it contains '@{' or is '@'"),
    ("a~1", "it contains '~'"),
    ("a^", "it contains '^'"),
    ("a:b", "it contains ':'"),
    ("a?", "it contains '?'"),
    ("a*", "it contains '*'"),
    ("a[b", "it contains '['"),
    ("a\\b", "it contains '\\\\'"),
    ("a\x7fb", "it contains a control character"),
    ("x" * 101, "it is longer than 100 characters"),
])
def test_invalid_names(name: str, why: str) -> None:
    with pytest.raises(UserError) as info:
        ids.new_run_id(name)
    assert info.value.exit_code == 2
    assert info.value.message == f"invalid run name {name!r}: {why}"


def test_valid_names_pass_git_check_ref_format(tmp_path) -> None:
    from tests.conftest import git

    for name in ["fix-bug", "A_b.c-9", "über"]:
        assert git("check-ref-format", f"refs/iterare/runs/{ids.new_run_id(name)}",
                   cwd=tmp_path).returncode == 0


def test_ref_names() -> None:
    assert ids.run_ref("a-0123abcd") == "refs/iterare/runs/a-0123abcd"
    assert ids.run_branch("a-0123abcd") == "iterare/a-0123abcd"
    assert not ids.is_run_id("a-0123abc")
    assert not ids.is_run_id("a-0123abcg")
    with pytest.raises(UserError):
        ids.validate_run_id("../x-0123abcd")
