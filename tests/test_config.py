"""Layered configuration: precedence, origins, bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from git_iterare import config
from git_iterare.errors import UserError
from tests.conftest import git, iterare


def project_config(repo: Path, text: str) -> Path:
    """Write ``.iterare/config.toml`` of ``repo`` and return its path."""
    path = repo / ".iterare" / "config.toml"
    path.parent.mkdir(exist_ok=True)
    path.write_text(text)
    return path


def _origins(repo: Path, *args: str, env: dict[str, str] | None = None) -> dict[str, dict]:
    result = iterare("config", "--list", "--format=json", *args, cwd=repo, env=env)
    assert result.returncode == 0, result.stderr
    data: dict[str, dict] = json.loads(result.stdout)
    return data


def test_layers_apply_in_order(repo: Path, hermetic_env: Path) -> None:
    glob = hermetic_env / ".config" / "iterare"
    glob.mkdir(parents=True)
    (glob / "config.toml").write_text(
        '[docker]\nimage = "global"\nmemory = "1g"\ncpus = 1\npids = 10\n[run]\ntimeout = 5\n')
    legacy = hermetic_env / ".iterare"
    legacy.mkdir()
    (legacy / "config.toml").write_text('[session]\nshell = "/bin/zsh"\n[docker]\npids = 7\n')
    project_config(repo,
        '[docker]\nimage = "project"\nmemory = "2g"\ncpus = 3\n')
    git("config", "iterare.docker.memory", "3g", cwd=repo)
    git("config", "iterare.docker.cpus", "4", cwd=repo)
    data = _origins(repo, env={"ITERARE_DOCKER_CPUS": "5"})
    assert data["session.shell"] == {"value": "/bin/zsh",
                                     "origin": f"file:{legacy / 'config.toml'}"}
    assert data["docker.pids"] == {"value": 10, "origin": f"file:{glob / 'config.toml'}"}
    assert data["run.timeout"]["value"] == 5
    assert data["docker.image"] == {"value": "project",
                                    "origin": f"file:{repo / '.iterare' / 'config.toml'}"}
    assert data["docker.memory"] == {"value": "3g",
                                     "origin": "git:file:.git/config"}
    assert data["docker.cpus"] == {"value": 5.0, "origin": "env:ITERARE_DOCKER_CPUS"}
    assert data["docker.network"] == {"value": "", "origin": "default"}


def test_flags_override_everything() -> None:
    cfg = config.load(None, overrides={"run.timeout": 9}, env={"ITERARE_RUN_TIMEOUT": "3"},
                      git_entries=[])
    assert (cfg["run.timeout"], cfg.origin("run.timeout")) == (9, "flag")


def test_show_origin_text_format(repo: Path) -> None:
    result = iterare("config", "--list", "--show-origin", cwd=repo,
                     env={"ITERARE_FIREWALL_ALLOWED_DOMAINS": "a.example, b.example"})
    assert "env:ITERARE_FIREWALL_ALLOWED_DOMAINS\tfirewall.allowed_domains=a.example,b.example" \
        in result.stdout.splitlines()
    assert "default\tdocker.image=git-iterare:latest" in result.stdout.splitlines()


def test_git_list_values_accumulate_and_accept_dashes(repo: Path) -> None:
    git("config", "--add", "iterare.firewall.allowed-domains", "a.example", cwd=repo)
    git("config", "--add", "iterare.firewall.allowedDomains", "b.example,c.example", cwd=repo)
    result = iterare("config", "firewall.allowed_domains", cwd=repo)
    assert result.stdout == "a.example,b.example,c.example\n"


def test_iterare_keys_keep_working(repo: Path) -> None:
    project_config(repo,
        '[docker]\nimage = "sohonet/iterare-llm:latest"\n[session]\nshell = "/bin/zsh"\n'
        '[claude]\ncredentials_path = "/creds"\n[firewall]\nallowed_domains = ["pypi.org"]\n'
        '[mounts]\nvolumes = ["~/.gitconfig:/home/node/.gitconfig:ro"]\n')
    data = _origins(repo)
    assert data["docker.image"]["value"] == "sohonet/iterare-llm:latest"
    assert data["session.shell"]["value"] == "/bin/zsh"
    assert data["claude.credentials_path"]["value"] == "/creds"
    assert data["firewall.allowed_domains"]["value"] == ["pypi.org"]
    assert data["mounts.volumes"]["value"] == ["~/.gitconfig:/home/node/.gitconfig:ro"]


def test_bad_toml_is_one_line_with_position_and_exit_2(repo: Path) -> None:
    path = project_config(repo, '[docker]\nimage = "a"\nmemory = \n')
    result = iterare("config", "--list", cwd=repo)
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr == f"error: {path}:3:10: Invalid value\n"


def test_unknown_key_is_a_warning_naming_it(repo: Path) -> None:
    path = project_config(repo, '[docker]\nimage_name = "a"\n[notes]\ntext = "x"\n')
    result = iterare("config", "docker.image", cwd=repo)
    assert result.returncode == 0
    assert result.stderr == (
        f"warning: {path}: unknown key docker.image_name (did you mean docker.image?)\n"
        f"warning: {path}: unknown key notes.text\n")


def test_unknown_git_config_key_is_a_warning(repo: Path) -> None:
    git("config", "iterare.docker.imagename", "x", cwd=repo)
    result = iterare("config", "docker.image", cwd=repo)
    assert result.stderr == "warning: git config: unknown key iterare.docker.imagename\n"


MISSPELT = ("changes what runs, so a misspelt one stops the command: fix the key")


@pytest.mark.parametrize(("toml", "key", "meant"), [
    ('[run]\nagnet = "shell"\n', "run.agnet", "run.agent"),
    ('[docker]\nimmage = "a"\n', "docker.immage", "docker.image"),
    ("[run]\nmax-budget-usd = 1\n", "run.max-budget-usd", "run.max_budget_usd"),
    ('[rnu]\nagent = "shell"\n', "rnu.agent", "run.agent"),
    ('agent = "shell"\n', "agent", "run.agent"),  # a key outside its [section]
])
def test_a_misspelt_key_stops_the_command(repo: Path, toml: str, key: str, meant: str) -> None:
    """As in a prompt's frontmatter: ``run.agnet`` as a warning ran the default agent."""
    path = project_config(repo, toml)
    result = iterare("config", "run.agent", cwd=repo)
    assert (result.returncode, result.stdout, result.stderr) == (
        2, "", f"error: {path}: unknown key {key}; did you mean {meant}? ({meant} {MISSPELT})\n")


