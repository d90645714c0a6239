"""``git iterare init`` and ``git iterare install``."""

from __future__ import annotations

import sys

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

import stat
from pathlib import Path

from git_iterare import scaffold
from git_iterare.config import KEYS
from tests.conftest import git, iterare

FILES = ["config.toml", "Dockerfile", "prompts/example.md", ".gitignore"]


def test_init_creates_the_files(repo: Path) -> None:
    result = iterare("init", cwd=repo)
    assert result.returncode == 0, result.stderr
    root = repo / ".iterare"
    assert result.stdout == "".join(f"    created  {root / f}\n" for f in FILES) + (
        "next: edit .iterare/prompts/example.md, then `git iterare execute example`\n")
    assert (root / "Dockerfile").read_text().count("FROM git-iterare:latest\n") == 1
    assert (root / "prompts" / "example.md").read_text() == scaffold.EXAMPLE_PROMPT


def test_generated_config_documents_every_key_and_parses(repo: Path) -> None:
    iterare("init", cwd=repo)
    text = (repo / ".iterare" / "config.toml").read_text()
    assert tomllib.loads(text) == {name.split(".")[0]: {} for name in KEYS}
    for key in KEYS.values():
        assert f"# {key.key} = " in text, key.name
    # Uncommenting every default gives a valid file with the same values.
    uncommented = "\n".join(line[2:] if " = " in line and line.startswith("# ") else line
                            for line in text.splitlines())
    parsed = tomllib.loads(uncommented)
    for key in KEYS.values():
        assert parsed[key.section][key.key] == key.default, key.name
    assert iterare("config", "--list", cwd=repo).stderr == ""
    # every registered agent is named where the file says which agent runs prompts
    from git_iterare.agents import names

    line = next(li for li in text.splitlines() if li.startswith("# Agent that runs prompts"))
    assert all(name in line for name in names()), line


def test_init_is_safe_to_rerun_and_force_overwrites(repo: Path) -> None:
    iterare("init", cwd=repo)
    config = repo / ".iterare" / "config.toml"
    config.write_text('[docker]\nimage = "mine"\n')
    again = iterare("init", cwd=repo)
    assert again.returncode == 0
    assert f"       kept  {config}\n" in again.stdout
    assert config.read_text() == '[docker]\nimage = "mine"\n'
    forced = iterare("init", "--force", cwd=repo)
    assert f"overwritten  {config}\n" in forced.stdout
    assert config.read_text() == scaffold.PROJECT_CONFIG


def test_init_changes_nothing_else_and_hides_run_worktrees(repo: Path) -> None:
    before = git("status", "--porcelain", "--ignored", cwd=repo).stdout
    assert before == ""
    iterare("init", cwd=repo)
    git("add", ".iterare", cwd=repo)
    git("commit", "-qm", "iterare", cwd=repo)
    run = repo / ".iterare" / "worktrees" / "x-12345678"
    run.mkdir(parents=True)
    (run / "file.txt").write_text("work\n")
    assert git("status", "--porcelain", cwd=repo).stdout == ""
    assert git("ls-files", cwd=repo).stdout.splitlines() == [
        ".iterare/.gitignore", ".iterare/Dockerfile", ".iterare/config.toml",
        ".iterare/prompts/example.md", "README.md"]


def test_init_with_path_argument(repo: Path, tmp_path: Path) -> None:
    (repo / "sub").mkdir()
    result = iterare("init", str(repo / "sub"), cwd=tmp_path)
    assert result.returncode == 0
    assert (repo / ".iterare" / "config.toml").is_file()


def test_init_missing_path_exits_2(tmp_path: Path) -> None:
    result = iterare("init", "nope", cwd=tmp_path)
    assert (result.returncode, result.stderr) == (2, "error: nope: no such directory\n")


def test_install_creates_private_global_directory(tmp_path: Path, hermetic_env: Path) -> None:
    result = iterare("install", cwd=tmp_path)
    folder = hermetic_env / ".config" / "iterare"
    assert result.returncode == 0
    assert result.stdout.splitlines()[:2] == [f"    created  {folder}",
                                              f"    created  {folder / 'config.toml'}"]
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert stat.S_IMODE((folder / "config.toml").stat().st_mode) == 0o600
    again = iterare("install", cwd=tmp_path)
    assert again.stdout.splitlines()[:2] == [f"       kept  {folder}",
                                             f"       kept  {folder / 'config.toml'}"]


def test_init_force_repairs_a_broken_project_config(repo: Path) -> None:
    (repo / ".iterare").mkdir()
    config = repo / ".iterare" / "config.toml"
    config.write_text("[docker]\nmemory = \n")
    assert iterare("init", cwd=repo).returncode == 2
    forced = iterare("init", "--force", cwd=repo)
    assert forced.returncode == 0, forced.stderr
    assert config.read_text() == scaffold.PROJECT_CONFIG
    assert iterare("config", "--list", cwd=repo).returncode == 0


def test_example_prompt_starts_from_head_on_any_branch(repo: Path) -> None:
    # A repository whose branch is not `main` (git's own default is still `master`): the
    # prompt `init` writes must run as it is, from HEAD, not from a `main` that is absent.
    from git_iterare.git.repo import discover
    from git_iterare.prompt import load_prompt
    from git_iterare.runner.request import _base_commit

    git("branch", "-m", "main", "master", cwd=repo)
    assert iterare("init", cwd=repo).returncode == 0
    prompt = load_prompt("example", repo / ".iterare" / "prompts", repo)
    head = git("rev-parse", "HEAD", cwd=repo).stdout.strip()
    assert _base_commit(discover(repo), None, prompt) == head
