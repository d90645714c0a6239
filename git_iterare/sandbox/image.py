"""Building the sandbox image, and the project layer on top of it.

The image is built from ``container/Dockerfile`` and ``container/sidecar`` (shipped in
``git_iterare/data/container``) with the classic builder of the Docker API, which every
engine supports (the SDK cannot drive BuildKit). The build context is a temporary
directory holding those two files, one install script per agent the image holds
(``install-<agent>.sh``: what the caller gives as :class:`AgentInstall` values; this
module does not know the agents) and ``ca.pem`` (the CA bundle, or an empty file). The
Dockerfile gets one stage per agent (see :func:`dockerfile`), which alone sees ``ca.pem``,
so the bundle never reaches the final image (it stays in the engine's local build cache
until pruned). The image's labels name its agents (``dev.iterare.agents``) and their
versions (``dev.iterare.<agent>-version``), and its context hash covers all of it: a run
of an agent the image lacks, or a changed install step, rebuilds it (with every agent it
held, plus the new one).

A project's ``.iterare/Dockerfile`` (``FROM`` the sandbox image; its build context holds
that file alone) is built on top into
``<image repository>:project-<hash>``, where the hash covers the Dockerfile and the id of
the image it builds on; it is rebuilt when either changes. It is checked first
(:mod:`git_iterare.sandbox.buildfile`: nothing the engine would fetch itself), and its
``RUN`` steps run in a build sidecar's network (:mod:`git_iterare.sandbox.buildnet`).

iterare's image (``sohonet/iterare-llm``, see :func:`is_legacy_image`) is never used: as
``docker.image`` it stands for git-iterare's own image, and a project Dockerfile ``FROM``
it is built from git-iterare's image instead (or, when it adds nothing, not built at
all), each with a one-line note. The sandbox's own parts (start script, firewall,
resolver) never come from the agent's image, so an image needs only ``/bin/sh`` and the
agent's program.
"""

from __future__ import annotations

import contextlib
import hashlib
import re
import shutil
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from git_iterare.errors import OperationFailed, UserError
from git_iterare.sandbox.docker_errors import docker_errors
from git_iterare.sandbox.engine_client import client

if TYPE_CHECKING:
    from git_iterare.settings import Settings

DEFAULT_BASE_IMAGE = "node:20-bookworm-slim"
#: Where git-iterare keeps its own image when ``docker.image`` names someone else's.
DEFAULT_IMAGE_NAME = "git-iterare:latest"

LABEL_IMAGE = "dev.iterare.image"
LABEL_BASE = "dev.iterare.base"
LABEL_AGENTS = "dev.iterare.agents"
LABEL_CONTEXT_HASH = "dev.iterare.context-hash"
LABEL_PROJECT_HASH = "dev.iterare.project-dockerfile-hash"

Progress = Callable[[str], None]


@runtime_checkable
class StepOutput(Protocol):
    """A :data:`Progress` that also takes what a build step prints, one line at a time,
    and decides how much of it to show (:class:`git_iterare.ui.Progress` is one)."""

    def __call__(self, line: str) -> None:
        """A progress line (a build step)."""

    def output(self, line: str) -> None:
        """A line the current step printed."""

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

    @classmethod
    def from_inspect(cls, name: str, found: Mapping[str, Any]) -> ImageStatus:
        """The status of image ``name`` the engine's inspect answer ``found`` describes
        (``GET /images/{name}/json``: ``Id``, ``Created``, ``Config.Labels``)."""
        labels = (found.get("Config") or {}).get("Labels") or {}
        return cls(name, True, str(found.get("Id") or ""), str(found.get("Created") or ""),
                   dict(labels))


class AgentInstall(Protocol):
    """How one agent's program is installed (:class:`git_iterare.agents.base.Install`).

    Attributes:
        script: POSIX shell run as root with ``set -eu`` in a stage of its own, installing
            under ``$PREFIX`` (``/opt/<agent>``), executables in ``$PREFIX/bin``;
            ``NODE_EXTRA_CA_CERTS`` names the build's CA bundle when one was given.
        version: the version asked for, for the image's labels.
    """

    @property
    def script(self) -> str: ...

    @property
    def version(self) -> str: ...


#: An agent's name in an image: it names a stage, a directory and a label.
_AGENT_NAME = re.compile(r"^[a-z][a-z0-9-]{0,31}$")

