"""``git iterare image build|status`` against the real engine."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.conftest import git, iterare
from tests.sandbox_fixtures import BASE_IMAGE, CA_BUNDLE, sandbox_image  # noqa: F401

pytestmark = [pytest.mark.docker]


def _rmi(*names: str) -> None:
    subprocess.run(["docker", "rmi", *names], capture_output=True, check=False)


def _images(reference: str) -> list[str]:
    out = subprocess.run(["docker", "images", "--format", "{{.Repository}}:{{.Tag}}",
                          reference], capture_output=True, text=True, check=True).stdout
    return sorted(out.split())


def test_status_of_a_missing_image(tmp_path: Path) -> None:
    result = iterare("image", "status", cwd=tmp_path,
                     env={"ITERARE_DOCKER_IMAGE": "itr-sandbox-missing:1"})
    assert result.returncode == 1
    # The engine it asked comes first (DOCKER_HOST, a context, or the default socket).
    assert result.stdout == ("engine: unix:///var/run/docker.sock\n"
                             "image: itr-sandbox-missing:1\npresent: no\n")
    assert result.stderr == ("error: image itr-sandbox-missing:1 is missing "
                             "(run `git iterare image build`)\n")


def test_status_of_the_image(tmp_path: Path, sandbox_image: str) -> None:  # noqa: F811
    env = {"ITERARE_DOCKER_IMAGE": sandbox_image}
    result = iterare("image", "status", "--format", "json", cwd=tmp_path, env=env)
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert sorted(data) == ["created", "engine", "id", "labels", "name", "present"]
    assert data["present"] is True and data["id"].startswith("sha256:")
    assert data["labels"]["dev.iterare.image"] == "sandbox"
    assert {"dev.iterare.base", "dev.iterare.claude-version",
            "dev.iterare.context-hash"} <= set(data["labels"])
    text = iterare("image", "status", cwd=tmp_path, env=env)
    assert text.stdout.splitlines()[:4] == ["engine: unix:///var/run/docker.sock",
                                            f"image: {sandbox_image}", "present: yes",
                                            f"id: {data['id']}"]


def test_build_streams_steps_and_keeps_the_ca_out(tmp_path: Path,
                                                  sandbox_image: str) -> None:  # noqa: F811
    # Built from the same context as the session image, so the cache makes it quick.
    tag = f"itr-sandbox-build-{os.getpid()}:test"
    try:
        result = iterare("image", "build", "--base", BASE_IMAGE, "--ca-bundle", CA_BUNDLE,
                         "--tag", tag, cwd=tmp_path)
        assert result.returncode == 0, result.stderr
        steps = [line for line in result.stderr.splitlines() if line.startswith("Step ")]
        assert steps[0] == "Step 1/27: ARG BASE_IMAGE=node:20-bookworm-slim"
        assert steps[-1].startswith("Step 27/27: LABEL dev.iterare.")
        assert result.stdout.startswith(f"{tag} sha256:")
        history = subprocess.run(["docker", "history", "--no-trunc", "--format",
                                  "{{.CreatedBy}}", tag], capture_output=True, text=True,
                                 check=True).stdout
        assert "ca.pem" not in history
        assert "COPY dir:" in history or "COPY --from" in history or "/opt/claude" in history
        probe = subprocess.run(
            ["docker", "run", "--rm", "--entrypoint", "sh", tag, "-c",
             "ls /tmp /usr/local/share/ca-certificates; claude --version; id agent; "
             "command -v sudo || echo no-sudo"],
            capture_output=True, text=True, check=True).stdout.splitlines()
        assert probe[0] == "/tmp:" and probe[2] == "/usr/local/share/ca-certificates:"
        assert probe[-3].endswith("(Claude Code)")
        assert probe[-2].startswith("uid=1000(agent) gid=1000(agent)")
        assert probe[-1] == "no-sudo"
    finally:
        _rmi(tag)


def test_project_dockerfile_built_on_top_when_it_changes(repo: Path,
                                                         sandbox_image: str) -> None:  # noqa: F811
    env = {"ITERARE_DOCKER_IMAGE": sandbox_image, "ITERARE_DOCKER_BASE_IMAGE": BASE_IMAGE}
    (repo / ".iterare").mkdir()
    dockerfile = repo / ".iterare" / "Dockerfile"
    dockerfile.write_text(f"FROM {sandbox_image}\nRUN echo one > /etc/project-marker\n")
    git("add", ".", cwd=repo)
    refused = iterare("image", "build", "--tag", sandbox_image, cwd=repo, env=env)
    assert (refused.returncode, refused.stderr) == (
        2, "error: this repository asks for settings you have not approved "
           "(Dockerfile); review them with `git iterare trust`\n")
    assert iterare("trust", "--yes", cwd=repo).returncode == 0
    repository = sandbox_image.rsplit(":", 1)[0]
    before = set(_images(f"{repository}:project-*"))
    made: list[str] = []
    try:
        first = iterare("image", "build", "--base", BASE_IMAGE, "--ca-bundle", CA_BUNDLE,
                        "--tag", sandbox_image, cwd=repo, env=env)
        assert first.returncode == 0, first.stderr
        lines = first.stdout.splitlines()
        assert len(lines) == 2 and lines[1].startswith(f"{repository}:project-")
        made.append(lines[1].split()[0])
        assert f"building {made[0]} from {dockerfile}" in first.stderr
        # Unchanged: found by its content hash, not rebuilt.
        again = iterare("image", "build", "--base", BASE_IMAGE, "--tag", sandbox_image,
                        "--ca-bundle", CA_BUNDLE, cwd=repo, env=env)
        assert again.stdout.splitlines()[1] == lines[1]
        assert "building " + made[0] not in again.stderr
        dockerfile.write_text(f"FROM {sandbox_image}\nRUN echo two > /etc/project-marker\n")
        assert iterare("trust", "--yes", cwd=repo).returncode == 0
        changed = iterare("image", "build", "--base", BASE_IMAGE, "--tag", sandbox_image,
                          "--ca-bundle", CA_BUNDLE, cwd=repo, env=env)
        made.append(changed.stdout.splitlines()[1].split()[0])
        assert made[1] != made[0]
        marker = subprocess.run(["docker", "run", "--rm", "--entrypoint", "cat", made[1],
                                 "/etc/project-marker"], capture_output=True, text=True,
                                check=True).stdout
        assert marker == "two\n"
        assert set(_images(f"{repository}:project-*")) - before == set(made)
    finally:
        _rmi(*made)


def test_a_build_step_shows_its_output(repo: Path, sandbox_image: str) -> None:  # noqa: F811
    """A long RUN step is not minutes of silence: on a terminal its last lines show under
    it while it runs (cleared by the next step), and --verbose prints every line."""
    import sys
    import uuid

    from tests.terminal import in_terminal

    env = {"ITERARE_DOCKER_IMAGE": sandbox_image, "ITERARE_DOCKER_BASE_IMAGE": BASE_IMAGE}
    (repo / ".iterare").mkdir()
    marker = uuid.uuid4().hex[:8]  # a step the cache never has
    (repo / ".iterare" / "Dockerfile").write_text(
        f"FROM {sandbox_image}\nRUN for i in $(seq 1 9); do echo unpacking-{marker}-$i; "
        f"sleep 0.2; done\nRUN echo done-{marker}\n")
    git("add", ".", cwd=repo)
    assert iterare("trust", "--yes", cwd=repo).returncode == 0
    build = ["image", "build", "--base", BASE_IMAGE, "--ca-bundle", CA_BUNDLE,
             "--tag", sandbox_image]
    made: list[str] = []
    try:
        script = ("import os, sys; os.environ.update(" + repr(env) + "); "
                  "os.execvp('git', ['git', 'iterare', *sys.argv[1:]])")
        code, output = in_terminal([sys.executable, "-c", script, *build], repo, b"",
                                   ready=b"never typed", timeout=300)
        text = output.decode(errors="replace")
        assert code == 0, text
        made.append(text.strip().splitlines()[-1].split()[0])
        for i in range(1, 10):  # each line was shown under its step, in order
            assert f"  unpacking-{marker}-{i}" in text
        assert text.index(f"unpacking-{marker}-9") < text.index("Step 3/5")
        assert "\x1b[J" in text  # and the window was cleared again
        # Off a terminal: the steps alone; with --verbose, every line.
        _rmi(*made)
        quiet = iterare(*build, cwd=repo, env=env)
        assert quiet.returncode == 0, quiet.stderr
        assert f"Step 2/5: RUN for i in $(seq 1 9); do echo unpacking-{marker}" in quiet.stderr
        assert f"unpacking-{marker}-1" not in quiet.stderr.replace("echo unpacking", "")
        _rmi(*made)
        loud = iterare("--verbose", *build, cwd=repo, env=env)
        assert loud.returncode == 0, loud.stderr
        assert all(f"\n  unpacking-{marker}-{i}\n" in loud.stderr for i in range(1, 10))
    finally:
        _rmi(*made)


def test_bad_ca_bundle_is_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "ca.pem"
    bad.write_text("not a certificate\n")
    result = iterare("image", "build", "--ca-bundle", str(bad), "--tag", "itr-sandbox-x:1",
                     cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.endswith(f"error: {bad} is not a PEM CA bundle (no BEGIN CERTIFICATE) "
                                  "(fix --ca-bundle or [docker] ca_bundle)\n")


def test_failing_project_build_is_one_line(repo: Path,
                                           sandbox_image: str) -> None:  # noqa: F811
    (repo / ".iterare").mkdir()
    (repo / ".iterare" / "Dockerfile").write_text(
        f"FROM {sandbox_image}\nRUN echo about to fail && false\n")
    assert iterare("trust", "--yes", cwd=repo).returncode == 0
    result = iterare("image", "status", cwd=repo, env={"ITERARE_DOCKER_IMAGE": sandbox_image})
    assert result.returncode == 0
    result = iterare("image", "build", "--base", BASE_IMAGE, "--ca-bundle", CA_BUNDLE,
                     "--tag", sandbox_image, cwd=repo)
    assert result.returncode == 1
    last = result.stderr.splitlines()[-1]
    assert last.startswith(f"error: building {sandbox_image.rsplit(':', 1)[0]}:project-")
    assert last.endswith("failed: The command '/bin/sh -c echo about to fail && false' "
                         "returned a non-zero code: 1 (last output: "
                         f"Step 1/4 : FROM {sandbox_image} | "
                         "Step 2/4 : RUN echo about to fail && false | about to fail)")


def test_engine_unreachable_is_one_line(tmp_path: Path) -> None:
    for args in (["image", "status"], ["image", "build"]):
        result = iterare(*args, cwd=tmp_path, env={"DOCKER_HOST": "unix:///nonexistent.sock"})
        assert result.returncode == 1
        assert result.stderr.splitlines()[-1] == (
            "error: cannot reach the Docker engine at unix:///nonexistent.sock "
            "(is dockerd running?)")


def test_status_of_iterares_image_is_that_of_the_image_runs_use(tmp_path: Path) -> None:
    # iterare's image stands for git-iterare's own: execute never uses it, nor does status.
    from git_iterare.config import DEFAULT_IMAGE

    env = {"ITERARE_DOCKER_IMAGE": "sohonet/iterare-llm:latest"}
    result = iterare("image", "status", cwd=tmp_path, env=env)
    own = iterare("image", "status", cwd=tmp_path, env={"ITERARE_DOCKER_IMAGE": DEFAULT_IMAGE})
    assert (result.returncode, result.stdout) == (own.returncode, own.stdout)
    assert result.stdout.splitlines()[1] == f"image: {DEFAULT_IMAGE}"
    assert result.stderr == (
        f"note: docker.image sohonet/iterare-llm:latest is iterare's image; runs use "
        f"git-iterare's own image {DEFAULT_IMAGE} instead\n" + own.stderr)
