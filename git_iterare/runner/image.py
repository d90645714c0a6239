"""The sandbox image as commands see it: build it (and the project's layer) with the
user's approval, or report its status on the engine in use.

A facade over :mod:`git_iterare.sandbox.image`, so the command line needs no sandbox.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from git_iterare.config import Config
from git_iterare.git.repo import Repo
from git_iterare.sandbox.image import ImageRef, ImageStatus, Progress

__all__ = ["ImageRef", "ImageReport", "ImageStatus", "build", "status"]


@dataclass(frozen=True)
class ImageReport:
    """The sandbox image on the engine in use.

    Attributes:
        image: what the engine knows about ``docker.image``.
        engine_label: how messages name the engine (``unix:///var/run/docker.sock``).
        engine: the engine as a run record keeps it (``{"name", "url"}``).
        note: one line when ``docker.image`` is not the image runs use (iterare's image
            stands for git-iterare's own), else None.
    """

    image: ImageStatus
    engine_label: str
    engine: dict[str, str]
    note: str | None = None


def build(repo: Repo | None, config: Config, *, no_cache: bool = False,
          progress: Progress = lambda line: None,
          announce: Progress = lambda line: None) -> list[ImageRef]:
    """Build ``docker.image`` from ``docker.base_image``, then the project's
    ``.iterare/Dockerfile`` on top when ``repo`` has a worktree.

    Args:
        repo: the repository, or None outside one (no project layer).
        config: the effective configuration (``docker.*`` keys; ``docker.agents`` and the
            agents' own keys pick the agents installed).
        no_cache: rebuild every step.
        progress: receives one line per build step (every output line under
            ``--verbose``).
        announce: receives ``building IMAGE from BASE`` once the build may start.

    Returns:
        The images made: the sandbox image, then the project's when it is another one.

    Raises:
        OperationFailed: the repository's settings that choose the image are not approved
            (``git iterare trust``), the engine is unreachable or a build failed.
        UserError: the CA bundle cannot be read or is not PEM.
    """
    from git_iterare import proc
    from git_iterare.agents import image_agents
    from git_iterare.runner.trust import require_approval
    from git_iterare.sandbox.image import build_image, configured_image, ensure_image

    project = repo is not None and repo.main_work_tree is not None
    if project:
        # The repository may choose the image, its base and the project layer: only
        # with the user's approval (git iterare trust).
        require_approval(repo, config, agents=())  # a build starts no agent
    ca = config["docker.ca_bundle"]
    name = configured_image(config)  # iterare's image stands for git-iterare's own
    announce(f"building {name} from {config['docker.base_image']}")
    held = image_agents(config)
    ref = build_image(name, base=config["docker.base_image"],
                      ca_bundle=Path(ca).expanduser() if ca else None,
                      agents=held.agents, installs=held.installs, no_cache=no_cache,
                      progress=progress, verbose=proc.VERBOSE)
    made = [ref]
    if project:
        layered = ensure_image(config, repo, progress, **held._asdict())
        if layered.name != ref.name:
            made.append(layered)
    return made


def status(config: Config) -> ImageReport:
    """What the engine in use knows about the image runs use: ``docker.image``, or
    git-iterare's own where that is iterare's (:func:`sandbox.image.configured_image`).

    Raises:
        OperationFailed: the engine is unreachable.
        UserError: the engine configuration is invalid, or ``docker.image`` is no image
            name.
    """
    from git_iterare.sandbox.engine import current
    from git_iterare.sandbox.image import configured_image, image_status

    name = configured_image(config)
    note = None
    if name != config["docker.image"]:
        note = (f"docker.image {config['docker.image']} is iterare's image; runs use "
                f"git-iterare's own image {name} instead")
    engine = current()
    return ImageReport(image=image_status(name), engine_label=engine.label,
                       engine=engine.describe(), note=note)