#: The Dockerfile lines replaced by the agents' stages and by their copies.
STAGES_MARK = "# @agent-stages"
COPIES_MARK = "# @agent-copies"


def version_label(agent: str) -> str:
    """The label holding the version of ``agent`` asked for (``dev.iterare.claude-version``)."""
    return f"dev.iterare.{agent}-version"


def dockerfile(template: bytes, agents: Sequence[str]) -> bytes:
    """The Dockerfile building the image with ``agents``.

    :data:`STAGES_MARK` becomes, per agent, a stage ``agent-<name>`` from ``system``
    running ``install-<name>.sh`` with ``PREFIX=/opt/<name>`` (and the CA bundle for
    npm); :data:`COPIES_MARK` becomes the copies of each ``/opt/<name>`` into the final
    stage and the links of its ``bin/*`` into ``/usr/local/bin``.

    Raises:
        ValueError: a name is not lower-case letters, digits and ``-``, or a mark is
            missing from ``template``.
    """
    for name in agents:
        if not _AGENT_NAME.fullmatch(name):
            raise ValueError(f"bad agent name for the image: {name!r}")
    stages = []
    for name in agents:
        stages += [
            f"FROM system AS agent-{name}",
            "COPY ca.pem /tmp/iterare-build-ca.pem",
            f"COPY install-{name}.sh /tmp/iterare-install.sh",
            "RUN set -eu; \\",
            "    if [ -s /tmp/iterare-build-ca.pem ]; then "
            "export NODE_EXTRA_CA_CERTS=/tmp/iterare-build-ca.pem; fi; \\",
            f"    export PREFIX=/opt/{name}; mkdir -p \"$PREFIX/bin\"; \\",
            "    sh -eu /tmp/iterare-install.sh",
            "",
        ]
    copies = [f"COPY --from=agent-{name} /opt/{name} /opt/{name}" for name in agents]
    if agents:
        bins = " ".join(f"/opt/{name}/bin/*" for name in agents)
        copies.append(f"RUN set -eu; for exe in {bins}; do "
                      f"if [ -e \"$exe\" ]; then ln -sf \"$exe\" /usr/local/bin/; fi; done")
    text = template.decode()
    lines = text.splitlines()
    if STAGES_MARK not in lines or COPIES_MARK not in lines:
        raise ValueError("the sandbox Dockerfile lacks its agent marks")
    out: list[str] = []
    for line in lines:
        out += stages if line == STAGES_MARK else copies if line == COPIES_MARK else [line]
    return ("\n".join(out) + "\n").encode()


def context_files(agents: Sequence[str] = (),
                  installs: Mapping[str, AgentInstall] | None = None) -> dict[str, bytes]:
    """The sandbox image's build files by name: ``Dockerfile`` (with the stages of
    ``agents``, see :func:`dockerfile`), ``sidecar``, ``egress-proxy``
    (:mod:`git_iterare.sandbox.egress_proxy`), ``tree-server``
    (:mod:`git_iterare.sandbox.tree_server`), ``nnp.c`` (the launcher of swarm tasks) and
    ``install-<agent>.sh`` for each of ``agents``.

    Raises:
        KeyError: an agent of ``agents`` is not in ``installs``.
        ValueError: as :func:`dockerfile`.
    """
    root = resources.files("git_iterare") / "data" / "container"
    code = resources.files("git_iterare") / "sandbox"
    files = {"Dockerfile": dockerfile((root / "Dockerfile").read_bytes(), agents),
             "sidecar": (root / "sidecar").read_bytes(),
             "egress-proxy": (code / "egress_proxy.py").read_bytes(),
             "tree-server": (code / "tree_server.py").read_bytes(),
             "nnp.c": (root / "nnp.c").read_bytes()}
    for name in agents:
        files[f"install-{name}.sh"] = (installs or {})[name].script.encode()
    return files


def context_hash(files: Mapping[str, bytes]) -> str:
    """The hash of a build context (:func:`context_files`), kept as the image's
    :data:`LABEL_CONTEXT_HASH` label."""
    return _hash(*(part for name in sorted(files) for part in (name.encode(), files[name])))


def _hash(*parts: bytes) -> str:
    digest = hashlib.sha256()
    for part in parts:
        digest.update(len(part).to_bytes(8, "big"))
        digest.update(part)
    return digest.hexdigest()


