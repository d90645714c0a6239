"""An image built by another git-iterare version is rebuilt before a run uses it."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from git_iterare import config as config_module
from git_iterare.sandbox.image import (
    LABEL_CONTEXT_HASH,
    context_files,
    context_hash,
    ensure_image,
)
from tests.sandbox_fixtures import BASE_IMAGE, CA_BUNDLE

pytestmark = pytest.mark.docker


def test_stale_image_is_rebuilt_from_its_base(tmp_path: Path, sandbox_image: str) -> None:
    name = f"itr-stale-{os.getpid()}:1"
    (tmp_path / "Dockerfile").write_text(
        f"FROM {BASE_IMAGE}\nLABEL {LABEL_CONTEXT_HASH}=from-an-older-version "
        f"dev.iterare.base={BASE_IMAGE}\n")
    subprocess.run(["docker", "build", "-q", "-t", name, str(tmp_path)], check=True,
                   capture_output=True)
    try:
        cfg = config_module.load(None, overrides={"docker.image": name,
                                                  "docker.ca_bundle": CA_BUNDLE},
                                 env={}, git_entries=[])
        lines: list[str] = []
        ref = ensure_image(cfg, None, lines.append)
        assert lines[0] == f"building {name} (built by another git-iterare version)"
        template = f'{{{{index .Config.Labels "{LABEL_CONTEXT_HASH}"}}}}'
        labels = subprocess.run(["docker", "image", "inspect", "-f", template, ref.id],
                                capture_output=True, text=True, check=True).stdout.strip()
        assert labels == context_hash(context_files())
        assert ensure_image(cfg, None, lines.append) == ref  # current now: used as it is
    finally:
        subprocess.run(["docker", "rmi", "-f", name], capture_output=True, check=False)
