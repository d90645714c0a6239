"""Run names and ids."""

from __future__ import annotations

import re

import pytest

from git_iterare.errors import UserError
from git_iterare.runs import ids

#: The name rule of Docker's engine for containers (and networks).
DOCKER_NAME = re.compile(r"/?[a-zA-Z0-9][a-zA-Z0-9_.-]+")


@pytest.mark.parametrize("name", ["fix-bug", "a", "A_b.c-9", "x" * 100, "_x", "9"])
def test_valid_names(name: str) -> None:
    run_id = ids.new_run_id(name)
    assert re.fullmatch(re.escape(name) + r"-[0-9a-f]{8}", run_id)
    assert ids.is_run_id(run_id) and ids.is_run_id(run_id, new=True)
    # Every consumer takes it: the sandbox's container names, and a file name.
    for container in (f"iterare-{run_id}", f"iterare-{run_id}-net"):
        assert DOCKER_NAME.fullmatch(container)
    assert len(f"{run_id}.gitfile".encode()) < 255


@pytest.mark.parametrize("name, bad", [
    ("ünï", "ü"), ("über", "ü"), ("名前", "名"), ("a+b", "+"), ("a,b", ","), ("a'b", "'"),
    ("a=b", "="), ("a%b", "%"), ("a!b", "!"), ("a#b", "#"), ("a$b", "$"), ("a&b", "&"),
    ("caf\u00e9", "\u00e9"), ("x\u200by", "\u200b"),
])
def test_names_docker_or_files_would_refuse_are_refused(name: str, bad: str) -> None:
    with pytest.raises(UserError) as info:
        ids.new_run_id(name)
    assert info.value.message == (
        f"invalid run name {name!r}: it contains {bad!r} (a name becomes a container name "
        "and file names, which take only ASCII letters, digits, '-', '_' and '.')")
    assert info.value.hint is None  # the message lists them already: said once
    assert info.value.exit_code == 2


def test_ids_that_exist_keep_working_whatever_made_them() -> None:
    # A run made by an older version, or fetched from a teammate, stays addressable.
    assert ids.is_run_id("über-0123abcd")
    assert ids.validate_run_id("über-0123abcd") == "über-0123abcd"
    assert not ids.is_run_id("über-0123abcd", new=True)


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
])
def test_invalid_names(name: str, why: str) -> None:
    with pytest.raises(UserError) as info:
        ids.new_run_id(name)
    assert info.value.exit_code == 2
    assert info.value.message == f"invalid run name {name!r}: {why}"
    assert info.value.hint == "use letters, digits, '-', '_' and '.'"


def test_a_too_long_name_is_told_the_limit_and_shown_cut() -> None:
    assert ids.validate_name("x" * 100) == "x" * 100
    with pytest.raises(UserError) as info:
        ids.new_run_id("x" * 101)
    assert info.value.render() == (
        f"invalid run name {'x' * 40!r}...: it has 101 characters; a run name has at most 100 "
        "(choose a shorter name)")


def test_valid_names_pass_git_check_ref_format(tmp_path) -> None:
    from tests.conftest import git

    for name in ["fix-bug", "A_b.c-9", "_x"]:
        assert git("check-ref-format", f"refs/iterare/runs/{ids.new_run_id(name)}",
                   cwd=tmp_path).returncode == 0


def test_ref_names() -> None:
    assert ids.run_ref("a-0123abcd") == "refs/iterare/runs/a-0123abcd"
    assert ids.run_branch("a-0123abcd") == "iterare/a-0123abcd"
    assert not ids.is_run_id("a-0123abc")
    assert not ids.is_run_id("a-0123abcg")
    with pytest.raises(UserError):
        ids.validate_run_id("../x-0123abcd")
