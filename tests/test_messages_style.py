"""House style of what git-iterare says, checked over its source: exit statuses come from
the ExitCode enum, and a command named in a message is quoted one way, in backticks
(`git iterare log -f RUN`), as most messages already did."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from git_iterare.cli.registry import COMMANDS

SOURCE = Path(__file__).parent.parent / "git_iterare"
#: Shell code for completion: its quotes are the shells'.
NOT_MESSAGES = {"cli/completion_script.py"}
_NAMES = "|".join(map(re.escape, COMMANDS))
COMMAND = re.compile(rf"git iterare (?:-|(?:{_NAMES})\b)")


def _docstrings(tree: ast.AST) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                ids.add(id(body[0].value))
    return ids


def _modules() -> list[tuple[str, ast.AST]]:
    return [(str(p.relative_to(SOURCE)), ast.parse(p.read_text(encoding="utf-8")))
            for p in sorted(SOURCE.rglob("*.py"))]


def test_exit_statuses_come_from_the_enum() -> None:
    literal = []
    for name, tree in _modules():
        for node in ast.walk(tree):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr == "exit" and node.args
                    and isinstance(node.args[0], ast.Constant)):
                literal.append(f"{name}:{node.lineno}")
    assert literal == []


def test_commands_in_messages_are_in_backticks() -> None:
    unquoted = []
    for name, tree in _modules():
        if name in NOT_MESSAGES:
            continue
        skip = _docstrings(tree)
        for node in ast.walk(tree):
            if (isinstance(node, ast.Constant) and isinstance(node.value, str)
                    and id(node) not in skip):
                for match in COMMAND.finditer(node.value):
                    if node.value[match.start() - 1:match.start()] != "`":
                        unquoted.append(f"{name}:{node.lineno}: {node.value!r}")
    assert unquoted == []
