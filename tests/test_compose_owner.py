"""``--docker-compose`` attaches only a network of this checkout's compose project: the
repository names the project (``name:``, ``.env``), so the network's Docker Compose labels
must name this work tree (found by an adversarial test: a repository named another
project's network). Real networks on the real engine; no container is needed."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from git_iterare.errors import UserError
from git_iterare.git import repo as repo_mod
from git_iterare.runner.guard import check_compose_owner
from tests.conftest import git, iterare

pytestmark = pytest.mark.docker

PROJECT_LABEL = "com.docker.compose.project"
DIR_LABEL = "com.docker.compose.project.working_dir"


@pytest.fixture
def networks() -> Iterator[list[str]]:
    """Names of networks the test created; removed afterwards."""
    made: list[str] = []
    yield made
    if made:
        subprocess.run(["docker", "network", "rm", *made], capture_output=True, check=False)


def make_network(made: list[str], name: str, **labels: str) -> None:
    args = [arg for key, value in labels.items() for arg in ("--label", f"{key}={value}")]
    subprocess.run(["docker", "network", "create", *args, name], capture_output=True,
                   check=True)
    made.append(name)


def compose_project(repo: Path, project: str, *, dotenv: bool = False) -> None:
    """A compose file naming ``project`` (in the file, or in ``.env``) and a prompt."""
    if dotenv:
        (repo / "compose.yaml").write_text("services: {}\n")
        (repo / ".env").write_text(f"COMPOSE_PROJECT_NAME={project}\n")
    else:
        (repo / "compose.yaml").write_text(f"name: {project}\nservices: {{}}\n")
    (repo / ".iterare" / "prompts").mkdir(parents=True)
    (repo / ".iterare" / "prompts" / "x.md").write_text("---\nagent: shell\n---\ntrue\n")


def nothing_created(repo: Path) -> None:
    assert git("for-each-ref", "refs/iterare/", "refs/heads/iterare/", cwd=repo).stdout == ""
    assert not (repo / ".iterare" / "worktrees").exists()
    containers = subprocess.run(["docker", "ps", "-aq", "--filter",
                                 f"label=dev.iterare.repo={repo}"],
                                capture_output=True, text=True, check=False).stdout
    assert containers == ""


@pytest.mark.parametrize("dotenv", [False, True])
def test_another_directorys_network_is_refused(repo: Path, tmp_path: Path,
                                               networks: list[str], dotenv: bool) -> None:
    project = f"advcomp{os.getpid()}{int(dotenv)}"
    network = f"{project}_default"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    make_network(networks, network, **{PROJECT_LABEL: project, DIR_LABEL: str(elsewhere)})
    compose_project(repo, project, dotenv=dotenv)
    refused = iterare("execute", "x", "--docker-compose", cwd=repo)
    assert (refused.returncode, refused.stdout) == (2, "")
    assert refused.stderr == (
        f"error: --docker-compose network {network} belongs to the compose project in "
        f"{elsewhere}, not to this checkout ({repo}) (attach a network you choose with "
        f"`--docker-network {network}`)\n")
    nothing_created(repo)


def test_a_network_no_label_places_is_refused(repo: Path, networks: list[str]) -> None:
    """A plain ``docker network create NAME`` (or a compose project with no container
    left) names no directory: refused too."""
    project = f"advcomp{os.getpid()}n"
    network = f"{project}_default"
    make_network(networks, network)
    compose_project(repo, project)
    refused = iterare("execute", "x", "--dc", cwd=repo)
    assert (refused.returncode, refused.stderr) == (2, (
        f"error: --docker-compose network {network}: Docker Compose's labels name no "
        "directory it belongs to, so it may be another project's (attach a network you "
        f"choose with `--docker-network {network}`)\n"))
    nothing_created(repo)


def test_a_container_of_another_directory_makes_it_anothers(
        repo: Path, networks: list[str]) -> None:
    """The network says it is this checkout's, but a container of its compose project was
    started elsewhere (Compose labels containers, not networks, with the directory)."""
    project = f"advcomp{os.getpid()}c"
    network = f"{project}_default"
    make_network(networks, network, **{PROJECT_LABEL: project, DIR_LABEL: str(repo)})
    name = f"{project}_db_1"
    subprocess.run(["docker", "create", "--name", name, "--label", f"{PROJECT_LABEL}={project}",
                    "--label", f"{DIR_LABEL}=/srv/other", "iterare-base:bookworm", "true"],
                   capture_output=True, check=True)
    try:
        with pytest.raises(UserError, match="belongs to the compose project in /srv/other"):
            check_compose_owner(repo_mod.discover(repo), network)
    finally:
        subprocess.run(["docker", "rm", "-f", name], capture_output=True, check=False)


def test_this_checkouts_network_passes(repo: Path, tmp_path: Path,
                                       networks: list[str]) -> None:
    """Labels naming the work tree, a folder inside it, or either through a symlink pass;
    the folder beside it whose name starts the same does not."""
    link = tmp_path / "link"
    link.symlink_to(repo)
    (repo / "deploy").mkdir()
    found = repo_mod.discover(repo)
    pid = os.getpid()
    for n, where in enumerate((repo, repo / "deploy", link, link / "deploy")):
        network = f"itrown{pid}{n}_default"
        make_network(networks, network, **{PROJECT_LABEL: f"itrown{pid}{n}",
                                           DIR_LABEL: str(where)})
        check_compose_owner(found, network)  # no error
    beside = Path(f"{repo}-beside")
    make_network(networks, f"itrown{pid}b_default",
                 **{PROJECT_LABEL: f"itrown{pid}b", DIR_LABEL: str(beside)})
    with pytest.raises(UserError, match="not to this checkout"):
        check_compose_owner(found, f"itrown{pid}b_default")
