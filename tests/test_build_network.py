"""A project image's build: its RUN steps reach the internet but not the Docker host
(git_iterare.sandbox.buildnet), and what the engine would fetch itself from the host's
network (ADD of a URL, a FROM image it lacks) is refused (git_iterare.sandbox.buildfile)."""

from __future__ import annotations

import io
import re
import subprocess
from pathlib import Path

import pytest

from git_iterare.errors import UserError
from git_iterare.sandbox import buildfile
from tests.conftest import git, iterare
from tests.sandbox_fixtures import (  # noqa: F401  (fixtures)
    BASE_IMAGE,
    CA_BUNDLE,
    NET,
    host_listener,
    sandbox_image,
    test_network,
)

WHERE = ".iterare/Dockerfile"


def _check(text: str, present: tuple[str, ...] = ("git-iterare:latest",)
           ) -> buildfile.BuildSteps:
    return buildfile.check(text, WHERE, lambda image: image in present)


@pytest.mark.parametrize("text", [
    "FROM git-iterare:latest\nADD http://127.0.0.1:8080/key /key\n",
    "FROM git-iterare:latest\nadd --chown=1:1 https://example.com/a.tgz /a\n",
    'FROM git-iterare:latest\nADD ["http://192.0.2.2/a", "/a"]\n',
    "FROM git-iterare:latest\nONBUILD ADD http://127.0.0.1/a /a\n",
    "FROM git-iterare:latest\nADD git@github.com:o/r.git /r\n",
    # Read as the engine reads it: an escape directive and a continuation in the keyword.
    "# escape=`\nFROM git-iterare:latest\nAD`\nD http://127.0.0.1/a /a\n",
    "FROM git-iterare:latest\nA\\\nDD http://127.0.0.1/a /a\n",
])
def test_add_of_a_url_is_refused(text: str) -> None:
    with pytest.raises(UserError) as refused:
        _check(text)
    assert "would be downloaded by the Docker engine itself" in str(refused.value)
    assert str(refused.value).startswith(f"{WHERE}:")


def test_add_and_copy_of_local_files_pass() -> None:
    steps = _check("FROM git-iterare:latest\nADD a.tgz /a\nCOPY b /b\n")
    assert steps == buildfile.BuildSteps(runs=False, images=("git-iterare:latest",))


def test_run_steps_are_found() -> None:
    assert _check("FROM git-iterare:latest\nRUN make\n").runs
    assert not _check("FROM git-iterare:latest\nENV A=1\n").runs


def test_a_from_image_the_engine_lacks_is_refused() -> None:
    with pytest.raises(UserError) as refused:
        _check("FROM 127.0.0.1:5000/evil:1\n")
    assert str(refused.value) == (
        f"{WHERE}:1: FROM 127.0.0.1:5000/evil:1: the Docker engine does not have this "
        "image, and git iterare does not let a project build pull one (the engine would "
        "fetch it from its host's network)")


def test_from_build_arguments_and_stages() -> None:
    steps = _check("ARG IMAGE=git-iterare:latest\nFROM ${IMAGE} AS base\nRUN make\n"
                   "FROM base\nFROM scratch\n")
    assert steps == buildfile.BuildSteps(runs=True, images=("git-iterare:latest",))
    with pytest.raises(UserError, match=r"\$IMAGE has no default"):
        _check("ARG IMAGE\nFROM $IMAGE\n")
    with pytest.raises(UserError, match="does not have this image"):
        _check("ARG IMAGE=127.0.0.1:5000/evil\nFROM $IMAGE\n")


@pytest.mark.parametrize(("text", "says"), [
    # The engine pulls a COPY --from image it lacks, as it does a FROM's.
    ("FROM git-iterare:latest\nCOPY --from=127.0.0.1:5999/evil:1 /x /x\n",
     "2: COPY --from=127.0.0.1:5999/evil:1: the Docker engine does not have this image"),
    ("FROM git-iterare:latest\nONBUILD COPY --from=127.0.0.1:5999/evil:1 /x /x\n",
     "2: COPY --from=127.0.0.1:5999/evil:1: the Docker engine does not have this image"),
    ("FROM git-iterare:latest\nCOPY --from=$X /x /x\n", "2: COPY --from=$X: a variable"),
    # ${NAME:+word} is word when NAME has a value: not the argument's default.
    ("ARG I=git-iterare:latest\nFROM ${I:+127.0.0.1:5999/evil:1}\n",
     "2: FROM ${I:+127.0.0.1:5999/evil:1}: ${I:+127.0.0.1:5999/evil:1} may stand for"),
    # The engine expands an ADD source, then downloads the URL it names.
    ("FROM git-iterare:latest\nARG U=http://127.0.0.1:5999/key\nADD $U /key\n",
     "3: ADD $U: a variable in an ADD source may name a URL"),
    ("FROM git-iterare:latest\nENV U=http://127.0.0.1:5999/key\nONBUILD ADD ${U} /k\n",
     "3: ADD ${U}: a variable in an ADD source may name a URL"),
])
def test_what_the_engine_would_fetch_through_copy_from_or_a_variable_is_refused(
        text: str, says: str) -> None:
    with pytest.raises(UserError) as refused:
        _check(text)
    assert str(refused.value).startswith(f"{WHERE}:{says}"), str(refused.value)


