"""Setting up: a repository's ``.iterare/`` (``git iterare init``), the user's
configuration directory (``git iterare install``), and rewriting a project Dockerfile
that builds on iterare's image so it builds on git-iterare's.

A facade over :mod:`git_iterare.scaffold` and the image module's Dockerfile reading, so
the command line touches no files itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from git_iterare.errors import UserError
from git_iterare.git.repo import Repo
from git_iterare.scaffold import Written

__all__ = ["DockerfileRewrite", "Written", "init", "install", "legacy_rewrite"]


@dataclass(frozen=True)
class DockerfileRewrite:
    """A project Dockerfile that builds on iterare's image, and what it becomes.

    Attributes:
        path: the Dockerfile.
        legacy: the iterare image it names.
        text: its new content, ``FROM`` git-iterare's image.
    """

    path: Path
    legacy: str
    text: str

    def apply(self) -> None:
        """Write :attr:`text` to :attr:`path` (bytes that are not UTF-8 kept), replacing
        the file, never writing through a symlink put in its place.

        Raises:
            OSError: the file cannot be written.
        """
        from git_iterare.scaffold import replace_file

        replace_file(self.path, self.text.encode("utf-8", "surrogateescape"), 0o644)


def init(repo: Repo, image: str, force: bool = False) -> list[Written]:
    """Create ``.iterare/`` (config, Dockerfile FROM ``image``, example prompt, .gitignore)
    in the worktree of ``repo`` the command runs in (in a linked worktree, there: later
    commands there then read them, see :attr:`~git_iterare.git.repo.Repo.project_tree`);
    existing files are kept unless ``force``.

    Raises:
        UserError: the repository is bare.
        OSError: a file cannot be written.
    """
    from git_iterare import scaffold
    from git_iterare.errors import UserError

    top = repo.work_tree
    if top is None:
        raise UserError("this is a bare repository; run `git iterare init` in a worktree")
    return scaffold.init_project(top, image, force)


def install() -> list[Written]:
    """Create the global configuration directory (0700) and a commented config.toml.

    Raises:
        OSError: they cannot be written.
    """
    from git_iterare import scaffold

    return scaffold.install_global()


def legacy_rewrite(repo: Repo, image: str) -> DockerfileRewrite | None:
    """The rewrite of ``repo``'s ``.iterare/Dockerfile`` when it builds on iterare's image
    (``iterare init`` wrote it), FROM ``image``; None when it does not, or is unreadable.
    """
    from git_iterare import scaffold
    from git_iterare.boundedfs import read_repository_file
    from git_iterare.sandbox.image import legacy_dockerfile

    dockerfile = repo.iterare_dir / "Dockerfile"
    try:
        data = read_repository_file(repo.iterare_dir, "Dockerfile")
    except UserError:
        return None
    if data is None:
        return None
    text = data.decode("utf-8", errors="surrogateescape")
    legacy = legacy_dockerfile(text, image)
    if legacy is None:
        return None
    new = scaffold.DOCKERFILE.format(image=image) if legacy.names_only else legacy.text
    return DockerfileRewrite(path=dockerfile, legacy=legacy.legacy, text=new)
