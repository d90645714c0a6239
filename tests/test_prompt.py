"""Prompt files: lookup, frontmatter (iterare's and ours), errors with file:line."""

from __future__ import annotations

from pathlib import Path

import pytest

from git_iterare.errors import UserError
from git_iterare.prompt import Prompt, env_name_problem, load_prompt, name_problem, parse


@pytest.fixture
def prompts(tmp_path: Path) -> Path:
    folder = tmp_path / ".iterare" / "prompts"
    folder.mkdir(parents=True)
    return folder


def write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.write_text(text)
    return path


def error_of(text: str, folder: Path, name: str = "task.md") -> str:
    path = write(folder, name, text)
    with pytest.raises(UserError) as info:
        load_prompt(name, folder, folder)
    return info.value.render().replace(str(path), "FILE")


# iterare's own test files (sohonetlabs/iterare-llm tests/test_files/prompt_*.md) load as
# they did there, except broken YAML, which iterare ignored and we refuse.
def test_iterare_prompt_with_frontmatter(prompts: Path) -> None:
    text = "---\nworkspace: my-task\nbranch: main\n---\n\nDo the thing.\n"
    path = write(prompts, "my-task.md", text)
    assert load_prompt("my-task", prompts, prompts.parent) == Prompt(
        name="my-task", path=path, body="Do the thing.\n", given_run_name="my-task", branch="main")


def test_iterare_empty_frontmatter(prompts: Path) -> None:
    write(prompts, "e.md", "---\n---\n\nContent after empty frontmatter.\n")
    prompt = load_prompt("e.md", prompts, prompts.parent)
    assert (prompt.body, prompt.given_run_name, prompt.run_name) == (
        "Content after empty frontmatter.\n", None, "e")


def test_no_frontmatter_keeps_text(prompts: Path) -> None:
    write(prompts, "plain.md", "# Title\n\n---\n\nA rule is not frontmatter here.\n")
    assert load_prompt("plain", prompts, prompts).body == (
        "# Title\n\n---\n\nA rule is not frontmatter here.\n")


def test_iterare_bad_frontmatter_is_an_error(prompts: Path) -> None:
    text = "---\nkey: [unclosed\n---\n\nContent after bad frontmatter.\n"
    assert error_of(text, prompts) == (
        "FILE:3: bad YAML in frontmatter: expected ',' or ']', but got '<stream end>'")


def test_our_keys(prompts: Path) -> None:
    write(prompts, "t.md",
          "---\nagent: shell\ntimeout: 90\nenv: [NPM_TOKEN, HOME_2]\n---\necho hi\n")
    prompt = load_prompt("t", prompts, prompts)
    assert (prompt.agent, prompt.timeout, prompt.env, prompt.body) == (
        "shell", 90, ("NPM_TOKEN", "HOME_2"), "echo hi\n")


def test_path_relative_to_cwd(tmp_path: Path, prompts: Path) -> None:
    (tmp_path / "sub").mkdir()
    path = write(tmp_path / "sub", "x.md", "hello\n")
    assert load_prompt("sub/x.md", prompts, tmp_path).path == path
    assert load_prompt(str(path), prompts, Path("/")).path == path


@pytest.mark.parametrize(("text", "expected"), [
    ("---\ntimeout: soon\n---\nx\n", "FILE:2: timeout must be a whole number of seconds "
                                     "(0: no limit), got 'soon'"),
    ("---\nbranch: main\ntimeout: true\n---\nx\n",
     "FILE:3: timeout must be a whole number of seconds (0: no limit), got true"),
    ("---\nenv: [GOOD, 9BAD]\n---\nx\n",
     "FILE:2: env '9BAD' is not a variable name "
     "(letters, digits and _, not starting with a digit)"),
    ("---\nenv: {A: 1}\n---\nx\n",
     "FILE:2: env must be a list of variable names, got {'A': 1}"),
    ("---\nworkspace: ../up\n---\nx\n", "FILE:2: workspace '../up': it starts with '.'"),
    ("---\nworkspace: -rf\n---\nx\n", "FILE:2: workspace '-rf': it starts with '-'"),
    ("---\nbranch: 'a b'\n---\nx\n", "FILE:2: branch 'a b' is not a valid branch name"),
    ("---\nagent: 3\n---\nx\n", "FILE:2: agent must be a string, got 3"),
    ("---\nworkspace: a\n\nbody without end\n",
     "FILE:1: frontmatter is not closed by a '---' line"),
    ("---\n- a\n- b\n---\nx\n", "FILE:2: frontmatter must be a mapping of key: value"),
    ("---\nworkspace: a\n---\n\n  \n", "FILE:4: the prompt is empty "
                                       "(write the task after the frontmatter)"),
    ("", "FILE:1: the prompt is empty (write the task after the frontmatter)"),
])
def test_bad_frontmatter(prompts: Path, text: str, expected: str) -> None:
    assert error_of(text, prompts) == expected