def _stream_build(api_kwargs: dict[str, Any], name: str, progress: Progress,
                  verbose: bool = False) -> str:
    """Run one build through the low-level API, condensing its log into ``progress``: a
    line per step, and what the steps print to :meth:`StepOutput.output` when
    ``progress`` takes it; every line (indented) with ``verbose`` or ``--verbose``.

    Returns:
        The new image's id.

    Raises:
        OperationFailed: the build failed (the failing step's last output lines kept).
    """
    from git_iterare import proc

    verbose = verbose or proc.VERBOSE
    output = progress.output if isinstance(progress, StepOutput) and not verbose else None
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
                elif output is not None and not _NOISE.match(line):
                    output(line)
                if not _NOISE.match(line):
                    recent = [*recent[-5:], line]
    with docker_errors(f"inspect {name}"):
        return str(client().images.get(name).id)


def build_image(name: str, *, base: str = DEFAULT_BASE_IMAGE, ca_bundle: Path | None = None,
                agents: Sequence[str] = (), installs: Mapping[str, AgentInstall] | None = None,
                no_cache: bool = False, progress: Progress = lambda line: None,
                verbose: bool = False) -> ImageRef:
    """Build the sandbox image.

    Args:
        name: image name and tag to create (``git-iterare:latest``).
        base: Debian bookworm based image (``BASE_IMAGE`` build argument).
        ca_bundle: PEM file of extra CAs for the build's downloads (npm), or None.
        agents: the agents to install, by name (an empty list builds the sandbox alone:
            the shell agent needs nothing more).
        installs: how to install each of ``agents`` (more entries are ignored).
        no_cache: build every step afresh.
        progress: called with one line per build step; what a step prints goes to its
            :meth:`StepOutput.output` when it has one (the last lines on a terminal), and
            to ``progress`` itself, every line, when ``verbose`` (or ``--verbose``).

    Raises:
        UserError: the CA bundle cannot be read, or is not PEM.
        OperationFailed: the engine is unreachable or the build failed.
    """
    ca = b""
    if ca_bundle is not None:
        try:
            ca = Path(ca_bundle).read_bytes()
        except OSError as exc:
            raise UserError(f"cannot read CA bundle {ca_bundle}: {exc.strerror}",
                            hint="fix --ca-bundle or [docker] ca_bundle") from None
        if b"-----BEGIN CERTIFICATE-----" not in ca:
            raise UserError(f"{ca_bundle} is not a PEM CA bundle (no BEGIN CERTIFICATE)",
                            hint="fix --ca-bundle or [docker] ca_bundle")
    agents = sorted(set(agents))
    files = context_files(agents, installs)
    context = Path(tempfile.mkdtemp(prefix="iterare-build-"))
    try:
        for fname, data in files.items():
            (context / fname).write_bytes(data)
        (context / "sidecar").chmod(0o755)
        (context / "ca.pem").write_bytes(ca)
        labels = {
            LABEL_BASE: base,
            LABEL_AGENTS: ",".join(agents),
            LABEL_CONTEXT_HASH: context_hash(files),
            **{version_label(a): (installs or {})[a].version for a in agents},
        }
        try:
            image_id = _stream_build(
                {"path": str(context), "tag": name, "nocache": no_cache, "pull": False,
                 "buildargs": {"BASE_IMAGE": base}, "labels": labels},
                name, progress, verbose)
        except OperationFailed as exc:
            _check_base_present(base, exc)
            raise
    finally:
        shutil.rmtree(context, ignore_errors=True)
    return ImageRef(name, image_id)


def _check_base_present(base: str, failure: OperationFailed) -> None:
    """Raise a clearer error than ``failure`` (a failed build) when the base image is
    not on the engine (it could not be pulled there), saying how to put it there.

    Raises:
        OperationFailed: ``base`` is missing on the engine.
    """
    import docker.errors

    from git_iterare.sandbox.engine import DEFAULT_CONTEXT, current

    try:
        client().images.get(base)
        return
    except docker.errors.ImageNotFound:
        pass
    except Exception:  # the build's own error says more then
        return
    engine = current()
    target = (f"--context {engine.name}" if engine.name != DEFAULT_CONTEXT
              else f"-H {engine.url}")
    raise OperationFailed(
        f"the base image {base} is not on the Docker engine at {engine.label} and could not "
        f"be pulled there ({failure.message})",
        hint=f"copy it from an engine that has it: `docker save {base} | docker {target} "
             "load`, or name another with --base or [docker] base_image") from None


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
    return ImageStatus.from_inspect(name, image.attrs)


