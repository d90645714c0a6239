"""Building the sandbox image, and the project layer on top of it.

The image is built from ``container/Dockerfile`` and ``container/sidecar`` (shipped in
``git_iterare/data/container``) with the classic builder of the Docker API, which every
engine supports (the SDK cannot drive BuildKit). The build context is a temporary
directory holding those two files and ``ca.pem`` (the CA bundle, or an empty file); the
Dockerfile copies ``ca.pem`` only into the stage that runs npm, so it never reaches the
final image (it stays in the engine's local build cache until pruned).

A project's ``.iterare/Dockerfile`` (``FROM`` the sandbox image; its build context holds
that file alone) is built on top into
``<image repository>:project-<hash>``, where the hash covers the Dockerfile and the id of
the image it builds on; it is rebuilt when either changes.

An agent whose program is not in the image (Gemini CLI) adds its install step on top of
the run's image (:func:`ensure_layer`), cached the same way.

iterare's image (``sohonet/iterare-llm``, see :func:`is_legacy_image`) is never used: as
``docker.image`` it stands for git-iterare's own image, and a project Dockerfile ``FROM``
it is built from git-iterare's image instead (or, when it adds nothing, not built at
all), each with a one-line note. The sandbox's own parts (start script, firewall,
resolver) never come from the agent's image, so an image needs only ``/bin/sh`` and the
agent's program.
"""

from __future__ import annotations

import hashlib
import re
import shutil
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from git_iterare.errors import OperationFailed, UserError
from git_iterare.sandbox.docker_errors import client, docker_errors

DEFAULT_BASE_IMAGE = "node:20-bookworm-slim"
#: Where git-iterare keeps its own image when ``docker.image`` names someone else's.
DEFAULT_IMAGE_NAME = "git-iterare:latest"

LABEL_IMAGE = "dev.iterare.image"
LABEL_BASE = "dev.iterare.base"
LABEL_CLAUDE = "dev.iterare.claude-version"
LABEL_CONTEXT_HASH = "dev.iterare.context-hash"
LABEL_PROJECT_HASH = "dev.iterare.project-dockerfile-hash"
LABEL_LAYER_HASH = "dev.iterare.layer-hash"

Progress = Callable[[str], None]

_STEP = re.compile(r"^Step (\d+)/(\d+) : (.*)$")
#: The classic builder's bookkeeping lines, left out of error context.
_NOISE = re.compile(r"^ ?---> |^Removing intermediate container |^Successfully (built|tagged) ")


#: iterare's (iterare-llm's) sandbox image, as its ``init`` and config name it:
#: ``sohonet/iterare-llm`` with an optional registry prefix, tag and digest.
LEGACY_IMAGE = re.compile(r"^(?:(?:docker\.io|index\.docker\.io|registry-1\.docker\.io)/)?"
                          r"sohonet/iterare-llm(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?"
                          r"(?:@sha256:[0-9a-f]{64})?$", re.IGNORECASE)

#: A ``FROM`` line (with optional ``--platform`` and ``AS name``).
_FROM = re.compile(r"^(\s*FROM\s+(?:--\S+\s+)*)(\S+)(\s+AS\s+\S+)?(\s*)$", re.IGNORECASE)


def is_legacy_image(name: str) -> bool:
    """Whether ``name`` is iterare's image (``sohonet/iterare-llm[:tag]``), which holds
    nothing git-iterare needs: git-iterare runs its own image in its place."""
    return bool(LEGACY_IMAGE.match(name.strip()))


@dataclass(frozen=True)
class LegacyDockerfile:
    """A project Dockerfile that names iterare's image.

    Attributes:
        text: the Dockerfile with each ``FROM`` iterare's image replaced by the image
            given to :func:`legacy_dockerfile`.
        names_only: it holds nothing but that ``FROM`` line, comments and blank lines
            (iterare's ``init`` scaffold): it asks for nothing and needs no build.
        legacy: the image reference it named.
    """

    text: str
    names_only: bool
    legacy: str


def legacy_dockerfile(text: str, image: str) -> LegacyDockerfile | None:
    """Recognize a Dockerfile ``FROM`` iterare's image; None when it names no such image.

    Args:
        text: the Dockerfile.
        image: git-iterare's image to build from instead.
    """
    lines = text.splitlines(keepends=True)
    found = ""
    out = []
    others = False
    for line in lines:
        body = line.rstrip("\r\n")
        match = _FROM.match(body)
        if match and is_legacy_image(match.group(2)):
            found = found or match.group(2)
            out.append(match.group(1) + image + (match.group(3) or "") + match.group(4)
                       + line[len(body):])
            continue
        stripped = body.strip()
        if stripped and not stripped.startswith("#"):
            others = True
        out.append(line)
    if not found:
        return None
    return LegacyDockerfile("".join(out), not others, found)