def test_unknown_key_is_a_warning(prompts: Path) -> None:
    path = write(prompts, "w.md", "---\nbranch: main\nworksapce: a\nnotes: n\n---\nx\n")
    assert load_prompt("w", prompts, prompts).warnings == (
        f"{path}:3: unknown key 'worksapce' (did you mean workspace?)",
        f"{path}:4: unknown key 'notes'")


@pytest.mark.parametrize(("line", "key", "meant"), [
    ("agnet: shell", "agnet", "agent"),       # two letters swapped
    ("Agent: shell", "Agent", "agent"),       # case
    ("agen: shell", "agen", "agent"),         # one dropped
    ("brnch: main", "brnch", "branch"),
    ("timout: 5", "timout", "timeout"),
    ("envs: [A]", "envs", "env"),             # one added
    ("max-budget-usd: 1", "max-budget-usd", "max_budget_usd"),
    ("max_turn: 3", "max_turn", "max_turns"),
])
def test_a_misspelt_key_that_changes_what_runs_stops_the_run(
        prompts: Path, line: str, key: str, meant: str) -> None:
    """``agnet: shell`` as a warning ran the default agent (Claude, with the user's
    credentials and money): a key one edit away from one that decides what runs is an
    error naming the key it most likely is."""
    path = write(prompts, "t.md", f"---\nworkspace: w\n{line}\n---\nx\n")
    with pytest.raises(UserError) as info:
        load_prompt("t", prompts, prompts)
    assert info.value.render() == (
        f"{path}:3: unknown key {key!r}; did you mean {meant!r}? ({meant} changes what "
        "runs, so a misspelt one stops the run: fix the frontmatter)")


def test_missing_prompt_lists_available(prompts: Path) -> None:
    write(prompts, "b.md", "x")
    write(prompts, "a.md", "x")
    with pytest.raises(UserError) as info:
        load_prompt("nope", prompts, prompts.parent)
    assert info.value.render() == ("no prompt 'nope' (available: a, b) "
                                   "(create .iterare/prompts/<name>.md or give a file path)")


def test_missing_prompt_without_folder(tmp_path: Path) -> None:
    with pytest.raises(UserError, match=r"available: none in .*/missing"):
        load_prompt("x", tmp_path / "missing", tmp_path)


def test_bad_file_name(tmp_path: Path, prompts: Path) -> None:
    path = write(tmp_path, "has space.md", "x")
    with pytest.raises(UserError) as info:
        load_prompt(str(path), prompts, tmp_path)
    assert info.value.render() == (
        f"{path}: prompt name 'has space': it contains whitespace (rename the file)")


def test_not_utf8(prompts: Path) -> None:
    path = prompts / "bin.md"
    path.write_bytes(b"\xff\xfe")
    with pytest.raises(UserError, match=r"bin.md: not UTF-8 text"):
        load_prompt("bin", prompts, prompts)


@pytest.mark.parametrize(("name", "problem"), [
    ("ok-name_1.2", None), ("", "it is empty"), ("a/b", "it contains '/'"),
    ("a..b", "it contains '..'"), ("a b", "it contains whitespace"),
    ("a\x01b", "it contains a control character"),
    ("-x", "it starts with '-'"), ("x.lock", "it ends with '.' or '.lock'"),
])
def test_name_problem(name: str, problem: str | None) -> None:
    assert name_problem(name) == problem


def test_env_name_problem() -> None:
    assert env_name_problem("_A1") is None
    assert env_name_problem("A-B") is not None
    assert env_name_problem("A\nB") is not None


def test_crlf_frontmatter() -> None:
    prompt = parse("---\r\nbranch: dev\r\n---\r\nbody\r\n", Path("/p/x.md"))
    assert (prompt.branch, prompt.body) == ("dev", "body\n")


@pytest.mark.parametrize("text", [
    "\ufeff---\r\nagent: shell\r\n---\r\n\r\necho a > c.txt\r\necho b\r\n",
    "---\ragent: shell\r---\r\recho a > c.txt\recho b\r",
    "---\nagent: shell\n---\n\necho a > c.txt\r\necho b\n",
])
def test_line_endings_are_normalized_for_every_agent(text: str) -> None:
    prompt = parse(text, Path("/p/x.md"))
    assert (prompt.agent, prompt.body) == ("shell", "echo a > c.txt\necho b\n")


def test_load_prompt_normalizes_a_crlf_file(tmp_path: Path) -> None:
    (tmp_path / "w.md").write_bytes(b"---\r\ntimeout: 5\r\n---\r\ntouch c.txt\r\n")
    prompt = load_prompt("w", tmp_path, tmp_path)
    assert (prompt.timeout, prompt.body) == (5, "touch c.txt\n")


@pytest.mark.parametrize("value, expected", [
    ("123", "123"), ("1.5", "1.5"), ("2024-01-01", "2024-01-01"), ("'007'", "007")])
def test_scalar_workspace_and_branch_taken_as_text(prompts: Path, value: str,
                                                   expected: str) -> None:
    # iterare (iterare-llm 0.2.3) named the run after `workspace: 123` as "123-<hash>".
    write(prompts, "task.md", f"---\nworkspace: {value}\nbranch: {value}\n---\nx\n")
    prompt = load_prompt("task", prompts, prompts)
    assert (prompt.given_run_name, prompt.run_name, prompt.branch) == (expected, expected, expected)