def project_image_name(image: str, digest: str) -> str:
    """``<repository of image>:project-<first 12 hex of digest>``."""
    repository = image.rsplit(":", 1)[0] if ":" in image.rsplit("/", 1)[-1] else image
    return f"{repository}:project-{digest[:12]}"


class Project(Protocol):
    """What the image needs of a repository: where its ``.iterare/`` is (the project
    Dockerfile's folder)."""

    @property
    def iterare_dir(self) -> Path: ...


def ensure_image(config: Settings, repo: Project | None = None,
                 progress: Progress = lambda line: None, *, agents: Sequence[str] = (),
                 installs: Mapping[str, AgentInstall] | None = None) -> ImageRef:
    """The image a run uses, building what is missing or stale.

    Builds ``docker.image`` when it does not exist (base ``docker.base_image``, CA
    ``docker.ca_bundle``, the ``agents``), or when git-iterare built it from another
    build context than this one's (its context-hash label differs: other container files,
    another install step, or it lacks one of ``agents``; it is rebuilt from the base it was
    built from, with the agents it held that ``installs`` knows and ``agents``); then, when the
    repository has ``.iterare/Dockerfile``, builds it on top unless an image with the same
    content hash exists. When ``docker.image`` is an image git-iterare did not build, the
    agent runs in it and the sidecar in :data:`DEFAULT_IMAGE_NAME` (built when needed):
    the sidecar always runs git-iterare's own image, whose id is the result's
    ``sidecar``.

    Args:
        config: a :class:`git_iterare.config.Config`.
        repo: the repository (a :class:`git_iterare.git.repo.Repo`), or None (no project
            layer).
        progress: receives one line per build step.
        agents: the agents the image must hold, by name.
        installs: how to install every agent that has an install step, by name (also
            those only the existing image holds).

    Raises:
        UserError: bad CA bundle, or an unreadable project Dockerfile.
        OperationFailed: the engine is unreachable or a build failed.
    """
    name = configured_image(config)
    if is_legacy_image(config["docker.image"]):
        progress(f"note: docker.image {config['docker.image']} is iterare's image; running "
                 f"git-iterare's own image {DEFAULT_IMAGE_NAME} instead")
    status = image_status(name)
    if status.present and status.labels.get(LABEL_CONTEXT_HASH) is None:
        # Not built by git iterare (a user's own image): the agent runs in it as it is,
        # the sidecar in git-iterare's own image.
        own = _own_image(config, DEFAULT_IMAGE_NAME, image_status(DEFAULT_IMAGE_NAME),
                         progress, agents, installs or {})
        base = ImageRef(name, status.id, own.id)
    else:
        base = _own_image(config, name, status, progress, agents, installs or {})
    if repo is None:
        return base
    from git_iterare.boundedfs import read_repository_file

    dockerfile = repo.iterare_dir / "Dockerfile"
    found = read_repository_file(repo.iterare_dir, "Dockerfile")  # never through a symlink
    if found is None:
        return base
    content = found
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
    from git_iterare.sandbox import buildfile
    from git_iterare.sandbox.buildnet import build_network

    steps = buildfile.check(content.decode("utf-8", "surrogateescape"), str(dockerfile),
                            lambda image: image_status(image).present)
    progress(f"building {project} from {dockerfile}"
             + (" (its RUN steps reach the internet, not the Docker host)" if steps.runs
                else ""))
    # The context holds the Dockerfile alone: .iterare/ also holds run worktrees.
    context = Path(tempfile.mkdtemp(prefix="iterare-project-build-"))
    try:
        (context / "Dockerfile").write_bytes(content)
        with (build_network(base.sidecar or DEFAULT_IMAGE_NAME, project) if steps.runs
              else contextlib.nullcontext("none")) as network:
            image_id = _stream_build(
                {"path": str(context), "tag": project, "pull": False,
                 "network_mode": network,
                 "labels": {LABEL_PROJECT_HASH: digest, LABEL_IMAGE: "project"}},
                project, progress)
    finally:
        shutil.rmtree(context, ignore_errors=True)
    return ImageRef(project, image_id, base.sidecar)


