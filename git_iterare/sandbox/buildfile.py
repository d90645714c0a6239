"""What a project's ``.iterare/Dockerfile`` asks of the engine beyond its build steps.

Two things in a Dockerfile are fetched by the engine itself, from its host's network,
outside any namespace git-iterare can restrict: ``ADD`` of a URL (the engine downloads
it), and an image the engine lacks named by a ``FROM`` or a ``COPY --from`` (the engine
pulls it from the registry the name points at, which may be the host's own loopback).
Both are refused, approved or not: a download goes in a ``RUN`` step (which runs in the
build's restricted network, see :mod:`git_iterare.sandbox.buildnet`), and an image is
pulled by the user beforehand. What the engine would expand in an ``ADD`` source (a
variable) or a ``FROM`` (a ``${NAME:+word}`` alternative) is not guessed at: refused.

The file is parsed by the ``dockerfile`` package, which wraps the parser of Docker's own
builder (moby/buildkit's ``frontend/dockerfile/parser``), so escape directives, line
continuations and JSON forms are read exactly as the engine reads them.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from git_iterare.errors import UserError

#: A source of ``ADD`` that the engine would fetch: any ``scheme://`` (Docker's classic
#: builder downloads http and https; BuildKit also clones git URLs) or ``git@`` form.
_REMOTE = re.compile(r"^(?:[A-Za-z][A-Za-z0-9+.-]*://|git@)")
#: ``$NAME`` or ``${NAME}`` (with an optional ``:-default``) in a ``FROM``; its modifier.
_VARIABLE = re.compile(
    r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)([^}]*)\}|([A-Za-z_][A-Za-z0-9_]*))")
#: Modifiers of ``${NAME...}`` whose value is NAME's own when NAME has a value (Docker's
#: variable substitution: https://docs.docker.com/reference/dockerfile/#environment-replacement).
_OWN_VALUE = re.compile(r"^(?::?-.*)?$", re.DOTALL)


@dataclass(frozen=True)
class BuildSteps:
    """What a checked project Dockerfile holds.

    Attributes:
        runs: whether it has ``RUN`` steps (its own or under ``ONBUILD``): only those
            use the build's network.
        images: the images its stages start from, as named (stage names left out).
    """

    runs: bool
    images: tuple[str, ...]


def check(text: str, where: str, present: Callable[[str], bool]) -> BuildSteps:
    """Check a project Dockerfile for what the engine would fetch itself.

    Args:
        text: the Dockerfile.
        where: its path, for messages.
        present: whether the engine has an image of this name (called for each ``FROM``
            image that is not an earlier stage or ``scratch``).

    Returns:
        Its :class:`BuildSteps`.

    Raises:
        UserError: it cannot be parsed; an ``ADD`` names a URL; a ``FROM`` image is
            missing on the engine or is named through a build argument without a default.
    """
    import dockerfile

    try:
        commands = dockerfile.parse_string(text)
    except dockerfile.GoParseError as error:
        raise UserError(f"{where}: cannot be parsed as a Dockerfile: {error}",
                        hint="fix it so that `docker build` reads it") from None
    args: dict[str, str] = {}
    stages: set[str] = set()
    images: list[str] = []
    runs = started = False
    for command in commands:
        name = (command.sub_cmd or command.cmd).upper()
        line = f"{where}:{command.start_line}"
        if name == "RUN":
            runs = True
        elif name == "ADD":
            for source in command.value[:-1] or command.value:  # all but the destination
                if _REMOTE.match(source):
                    raise UserError(
                        f"{line}: ADD {source} would be downloaded by the Docker engine "
                        "itself, from its host's network, which a build may not reach",
                        hint="download it in a RUN step (curl, wget) instead")
                if "$" in source:
                    raise UserError(
                        f"{line}: ADD {source}: a variable in an ADD source may name a URL "
                        "the Docker engine would download itself, from its host's network",
                        hint="write the source out, or use COPY")
        if name == "COPY":
            # Under ONBUILD the parser leaves the instruction's flags in its text.
            flags = (tuple(command.original.split()) if command.sub_cmd
                     else tuple(command.flags))
            _copy_from(flags, line, stages, present)
        elif command.cmd.upper() == "ARG" and not started:
            for value in command.value:
                key, _, default = value.partition("=")
                args[key] = default
        elif command.cmd.upper() == "FROM" and command.value:
            started = True
            image = _substitute(command.value[0], args, line)
            if len(command.value) >= 3 and command.value[1].upper() == "AS":
                stages.add(command.value[2].lower())
            if image.lower() in stages or image == "scratch":
                continue
            if not present(image):
                raise _missing_image(f"{line}: FROM {image}", image)
            images.append(image)
    return BuildSteps(runs, tuple(images))


def _copy_from(flags: tuple[str, ...], line: str, stages: set[str],
               present: Callable[[str], bool]) -> None:
    """Check the ``--from`` among a ``COPY``'s ``flags``: an earlier stage, a stage's
    number, or an image the engine has.

    Raises:
        UserError: it names an image the engine lacks, or a variable.
    """
    for flag in flags:
        key, _, source = flag.partition("=")
        if key.lower() != "--from":
            continue
        if "$" in source:
            raise UserError(f"{line}: COPY --from={source}: a variable may name an image "
                            "the Docker engine would pull from its host's network",
                            hint="name the stage or image as it is")
        if source.lower() in stages or source.isdigit() or present(source):
            continue
        raise _missing_image(f"{line}: COPY --from={source}", source)


def _missing_image(where: str, image: str) -> UserError:
    """The refusal of ``image``, which the engine lacks, named at ``where``."""
    return UserError(f"{where}: the Docker engine does not have this image, and git iterare "
                     "does not let a project build pull one (the engine would fetch it from "
                     "its host's network)", hint=f"pull it yourself first: docker pull {image}")


def _substitute(image: str, args: dict[str, str], line: str) -> str:
    """``image`` with the defaults of the ``ARG`` lines before the first ``FROM`` put in
    (no build arguments are passed to a project build).

    Raises:
        UserError: it names an argument that has no default.
    """
    def value(match: re.Match[str]) -> str:
        key = match.group(1) or match.group(3)
        if not _OWN_VALUE.match(match.group(2) or ""):
            raise UserError(f"{line}: FROM {image}: ${{{key}{match.group(2)}}} may stand "
                            "for an image other than its argument's default",
                            hint=f"write ${{{key}}} or ${{{key}:-IMAGE}}")
        if not args.get(key):
            raise UserError(f"{line}: FROM {image}: ${key} has no default, and a project "
                            "build is given no build arguments",
                            hint=f"give it a default: ARG {key}=IMAGE before the FROM")
        return args[key]

    return _VARIABLE.sub(value, image)