@pytest.mark.parametrize("value, shown", [("[a]", "['a']"), ("true", "True"),
                                          ("{a: 1}", "{'a': 1}")])
def test_non_scalar_workspace_still_refused(prompts: Path, value: str, shown: str) -> None:
    assert error_of(f"---\nworkspace: {value}\n---\nx\n", prompts) == (
        f"FILE:2: workspace must be a string, got {shown}")


def test_prompts_are_read_only_from_regular_files(tmp_path: Path) -> None:
    """A repository could point a prompt at any file of the user's (found by an
    adversarial test: /proc/self/environ ended up in the run record)."""
    import os

    prompts = tmp_path / ".iterare" / "prompts"
    prompts.mkdir(parents=True)
    secret = tmp_path / "secret"
    secret.write_text("TOKEN=1\n")
    (prompts / "env.md").symlink_to(secret)
    with pytest.raises(UserError, match=r"env\.md is a symlink; git iterare reads prompts "
                                        "only from regular files"):
        load_prompt("env", prompts, tmp_path)
    with pytest.raises(UserError, match="is a symlink"):
        load_prompt(str(prompts / "env.md"), prompts, tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "x.md").write_text("x\n")
    linked = tmp_path / "linked" / ".iterare"
    linked.mkdir(parents=True)
    (linked / "prompts").symlink_to(elsewhere)
    with pytest.raises(UserError, match="prompts is a symlink"):
        load_prompt("x", linked / "prompts", tmp_path)
    os.mkfifo(prompts / "fifo.md")
    with pytest.raises(UserError, match="no prompt 'fifo'"):  # not a regular file
        load_prompt("fifo", prompts, tmp_path)
    (prompts / "big.md").write_bytes(b"x" * (1024 * 1024 + 1))
    with pytest.raises(UserError, match="larger than 1024 KiB"):
        load_prompt("big", prompts, tmp_path)


@pytest.mark.parametrize("text", [
    "agent: shell\n", "agent: claude\nworkspace: fix-bug\nbranch: feature/x.y\n",
    "agent:   codex  \n\nmodel: gpt-4.1\n", "agent: Yes\n", "agent: off\n", "agent: NULL\n",
    "agent: y\n", "agent: e5\n", "agent: inf\n", "branch: v1.2-rc\n", "agent: shell # c\n",
    "timeout: 300\n", "agent: 'shell'\n", "agent:shell\n", "agent:\tshell\n", "agent: a:b\n",
    "agent: shell\nagent: codex\n", "Agent: shell\n", "agent: [shell]\n", "agent: ~\n",
    "agent: shell\n  more\n", "agent: <<\n", "env: x\n", "agent: !!str x\n", "",
])
def test_plain_frontmatter_reads_as_yaml_does(text: str) -> None:
    """The YAML-free reading of ``key: word`` frontmatter gives what YAML gives, lines
    included, or leaves the text to YAML."""
    import yaml

    from git_iterare.prompt import _parse_yaml, _plain_frontmatter

    plain = _plain_frontmatter(text, 2)
    if plain is None:
        return  # YAML reads it (every other test of this file covers that path)
    assert plain[0] == yaml.safe_load(text)
    node = yaml.compose(text, Loader=yaml.SafeLoader)
    assert isinstance(node, yaml.MappingNode)
    assert plain[1] == {k.value: 2 + k.start_mark.line for k, _ in node.value}
    assert _parse_yaml(text, 2, "p") == plain


def test_plain_frontmatter_is_taken_for_the_common_case() -> None:
    from git_iterare.prompt import _plain_frontmatter

    assert _plain_frontmatter("agent: shell\nworkspace: w\n", 2) == (
        {"agent": "shell", "workspace": "w"}, {"agent": 2, "workspace": 3})
    for text in ("agent: yes\n", "timeout: 300\n", "agent: shell # note\n", "a: 'b'\n"):
        assert _plain_frontmatter(text, 2) is None, text


def test_a_prompt_path_through_a_symlinked_folder_is_refused(tmp_path: Path) -> None:
    """`git iterare execute .iterare/tasks/key.md` where the repository made
    `.iterare/tasks` a symlink to a folder of the user's (found by a hostile repository
    test: the folder of the file was not checked)."""
    home = tmp_path / "home"
    home.mkdir()
    (home / "key.md").write_text("SECRET\n")
    top = tmp_path / "repo"
    (top / ".iterare").mkdir(parents=True)
    (top / ".iterare" / "tasks").symlink_to(home)
    with pytest.raises(UserError, match=r"\.iterare/tasks is a symlink"):
        load_prompt(".iterare/tasks/key.md", top / ".iterare" / "prompts", top)
    # An absolute path is the user's own choice of folders.
    assert load_prompt(str(home / "key.md"), top / ".iterare" / "prompts", top).body == (
        "SECRET\n")