@dataclass(frozen=True)
class ImageRef:
    """An image to run.

    Attributes:
        name: name with tag (``git-iterare:latest``).
        id: image id (``sha256:...``).
        sidecar: id of git-iterare's own image, which runs the sandbox's network sidecar
            (the same as ``id`` when this is that image; "" when not looked up).
    """

    name: str
    id: str
    sidecar: str = ""


@dataclass(frozen=True)
class ImageStatus:
    """What the engine knows about an image.

    Attributes:
        name: the name asked about.
        present: whether it exists.
        id: image id, or "" when missing.
        created: creation time as the engine reports it (RFC 3339), or "".
        labels: its labels.
    """

    name: str
    present: bool
    id: str = ""
    created: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)


def context_files() -> dict[str, bytes]:
    """The sandbox image's build files (``Dockerfile``, ``sidecar``) by name."""
    root = resources.files("git_iterare") / "data" / "container"
    return {name: (root / name).read_bytes() for name in ("Dockerfile", "sidecar")}


def _hash(*parts: bytes) -> str:
    digest = hashlib.sha256()
    for part in parts:
        digest.update(len(part).to_bytes(8, "big"))
        digest.update(part)
    return digest.hexdigest()


def _stream_build(api_kwargs: dict[str, Any], name: str, progress: Progress,
                  verbose: bool) -> str:
    """Run one build through the low-level API, condensing its log into ``progress``.

    Returns:
        The new image's id.

    Raises:
        OperationFailed: the build failed (the failing step's last output lines kept).
    """
    recent: list[str] = []
    with docker_errors(f"build {name}"):
        for chunk in client().api.build(decode=True, rm=True, forcerm=True, **api_kwargs):
            if "error" in chunk:
                tail = " | ".join(recent[-3:])
                detail = str(chunk.get("error", "")).strip()
                raise OperationFailed(f"building {name} failed: {detail}"
                                      + (f" (last output: {tail})" if tail else ""))
            text = str(chunk.get("stream", "")).rstrip("\n")
            for line in text.splitlines():
                line = line.rstrip()
                if not line:
                    continue
                step = _STEP.match(line)
                if step:
                    progress(f"Step {step.group(1)}/{step.group(2)}: {step.group(3)[:100]}")
                elif verbose:
                    progress(f"  {line}")
                if not _NOISE.match(line):
                    recent = [*recent[-5:], line]
    with docker_errors(f"inspect {name}"):
        return str(client().images.get(name).id)


def _read_ca_bundle(ca_bundle: Path | None) -> bytes:
    """The CA bundle's content for a build context's ``ca.pem`` (empty without one).

    Raises:
        UserError: the bundle cannot be read, or is not PEM.
    """
    if ca_bundle is None:
        return b""
    try:
        ca = Path(ca_bundle).read_bytes()
    except OSError as exc:
        raise UserError(f"cannot read CA bundle {ca_bundle}: {exc.strerror}",
                        hint="fix --ca-bundle or [docker] ca_bundle") from None
    if b"-----BEGIN CERTIFICATE-----" not in ca:
        raise UserError(f"{ca_bundle} is not a PEM CA bundle (no BEGIN CERTIFICATE)",
                        hint="fix --ca-bundle or [docker] ca_bundle")
    return ca