def test_copy_from_stages_and_present_images_pass() -> None:
    steps = _check("ARG I=git-iterare:latest\nFROM ${I:-other} AS a\nFROM ${I}\n"
                   "COPY --from=a /x /y\nCOPY --from=0 /x /y\n"
                   "COPY --from=git-iterare:latest /x /y\n")
    assert steps.images == ("git-iterare:latest", "git-iterare:latest")


def test_a_dockerfile_that_cannot_be_parsed_is_one_line() -> None:
    with pytest.raises(UserError, match="cannot be parsed as a Dockerfile"):
        _check("# escape=x\nFROM git-iterare:latest\n")


def _probe_lines(text: str) -> list[str]:
    """The lines a build step printed that begin with ``probe:`` (the engine colours
    what steps print on stderr)."""
    plain = re.sub(r"\x1b\[[0-9;]*m", "", text)
    return [line.strip() for line in plain.splitlines() if line.strip().startswith("probe:")]


def _connect(address: str, port: int, what: str) -> str:
    """A RUN step that connects to ``address``:``port`` (bash's /dev/tcp; /bin/sh may be
    dash) and says whether it got there."""
    return (f"RUN bash -c 'if timeout 10 bash -c \"exec 3<>/dev/tcp/{address}/{port}\"; "
            f"then echo probe: {what} reached; else echo probe: {what} refused; fi'\n")


@pytest.mark.docker
def test_build_steps_reach_the_internet_but_not_the_docker_host(
        sandbox_image: str, test_network: str, host_listener: int) -> None:  # noqa: F811
    from git_iterare.sandbox.buildnet import build_network
    from git_iterare.sandbox.engine_client import client

    # The build sidecar on the test's internet, where 198.18.N.1 is the Docker host.
    dockerfile = (
        f"FROM {sandbox_image}\n"
        + _connect(NET["ALLOWED_V4"], 80, "internet")
        + _connect(NET["GATEWAY_V4"], host_listener, "host"))
    out: list[str] = []
    with build_network(sandbox_image, "the test's build", network=test_network) as mode:
        assert mode.startswith("container:")
        for chunk in client().api.build(fileobj=io.BytesIO(dockerfile.encode()),
                                        network_mode=mode, nocache=True, rm=True,
                                        forcerm=True, decode=True):
            out.append(str(chunk.get("stream", "")))
            if "aux" in chunk:
                built = str(chunk["aux"]["ID"])
    subprocess.run(["docker", "rmi", "-f", built], capture_output=True, check=False)
    assert _probe_lines("".join(out)) == [
        "probe: internet reached", "probe: host refused"], "".join(out)
    # The sidecar is gone with the build.
    assert subprocess.run(["docker", "ps", "-aq", "--filter", f"id={mode[10:]}"],
                          capture_output=True, text=True, check=True).stdout == ""


@pytest.mark.docker
def test_a_project_build_cannot_reach_the_docker_host(
        repo: Path, sandbox_image: str, host_listener: int) -> None:  # noqa: F811
    """On the engine's default bridge, the Docker host's addresses (here the test
    network's gateway) answer; a project's RUN step does not get there."""
    (repo / ".iterare").mkdir()
    (repo / ".iterare" / "Dockerfile").write_text(
        f"FROM {sandbox_image}\n" + _connect(NET["GATEWAY_V4"], host_listener, "host"))
    git("add", ".", cwd=repo)
    env = {"ITERARE_DOCKER_IMAGE": sandbox_image}
    assert iterare("trust", "--yes", cwd=repo, env=env).returncode == 0
    built = iterare("--verbose", "image", "build", "--base", BASE_IMAGE, "--ca-bundle",
                    CA_BUNDLE, "--tag", sandbox_image, cwd=repo, env=env)
    project = [line.split()[0] for line in built.stdout.splitlines()[1:]]
    subprocess.run(["docker", "rmi", "-f", *project], capture_output=True, check=False)
    assert built.returncode == 0, built.stderr
    assert _probe_lines(built.stderr) == ["probe: host refused"], built.stderr
    assert "(its RUN steps reach the internet, not the Docker host)" in built.stderr


@pytest.mark.docker
def test_add_of_a_url_is_refused_before_anything_is_built(
        repo: Path, sandbox_image: str) -> None:  # noqa: F811
    (repo / ".iterare").mkdir()
    (repo / ".iterare" / "Dockerfile").write_text(
        f"FROM {sandbox_image}\nADD http://127.0.0.1:9/key /key\n")
    git("add", ".", cwd=repo)
    env = {"ITERARE_DOCKER_IMAGE": sandbox_image}
    assert iterare("trust", "--yes", cwd=repo, env=env).returncode == 0
    refused = iterare("image", "build", "--base", BASE_IMAGE, "--ca-bundle", CA_BUNDLE,
                      "--tag", sandbox_image, cwd=repo, env=env)
    assert refused.returncode == 2
    assert refused.stderr.splitlines()[-1] == (
        f"error: {repo / '.iterare' / 'Dockerfile'}:2: ADD http://127.0.0.1:9/key would be "
        "downloaded by the Docker engine itself, from its host's network, which a build "
        "may not reach (download it in a RUN step (curl, wget) instead)")
    assert "building git-iterare:project-" not in refused.stderr
