"""Files that make a tool run code on this machine once merged are flagged, by kind: build
tools, task runners, language servers' project files, REPL and debugger rc files, CI
services, agent configs, dependency lists and lock files (issue: a run adding four of them
merged without --yes). A plain Dockerfile is listed but not flagged: docker build runs it
in containers (see the data file's header)."""

from __future__ import annotations

from pathlib import Path

import pytest

from git_iterare.git.hostexec import classify, rules
from tests.conftest import iterare
from tests.test_output_sanitized import agent_run

#: path -> a part of the reason it is flagged with, one or more per kind.
FLAGGED = {
    # git's own and its filters' settings a repository carries (found by a hostile test)
    ".lfsconfig": "git-lfs endpoints",
    # linter and tool configuration that loads code
    ".pylintrc": "init-hook is Python code",
    "pylintrc": "init-hook is Python code",
    "mypy.ini": "plugins are Python modules",
    "web/.eslintrc.json": "ESLint",
    "infra/main.tf": "local-exec",
    # language servers' and IDEs' project files
    "Directory.Build.props": "MSBuild imports it into every project below",
    "src/App/App.csproj": "MSBuild project",
    "Package.swift": "SourceKit-LSP",
    "mix.exs": "ElixirLS",
    "build.zig": "ZLS",
    "project/Build.scala": "sbt build definition",
    # task runners and process managers
    "gulpfile.js": "gulp tasks",
    "Gruntfile.js": "Grunt tasks",
    "Vagrantfile": "Ruby code vagrant runs",
    "Procfile": "foreman",
    "tasks.py": "invoke tasks",
    "fabfile.py": "Fabric tasks",
    # build tools
    ".bundle/config": "bundler's project configuration",
    "SConstruct": "SCons",
    # REPL and debugger start-up files
    ".pdbrc": "pdb runs its commands",
    ".iex.exs": "IEx evaluates it",
    ".Rprofile": "R sources it",
    ".irbrc": "irb runs it",
    # CI services
    "appveyor.yml": "AppVeyor",
    ".cirrus.yml": "Cirrus CI",
    ".cirrus.star": "Cirrus CI",
    ".gitea/workflows/ci.yml": "Gitea Actions",
    "cloudbuild.yaml": "Google Cloud Build",
    # agent configuration
    ".kiro/hooks/lint.kiro.hook": "Kiro hooks",
    ".qwen/settings.json": "Qwen Code",
    ".openhands/setup.sh": "OpenHands",
    # dependency lists and lock files
    "requirements.txt": "pip install -r",
    "requirements-dev.txt": "pip install -r",
    "package-lock.json": "npm ci installs the tarball URLs",
    "yarn.lock": "yarn install",
    "poetry.lock": "Poetry",
}


@pytest.mark.parametrize(("path", "reason_part"), sorted(FLAGGED.items()))
def test_each_kind_is_flagged(path: str, reason_part: str) -> None:
    reason = classify(path, "100644")
    assert reason is not None and reason_part in reason, (path, reason)


@pytest.mark.parametrize("path", ["Dockerfile", "docker/Containerfile", "src/app.py",
                                  "deep/project/x.scala", "docs/tasks.md"])
def test_what_runs_nowhere_here_is_not_flagged(path: str) -> None:
    assert classify(path, "100644") is None


def test_every_pattern_has_a_reason_and_is_listed_once() -> None:
    patterns = [rule.pattern.casefold() for rule in rules()]
    assert len(patterns) == len(set(patterns))


def test_a_run_adding_them_is_not_merged_without_yes(repo: Path) -> None:
    files = {path: "x\n" for path in (".pylintrc", "Directory.Build.props", "Package.swift",
                                      "mix.exs", "gulpfile.js", "Dockerfile", "src/app.py")}
    rid = agent_run(repo, files)
    refused = iterare("merge", rid, cwd=repo)
    assert (refused.returncode, refused.stdout) == (1, "")
    lines = refused.stderr.splitlines()
    assert lines[0] == f"run {rid} changes 7 files:"
    flagged = sorted(line.split()[2] for line in lines[1:8] if line.startswith("  ! "))
    assert flagged == sorted([".pylintrc", "Directory.Build.props", "Package.swift",
                              "mix.exs", "gulpfile.js"])
    assert "    A  Dockerfile" in lines and "    A  src/app.py" in lines
    assert lines[8] == (f"warning: 5 of them would run on this machine or make a tool run "
                        f"something (marked !); read them with `git iterare diff {rid} -- "
                        "PATH`")
    assert not (repo / "gulpfile.js").exists()
    merged = iterare("merge", "--yes", rid, cwd=repo)
    assert merged.returncode == 0, merged.stderr
    assert (repo / "gulpfile.js").is_file()


def _an_example(pattern: str) -> str:
    """A path the pattern matches, or nearly: wildcards and classes filled in."""
    import re

    body = re.sub(r"\[!?([^]])[^]]*\]", r"\1", pattern.strip("/"))
    return body.replace("**", "a").replace("*", "x").replace("?", "y")


def test_the_answer_is_the_first_matching_rule_for_any_path() -> None:
    # classify answers many paths at once without trying every rule on each; it must give
    # what trying the rules in file order gives, whatever the path.
    stems = [_an_example(rule.pattern) for rule in rules()]
    paths = {p for stem in stems for p in (
        stem, f"deep/er/{stem}", f"{stem}/inside.txt", f"a/{stem}/b/c.md", stem.upper(),
        f"{stem}.bak", f"x{stem}", f"{stem.rsplit('/', 1)[0]}/other")}
    paths |= {"src/app.py", "README.md", "a/b/c/d/e.txt", "x", ".hidden", "dir/"}
    for path in sorted(paths):
        folded = path.casefold()
        first = next((rule.reason for rule in rules() if rule.matches(folded)), None)
        assert classify(path, "100644") == first, path


def test_ten_thousand_changed_files_are_classified_in_well_under_a_second() -> None:
    # merge lists a run's changes only once all are classified: a run that added 10,000
    # files kept it silent for seconds (about half a millisecond a path, rule by rule).
    import time

    rules()  # the data file is read once, not part of the work per path
    paths = [f"vendor/pkg{i % 50}/lib/file{i}.js" for i in range(10_000)]
    started = time.perf_counter()
    assert [classify(p, "100644") for p in paths] == [None] * len(paths)
    assert time.perf_counter() - started < 2.5  # rule by rule took 5.3 s here
