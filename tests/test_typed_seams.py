"""The runner's functions take and return real types (RunRecord, RunStore, Agent,
ContainerInfo, ...), never ``Any``: checked on the source, since mypy lets ``Any`` through.

agents/ joins the list once its JSON helpers take ``object`` (the agents2 branch).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "git_iterare"
CHECKED = ("runner", "agents")


def _any_in_signatures(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        args = node.args
        every = [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg]
        annotations = [a.annotation for a in every if a is not None] + [node.returns]
        for annotation in annotations:
            if annotation is None:
                continue
            text = ast.unparse(annotation)  # string annotations too
            if re.search(r"\bAny\b", text):
                found.append(f"{path.name}:{node.lineno} {node.name}: {text}")
    return found


@pytest.mark.parametrize("package", CHECKED)
def test_no_any_in_signatures(package: str) -> None:
    found = [hit for path in sorted((PACKAGE / package).rglob("*.py"))
             for hit in _any_in_signatures(path)]
    assert found == []


def test_the_check_sees_any(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text("from typing import Any\n"
                      "def f(x: int, *, y: 'dict[str, Any]') -> None: ...\n"
                      "def g(x: int) -> list[typing.Any]: ...\n")
    assert [hit.split(" ", 1)[1] for hit in _any_in_signatures(sample)] == [
        "f: 'dict[str, Any]'", "g: list[typing.Any]"]
