"""The layout of DESIGN.md ("The parts"), checked on the source: who may import whom.

Data flows one way: cli -> runner -> (config, prompt, git, runs, sandbox, agents) -> the
shared ground (errors, proc, ui, ...). Imports are read with :mod:`ast` from every module
of the package, including imports inside functions and under ``TYPE_CHECKING`` (a circle
of type-only imports is still a circle for a reader).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "git_iterare"

#: Modules at the top of the package: the shared ground, and the peers the runner ties
#: together. A new one belongs in a sub-package unless it is shared by several of them.
TOP_LEVEL = {"__init__", "errors", "redaction", "limits", "boundedfs", "boundedyaml",
             "loglimit", "proc", "ui", "settings", "config", "prompt", "scaffold", "gcpause",
             "marks", "timings"}

#: Layer of each top-level module or package: a module imports only from its own layer
#: or below ("no upward arrows").
LAYERS = {
    "git_iterare": 0, "errors": 0, "redaction": 0, "limits": 0, "boundedfs": 0,
    "boundedyaml": 0,
    "loglimit": 0, "proc": 0, "ui": 0, "settings": 0, "gcpause": 0, "marks": 0, "timings": 0,
    "config": 1, "prompt": 1, "scaffold": 1,
    "git": 1, "runs": 1, "sandbox": 1, "agents": 1,
    "runner": 2,
    "cli": 3,
}

#: What the command line may import: it calls the runner, config, runs and ui, never
#: Docker or git plumbing (gcpause: it ends the start-up of the command it dispatches).
CLI_MAY_IMPORT = {"git_iterare", "cli", "runner", "config", "runs", "errors", "ui",
                  "gcpause"}

#: Peers that must not know about each other (DESIGN.md: "The sandbox knows nothing about
#: prompts, click or which agent runs; agents know nothing about Docker").
FORBIDDEN = {
    "sandbox": {"prompt", "agents", "runs", "git", "scaffold"},
    "agents": {"sandbox"},
    "git": {"runs", "sandbox", "agents", "prompt", "scaffold"},
    "runs": {"sandbox", "git", "prompt", "scaffold"},
}

#: Third-party packages only one part may use.
THIRD_PARTY_OWNER = {"click": "cli", "docker": "sandbox"}

#: Circles that are known and must go; each must still exist, so this list only shrinks.
KNOWN_CIRCLES: set[frozenset[str]] = set()

#: The seams (DESIGN.md, "Engines and placements"): where a run's trees live is asked of the
#: placement package alone, and start-sooner work is reached through one door.
PLACEMENT = "git_iterare.runner.placement"
WARM = "git_iterare.sandbox.warm"
WARM_DOOR = "git_iterare.runner.warmup"


def _modules() -> dict[str, tuple[Path, bool]]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        if is_package:
            parts.pop()
        found[".".join(parts)] = (path, is_package)
    return found


MODULES = _modules()


def _imports(name: str) -> set[str]:
    """Every module of ours and every top-level third-party name ``name`` imports."""
    path, is_package = MODULES[name]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                here = name.split(".") if is_package else name.split(".")[:-1]
                here = here[:len(here) - node.level + 1]
                base = ".".join([*here, base] if base else here)
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base
                       for a in node.names]
        for target in targets:
            if not target.startswith("git_iterare"):
                out.add(target.split(".")[0])
                continue
            while target not in MODULES and "." in target:
                target = target.rsplit(".", 1)[0]
            if target != name:
                out.add(target)
    return out


GRAPH = {name: {t for t in _imports(name) if t in MODULES} for name in MODULES}
EXTERNAL = {name: {t for t in _imports(name) if t not in MODULES} for name in MODULES}


def _part(module: str) -> str:
    """``git_iterare.runner.launch`` -> ``runner``; the package itself -> ``git_iterare``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def _circles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[frozenset[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(frozenset(component))
    return found


def test_the_graph_is_read() -> None:
    # The checks below mean nothing if parsing found no edges.
    assert "git_iterare.runner.launch" in GRAPH["git_iterare.cli.execute"]
    assert "git_iterare.git.repo" in GRAPH["git_iterare.runner.workspace"]
    assert "click" in EXTERNAL["git_iterare.cli.main"]


def test_circle_finder_finds_a_circle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _circles(graph) == [frozenset({"a", "b", "c"})]


def test_no_import_circles() -> None:
    circles = set(_circles(GRAPH))
    assert circles - KNOWN_CIRCLES == set(), "import circles: " + "; ".join(
        " <-> ".join(sorted(c)) for c in circles - KNOWN_CIRCLES)
    assert KNOWN_CIRCLES - circles == set(), "gone: remove them from KNOWN_CIRCLES"


def test_top_level_holds_only_the_shared_ground() -> None:
    top = {p.stem for p in PACKAGE.glob("*.py")}
    assert top <= TOP_LEVEL, f"move into a sub-package: {sorted(top - TOP_LEVEL)}"
    packages = {p.parent.name for p in PACKAGE.glob("*/__init__.py")}
    assert packages == {"cli", "runner", "runs", "git", "sandbox", "agents"}


@pytest.mark.parametrize("module", sorted(MODULES))
def test_no_upward_arrows(module: str) -> None:
    mine = LAYERS[_part(module)]
    upward = sorted(t for t in GRAPH[module] if LAYERS[_part(t)] > mine)
    assert not upward, f"{module} (layer {mine}) imports higher layers: {upward}"


@pytest.mark.parametrize("module", sorted(m for m in MODULES if _part(m) == "cli"))
def test_cli_imports_only_runner_config_runs_errors_ui(module: str) -> None:
    bad = sorted(t for t in GRAPH[module] if _part(t) not in CLI_MAY_IMPORT)
    assert not bad, f"{module} imports {bad}; call them through runner/"


@pytest.mark.parametrize("module", sorted(MODULES))
def test_peers_stay_apart(module: str) -> None:
    banned = FORBIDDEN.get(_part(module), set())
    bad = sorted(t for t in GRAPH[module] if _part(t) in banned)
    assert not bad, f"{module} must not import {bad}"


@pytest.mark.parametrize("module", sorted(MODULES))
def test_third_party_owners(module: str) -> None:
    bad = sorted(name for name, owner in THIRD_PARTY_OWNER.items()
                 if name in EXTERNAL[module] and _part(module) != owner)
    assert not bad, f"{module} imports {bad}, which belong to {THIRD_PARTY_OWNER}"


def _within(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


@pytest.mark.parametrize("module", sorted(MODULES))
def test_only_the_placement_package_touches_engine_volumes(module: str) -> None:
    """Engine volumes (and the porters that fill them) are a placement's business: the
    rest of the runner asks its run's placement."""
    if _part(module) != "runner" or _within(module, PLACEMENT):
        return
    assert "git_iterare.sandbox.volumes" not in GRAPH[module], module


@pytest.mark.parametrize("module", sorted(m for m in MODULES if _part(m) == "runner"))
def test_only_the_placement_package_asks_where_an_engine_is(module: str) -> None:
    """Whether an engine sees this machine's files is answered once, by
    ``placement_for``: no other room of the runner reads it."""
    if _within(module, PLACEMENT):
        return
    text = MODULES[module][0].read_text(encoding="utf-8")
    asked = r"on_this_host|shares_filesystem|startswith\(\s*[\"']unix://"
    assert not re.search(asked, text), module


@pytest.mark.parametrize("module", sorted(MODULES))
def test_only_the_warm_up_door_reaches_the_warm_package(module: str) -> None:
    if _within(module, WARM) or module == WARM_DOOR:
        return
    assert not [t for t in GRAPH[module] if _within(t, WARM)], module


def test_the_seams_exist() -> None:
    # The checks above mean nothing if the packages they guard were renamed.
    assert {PLACEMENT, f"{PLACEMENT}.local", f"{PLACEMENT}.remote", WARM, WARM_DOOR,
            f"{WARM}.spare", "git_iterare.sandbox.volumes"} <= set(MODULES)
    assert any(_within(t, WARM) for t in GRAPH[WARM_DOOR])