def build_image(name: str, *, base: str = DEFAULT_BASE_IMAGE, ca_bundle: Path | None = None,
                claude_version: str = "latest", no_cache: bool = False,
                progress: Progress = lambda line: None, verbose: bool = False) -> ImageRef:
    """Build the sandbox image.

    Args:
        name: image name and tag to create (``git-iterare:latest``).
        base: Debian bookworm based image (``BASE_IMAGE`` build argument).
        ca_bundle: PEM file of extra CAs for the build's downloads (npm), or None.
        claude_version: npm version of ``@anthropic-ai/claude-code`` (``latest``).
        no_cache: build every step afresh.
        progress: called with one line per build step (and every output line when
            ``verbose``).

    Raises:
        UserError: the CA bundle cannot be read, or is not PEM.
        OperationFailed: the engine is unreachable or the build failed.
    """
    ca = _read_ca_bundle(ca_bundle)
    files = context_files()
    context = Path(tempfile.mkdtemp(prefix="iterare-build-"))
    try:
        for fname, data in files.items():
            (context / fname).write_bytes(data)
        (context / "sidecar").chmod(0o755)
        (context / "ca.pem").write_bytes(ca)
        labels = {
            LABEL_BASE: base,
            LABEL_CLAUDE: claude_version,
            LABEL_CONTEXT_HASH: _hash(files["Dockerfile"], files["sidecar"]),
        }
        image_id = _stream_build(
            {"path": str(context), "tag": name, "nocache": no_cache, "pull": False,
             "buildargs": {"BASE_IMAGE": base, "CLAUDE_CODE_VERSION": claude_version},
             "labels": labels},
            name, progress, verbose)
    finally:
        shutil.rmtree(context, ignore_errors=True)
    return ImageRef(name, image_id)


def image_status(name: str) -> ImageStatus:
    """Whether ``name`` exists, with its id, creation time and labels.

    Raises:
        OperationFailed: the engine is unreachable.
    """
    import docker.errors

    with docker_errors(f"inspect {name}"):
        try:
            image = client().images.get(name)
        except docker.errors.ImageNotFound:
            return ImageStatus(name, False)
    return ImageStatus(name, True, str(image.id), str(image.attrs.get("Created", "")),
                       dict(image.labels or {}))


def project_image_name(image: str, digest: str, kind: str = "project") -> str:
    """``<repository of image>:<kind>-<first 12 hex of digest>``."""
    repository = image.rsplit(":", 1)[0] if ":" in image.rsplit("/", 1)[-1] else image
    return f"{repository}:{kind}-{digest[:12]}"


def ensure_image(config: Any, repo: Any = None,
                 progress: Progress = lambda line: None) -> ImageRef:
    """The image a run uses, building what is missing or stale.

    Builds ``docker.image`` when it does not exist (base ``docker.base_image``, CA
    ``docker.ca_bundle``, Claude Code ``docker.claude_version``), or when git-iterare
    built it from other container files than this version's (its context-hash label
    differs; it is rebuilt from the base it was built from); then, when the
    repository has ``.iterare/Dockerfile``, builds it on top unless an image with the same
    content hash exists. When ``docker.image`` is an image git-iterare did not build, the
    agent runs in it and the sidecar in :data:`DEFAULT_IMAGE_NAME` (built when needed):
    the sidecar always runs git-iterare's own image, whose id is the result's
    ``sidecar``.

    Args:
        config: a :class:`git_iterare.config.Config`.
        repo: a :class:`git_iterare.repo.Repo`, or None (no project layer).
        progress: receives one line per build step.

    Raises:
        UserError: bad CA bundle, or an unreadable project Dockerfile.
        OperationFailed: the engine is unreachable or a build failed.
    """
    name = config["docker.image"]
    if is_legacy_image(name):
        progress(f"note: docker.image {name} is iterare's image; running git-iterare's own "
                 f"image {DEFAULT_IMAGE_NAME} instead")
        name = DEFAULT_IMAGE_NAME
    status = image_status(name)
    if status.present and status.labels.get(LABEL_CONTEXT_HASH) is None:
        # Not built by git iterare (a user's own image): the agent runs in it as it is,
        # the sidecar in git-iterare's own image.
        own = _own_image(config, DEFAULT_IMAGE_NAME, image_status(DEFAULT_IMAGE_NAME),
                         progress)
        base = ImageRef(name, status.id, own.id)
    else:
        base = _own_image(config, name, status, progress)
    dockerfile = repo.iterare_dir / "Dockerfile" if repo is not None else None
    if dockerfile is None or not dockerfile.is_file():
        return base
    try:
        content = dockerfile.read_bytes()
    except OSError as exc:
        raise UserError(f"cannot read {dockerfile}: {exc.strerror}") from None
    legacy = legacy_dockerfile(content.decode("utf-8", "surrogateescape"), name)
    if legacy is not None:
        if legacy.names_only:
            progress(f"note: {dockerfile} only names iterare's image {legacy.legacy}; "
                     f"running git-iterare's image {name} (`git iterare init` rewrites it)")
            return base
        progress(f"note: {dockerfile} builds on iterare's image {legacy.legacy}; building "
                 f"it on git-iterare's image {name} instead")
        content = legacy.text.encode("utf-8", "surrogateescape")
    digest = _hash(content, base.id.encode())
    project = project_image_name(name, digest)
    existing = image_status(project)
    if existing.present and existing.labels.get(LABEL_PROJECT_HASH) == digest:
        return ImageRef(project, existing.id, base.sidecar)
    progress(f"building {project} from {dockerfile}")
    # The context holds the Dockerfile alone: .iterare/ also holds run worktrees.
    context = Path(tempfile.mkdtemp(prefix="iterare-project-build-"))
    try:
        (context / "Dockerfile").write_bytes(content)
        image_id = _stream_build(
            {"path": str(context), "tag": project, "pull": False,
             "labels": {LABEL_PROJECT_HASH: digest, LABEL_IMAGE: "project"}},
            project, progress, False)
    finally:
        shutil.rmtree(context, ignore_errors=True)
    return ImageRef(project, image_id, base.sidecar)