def test_a_misspelt_key_in_git_config_or_the_environment_stops_the_command(
        repo: Path) -> None:
    git("config", "iterare.run.agnet", "shell", cwd=repo)
    from_git = iterare("config", "run.agent", cwd=repo)
    assert (from_git.returncode, from_git.stderr) == (
        2, f"error: git config (file:.git/config): unknown key iterare.run.agnet; did you "
           f"mean iterare.run.agent? (iterare.run.agent {MISSPELT})\n")
    git("config", "--unset", "iterare.run.agnet", cwd=repo)
    from_env = iterare("config", "run.agent", cwd=repo, env={"ITERARE_RUN_AGNET": "shell"})
    assert (from_env.returncode, from_env.stderr) == (
        2, "error: environment: unknown key ITERARE_RUN_AGNET; did you mean "
           f"ITERARE_RUN_AGENT? (ITERARE_RUN_AGENT {MISSPELT})\n")
    # ITERARE_* variables of no config section are not config.
    other = iterare("config", "run.agent", cwd=repo, env={"ITERARE_NO_MAN": "1"})
    assert (other.returncode, other.stdout, other.stderr) == (0, "claude\n", "")


@pytest.mark.parametrize(
    ("toml", "message"),
    [
        ('[docker]\ncpus = "many"\n', "docker.cpus must be a number, got 'many'"),
        ('[firewall]\nallowed_domains = "pypi.org"\n',
         "firewall.allowed_domains must be a list of strings, got 'pypi.org'"),
        ("[docker]\nimage = 3\n", "docker.image must be a string, got 3"),
        ("[run]\ntimeout = true\n", "run.timeout must be an integer, got true"),  # TOML spelling
        ("[run]\ntimeout = -1\n", "run.timeout must be a non-negative integer, got -1"),
        ("[docker]\npids = -1\n", "docker.pids must be a non-negative integer, got -1"),
        ("[docker]\ncpus = -0.5\n", "docker.cpus must be a non-negative number, got -0.5"),
    ],
)
def test_wrong_type_names_key_and_expected_type(repo: Path, toml: str, message: str) -> None:
    path = project_config(repo, toml)
    result = iterare("config", "--list", cwd=repo)
    assert (result.returncode, result.stderr) == (2, f"error: {path}: {message}\n")


def test_wrong_type_from_environment(repo: Path) -> None:
    result = iterare("config", "run.timeout", cwd=repo, env={"ITERARE_RUN_TIMEOUT": "soon"})
    assert (result.returncode, result.stderr) == (
        2, "error: environment ITERARE_RUN_TIMEOUT: run.timeout must be an integer, got "
           "'soon'\n")


def test_negative_from_git_config(repo: Path) -> None:
    git("config", "iterare.docker.cpus", "-2", cwd=repo)
    result = iterare("config", "docker.cpus", cwd=repo)
    assert result.returncode == 2
    assert result.stderr.endswith(": docker.cpus must be a non-negative number, got '-2'\n")


def test_unknown_key_argument(repo: Path) -> None:
    result = iterare("config", "docker.imag", cwd=repo)
    assert (result.returncode, result.stderr) == (
        2, "error: unknown key 'docker.imag' (did you mean docker.image?)\n")


def test_convert_rejects_booleans_as_numbers() -> None:
    with pytest.raises(UserError, match=r"docker\.pids must be an integer"):
        config._convert(config.KEYS["docker.pids"], True, "x")

