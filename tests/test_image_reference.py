"""``docker.image`` must be an image reference (Docker's distribution/reference grammar, or
an image id): anything else is refused with one line before the engine is asked about it
(the docker SDK would send ``../containers/x`` as a path of the engine's API)."""

from __future__ import annotations

import pytest

from git_iterare.errors import UserError
from git_iterare.sandbox import image

GOOD = ["git-iterare:latest", "itr-sandbox-missing:1", "node:20-bookworm-slim", "ubuntu",
        "registry.example.com:5000/team/img:1.2", "docker.io/library/python:3.11-slim",
        "localhost/x@sha256:" + "a" * 64, "sha256:" + "b" * 64, "2baa2475d311",
        "git-iterare:project-afd581a44c9f"]
BAD = ["../containers/x", "x/../y", " x", "x y", "X:1", "a//b", "-x", "x:", "a:b:c", "",
       "a?b", "a#b", "é", "ghcr.io/Org/x", "x\r\nHost: y"]


@pytest.mark.parametrize("name", GOOD)
def test_image_references_are_taken(name: str) -> None:
    assert image.configured_image({"docker.image": name}) == name


@pytest.mark.parametrize("name", BAD)
def test_anything_else_is_refused_with_one_line(name: str) -> None:
    with pytest.raises(UserError) as refused:
        image.configured_image({"docker.image": name})
    assert refused.value.render().count("\n") <= 1
    assert "is not an image name" in str(refused.value)


def test_iterares_image_stands_for_git_iterares_own() -> None:
    assert image.configured_image({"docker.image": "sohonet/iterare-llm:latest"}) == \
        image.DEFAULT_IMAGE_NAME