_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_LABEL = r"[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?"
#: An image reference as Docker's distribution/reference grammar has it
#: (``[registry[:port]/]path[:tag][@digest]``), or an image id (``sha256:`` and 64 hex
#: digits, or a prefix of its hex digits).
IMAGE_REFERENCE = re.compile(
    rf"(?:(?:{_LABEL}(?:\.{_LABEL})*(?::[0-9]+)?/)?{_COMPONENT}(?:/{_COMPONENT})*"
    r"(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(?:@[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*"
    r":[0-9a-fA-F]{32,})?|sha256:[0-9a-f]{64}|[0-9a-f]{12,64})")


def configured_image(config: Settings) -> str:
    """``docker.image``, or :data:`DEFAULT_IMAGE_NAME` for iterare's image.

    Raises:
        UserError: it is no image reference (:data:`IMAGE_REFERENCE`): a name the engine's
            API would take for a path of its own (``../containers/x``), say.
    """
    name = str(config["docker.image"])
    if is_legacy_image(name):
        return DEFAULT_IMAGE_NAME
    if not IMAGE_REFERENCE.fullmatch(name):
        raise UserError(f"docker.image {name!r} is not an image name",
                        hint="give one such as git-iterare:latest or "
                             "registry.example.com/team/image:1.2")
    return name


def _wanted_agents(status: ImageStatus, agents: Sequence[str],
                   installs: Mapping[str, AgentInstall]) -> list[str]:
    """The agents git-iterare's own image must hold: those it holds that ``installs``
    knows, and ``agents``."""
    held = [a for a in status.labels.get(LABEL_AGENTS, "").split(",") if a in installs]
    return sorted({*held, *agents})


def _current(status: ImageStatus, wanted: Sequence[str],
             installs: Mapping[str, AgentInstall]) -> bool:
    """Whether ``status`` is git-iterare's own image as this version builds it with the
    agents ``wanted`` (:func:`_wanted_agents`): present, from the same build context (its
    context-hash label)."""
    return status.present and status.labels.get(LABEL_CONTEXT_HASH) == context_hash(
        context_files(wanted, installs))


#: Looks an image up by name, as :func:`image_status` does.
StatusOf = Callable[[str], ImageStatus]


def ready_sidecar_image(config: Settings, status_of: StatusOf, *,
                        agents: Sequence[str] = (),
                        installs: Mapping[str, AgentInstall] | None = None) -> str | None:
    """The id of the image :func:`ensure_image` would give the sidecar (its ``sidecar``),
    when it would build none; else None. Nothing is built.

    Args:
        config: a :class:`git_iterare.config.Config`.
        status_of: how to look an image up (:func:`image_status`, or another client's).
        agents, installs: as for :func:`ensure_image`.

    Raises:
        whatever ``status_of`` raises.
    """
    status = status_of(configured_image(config))
    if status.present and status.labels.get(LABEL_CONTEXT_HASH) is None:
        status = status_of(DEFAULT_IMAGE_NAME)  # a user's own image: the sidecar's is ours
    installs = installs or {}
    return status.id if _current(status, _wanted_agents(status, agents, installs),
                                 installs) else None


def _own_image(config: Settings, name: str, status: ImageStatus, progress: Progress,
               agents: Sequence[str], installs: Mapping[str, AgentInstall]) -> ImageRef:
    """git-iterare's own image ``name``, built when missing or built from another context
    than the one for its agents and ``agents`` (then from the base it was built from)."""
    held = [a for a in status.labels.get(LABEL_AGENTS, "").split(",") if a in installs]
    wanted = _wanted_agents(status, agents, installs)
    if _current(status, wanted, installs):
        return ImageRef(name, status.id, status.id)
    missing = [a for a in wanted if a not in held]
    why = ("missing" if not status.present
           else f"adding {', '.join(missing)}" if missing and LABEL_AGENTS in status.labels
           else "built by another git-iterare version")
    progress(f"building {name} ({why})")
    ca = config["docker.ca_bundle"]
    base_image = (status.labels.get(LABEL_BASE) or config["docker.base_image"]
                  or DEFAULT_BASE_IMAGE)
    built = build_image(name, base=base_image, ca_bundle=Path(ca).expanduser() if ca else None,
                        agents=wanted, installs=installs, progress=progress)
    return ImageRef(built.name, built.id, built.id)