def ensure_layer(base: ImageRef, layer: str, dockerfile: str,
                 build_args: Mapping[str, str] | None = None, *,
                 ca_bundle: Path | None = None,
                 progress: Progress = lambda line: None) -> ImageRef:
    """``base`` with one more build on top (an agent's install step), built unless an
    image of the same content exists.

    The build context holds ``dockerfile`` and ``ca.pem`` (``ca_bundle``'s content, or
    empty). Build arguments: ``build_args``, ``BASE_IMAGE`` (``base.id``) and
    ``BUILDER_IMAGE`` (``base.sidecar``, git-iterare's own image). The result is tagged
    ``<repository of base>:<layer>-<12 hex>``, the hash covering the Dockerfile, the
    arguments and both image ids, so it is rebuilt when any of them changes.

    Args:
        base: the run's image (from :func:`ensure_image`).
        layer: short name for the tag (``gemini``): letters, digits, ``-``.
        dockerfile: the Dockerfile text.
        build_args: further build arguments.
        ca_bundle: PEM file of extra CAs for the build's downloads, or None.
        progress: receives one line per build step.

    Returns:
        The built (or existing) image; its ``sidecar`` is ``base.sidecar``.

    Raises:
        UserError: bad CA bundle.
        OperationFailed: the engine is unreachable or the build failed.
    """
    args = {**(build_args or {}), "BASE_IMAGE": base.id, "BUILDER_IMAGE": base.sidecar or base.id}
    digest = _hash(dockerfile.encode(), *(f"{k}={v}".encode() for k, v in sorted(args.items())))
    name = project_image_name(base.name, digest, layer)
    existing = image_status(name)
    if existing.present and existing.labels.get(LABEL_LAYER_HASH) == digest:
        return ImageRef(name, existing.id, base.sidecar)
    ca = _read_ca_bundle(ca_bundle)
    progress(f"building {name} ({layer} on {base.name})")
    context = Path(tempfile.mkdtemp(prefix="iterare-layer-build-"))
    try:
        (context / "Dockerfile").write_text(dockerfile, encoding="utf-8")
        (context / "ca.pem").write_bytes(ca)
        image_id = _stream_build(
            {"path": str(context), "tag": name, "pull": False, "buildargs": args,
             "labels": {LABEL_LAYER_HASH: digest}},
            name, progress, False)
    finally:
        shutil.rmtree(context, ignore_errors=True)
    return ImageRef(name, image_id, base.sidecar)


def _own_image(config: Any, name: str, status: ImageStatus, progress: Progress) -> ImageRef:
    """git-iterare's own image ``name``, built when missing or built from other container
    files than this version's (then from the base it was built from)."""
    files = context_files()
    if status.present and status.labels.get(LABEL_CONTEXT_HASH) == _hash(
            files["Dockerfile"], files["sidecar"]):
        return ImageRef(name, status.id, status.id)
    why = "missing" if not status.present else "built by another git-iterare version"
    progress(f"building {name} ({why})")
    ca = config["docker.ca_bundle"]
    base_image = (status.labels.get(LABEL_BASE) or config["docker.base_image"]
                  or DEFAULT_BASE_IMAGE)
    built = build_image(name, base=base_image, ca_bundle=Path(ca).expanduser() if ca else None,
                        claude_version=config["docker.claude_version"] or "latest",
                        progress=progress)
    return ImageRef(built.name, built.id, built.id)
