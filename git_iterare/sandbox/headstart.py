"""A run's network sidecar, started while ``execute`` still checks and prepares the run.

The first run after a quiet spell finds no spare sidecar (:mod:`git_iterare.sandbox.spare`)
waiting, and starting one is the longest step of its launch. Before this module it began
only once the docker SDK was loaded, the image looked up and the run recorded. Now, as
soon as the run is admitted (:func:`git_iterare.runner.guard.admit`), a thread makes a spare
for it through the local engine's socket (:mod:`git_iterare.sandbox.socketapi`, no SDK): it
looks the sidecar's image up as :func:`git_iterare.sandbox.image.ready_sidecar_image` does,
then creates and starts a sidecar from that image exactly as :mod:`spare` makes one
(:func:`git_iterare.sandbox.docker_backend.sidecar_config`). The launch then claims it, once
it runs, like any spare (:meth:`HeadStart.claim`), in place of starting its own.

It is this run's alone: its folder ``<state>/spare-<token>/`` never gets a ``spare.json``,
so no other run claims it, and ``cleanup`` or another run's sweep may remove it (the
launch then fails as when its sidecar is removed). It waits at most
:data:`WAIT_SECONDS` for its claim. A run that does not claim it (refused, interrupted,
its image rebuilt meanwhile) removes it (:meth:`HeadStart.discard`).

Only where spares serve (a local ``unix://`` engine, Docker's default bridge), and once
the folders the run trees live in exist (a refused request creates nothing: the first run
in a repository makes them); else the launch goes as before.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

# All it needs is imported here, by the caller's thread, before the docker SDK is loaded in
# another: two threads importing at once can deadlock (an old urllib3's six imports
# modules while it holds the interpreter's import lock).
from git_iterare.errors import OperationFailed
from git_iterare.sandbox import docker_backend, spare
from git_iterare.sandbox.image import ImageStatus
from git_iterare.sandbox.socketapi import EngineAnswer, SocketEngine, socket_path
from git_iterare.sandbox.spec import SandboxSpec

if TYPE_CHECKING:
    from git_iterare.sandbox.image import StatusOf

#: Given a ``StatusOf``, the id of git-iterare's own image to run the sidecar, or None
#: when it must be built first (:func:`git_iterare.sandbox.image.ready_sidecar_image`).
ImageOf = Callable[["StatusOf"], "str | None"]

#: How long a head start waits for its run's claim (seconds): the launch's checks and
#: record take well under a second. A launch that got to its claim later (a project
#: image was built meanwhile) starts a sidecar of its own instead.
WAIT_SECONDS = 120


class HeadStart:
    """A sidecar being made for one run ahead of its launch, in a thread.

    Use :func:`start` to make one.

    Attributes:
        container: the sidecar's container id once made, else None.
        error: what went wrong while it was made or started, else None.
        token: its spare token (``spare-<token>``), "" until its folder is made.
        folder: its host folder (``<state>/spare-<token>``), None until made.
        fingerprint: what it shares with the runs it can serve
            (:func:`git_iterare.sandbox.spare.fingerprint`), "" until known.
    """

    def __init__(self, engine: SocketEngine, template: SandboxSpec,
                 sidecar_image: ImageOf) -> None:
        self._engine, self._template, self._image_of = engine, template, sidecar_image
        self._created = threading.Event()
        self._done = threading.Event()
        self._claimed = False
        self._owner: int | None = None  # the folder's lock (spare.hold)
        self._until = time.monotonic() + WAIT_SECONDS - spare.CLAIM_MARGIN
        self.container: str | None = None
        self.error: BaseException | None = None
        self.token = ""
        self.folder: Path | None = None
        self.fingerprint = ""
        threading.Thread(target=self._make, daemon=True, name="sidecar-ahead").start()

    def _make(self) -> None:
        try:
            image = self._image_of(self._status)
            if image is None:
                return  # to be built first: the launch starts a sidecar of its own
            spec = dataclasses.replace(self._template, sidecar_image=image)
            self.fingerprint = spare.fingerprint(spec)
            self.token, self.folder, spare_spec = spare.new_folder(spec)
            self._owner = spare.hold(self.folder)
            config = docker_backend.sidecar_config(
                spare_spec, spare.environment(WAIT_SECONDS),
                labels=spare.labels(spec, self.token), auto_remove=True)
            self.container = self._engine.create_container(
                config, spare.container_name(self.token))
            self._created.set()
            self._engine.start_container(self.container)
        except BaseException as exc:  # the launch reports what matters, or starts its own
            self.error = exc
        finally:
            self._created.set()
            self._done.set()

    def _status(self, name: str) -> ImageStatus:
        found = self._engine.inspect_image(name)
        return ImageStatus(name, False) if found is None else \
            ImageStatus.from_inspect(name, found)

    def sidecar_for(self, spec: SandboxSpec) -> str | None:
        """The id of the sidecar made ahead, when it can serve ``spec`` (the same image,
        network, repository and tree folders: :func:`git_iterare.sandbox.spare.fingerprint`);
        waits until it is made (not started). None when it cannot serve, was not made,
        its folder was taken (by a ``cleanup`` the moment it was made, before it was held)
        or it would soon stop waiting (:data:`WAIT_SECONDS`): then it is removed, and the
        caller starts a sidecar of its own."""
        self._created.wait()
        if self.container is None or self.error is not None \
                or time.monotonic() > self._until \
                or self.folder is None or not self.folder.is_dir() \
                or self.fingerprint != spare.fingerprint(spec):
            self.discard()
            return None
        return self.container

    def claim(self, spec: SandboxSpec, hand_over: Callable[[], tuple[str, str]]) -> None:
        """Give the sidecar made ahead to ``spec``'s run once it runs (as
        :func:`git_iterare.sandbox.spare.claim` gives a spare); ``hand_over`` gives the
        policy text and ``ITERARE_TREES``.

        It is given the run's sidecar name (``<name>-net``) before its ``claim-*`` folder
        goes, so no sweep takes it for an orphan meanwhile.

        Raises:
            OperationFailed: it could not be started, or it was removed meanwhile.
            OSError: the run's folders cannot take over its own.
        """
        self._done.wait()
        if self.error is not None:
            raise OperationFailed(f"could not start the network sidecar of {spec.name}: "
                                  f"{_reason(self.error)}")
        assert self.folder is not None
        taken = spare.take(self.folder, f"claim-{spec.run_id}-{self.folder.name}")
        if taken is None:
            raise OperationFailed(f"the network sidecar started for {spec.name} was removed "
                                  "meanwhile (by `git iterare cleanup`?)",
                                  hint="start the run again")
        self._claimed = True
        try:
            spare.give(spec, taken, hand_over)
            with contextlib.suppress(EngineAnswer, OSError):  # the name is only for people
                self._engine.rename_container(str(self.container), f"{spec.name}-net")
        finally:
            shutil.rmtree(taken, ignore_errors=True)
            self._let_go()

    def _let_go(self) -> None:
        if self._owner is not None:
            os.close(self._owner)
            self._owner = None

    def discard(self) -> None:
        """Remove the sidecar made ahead unless a run claimed it (waiting until it is
        made); best effort, and harmless twice."""
        self._done.wait()
        if self._claimed:
            return
        self._claimed = True  # nothing to do a second time
        if self.container is not None:
            with contextlib.suppress(EngineAnswer, OSError):
                self._engine.remove_container(self.container)
        if self.folder is not None and (taken := spare.take(
                self.folder, f"sweep-{self.folder.name}")) is not None:
            shutil.rmtree(taken, ignore_errors=True)
        self._let_go()


def _reason(error: BaseException) -> str:
    if isinstance(error, EngineAnswer):
        return error.message
    return str(error) or type(error).__name__


def start(template: SandboxSpec, url: str, api_version: object,
          sidecar_image: ImageOf, *, spares: bool = True) -> HeadStart | None:
    """Start making a sidecar ahead for a run like ``template`` (its repository, tree
    folders, state folder and network; its image is looked up by ``sidecar_image``, given
    a function that looks an image up by name), on the engine at ``url``; None where
    this cannot be done (see the module's text): the launch then goes as before.

    Args:
        template: a spec of the run's shape: ``repo_path``, ``owned`` (in their folders),
            ``out_dir`` (in the state folder), ``network``.
        url: the engine's endpoint (``unix:///var/run/docker.sock``).
        api_version: the engine's API version learnt before (None when not known: then
            the engine is asked).
        sidecar_image: returns the id of git-iterare's own image to run, or None when it
            must be built first.
        spares: whether the run may claim a spare (``docker.spare_seconds``): then none
            is made ahead while one waits.
    """
    path = socket_path(url)
    if path is None or not spare.usable(template) or (spares and spare.waiting(template)):
        return None
    if not all(Path(t).parent.is_dir() for t in template.owned):
        return None  # the first run here makes them, once it is checked: nothing before
    known = api_version if isinstance(api_version, str) and api_version else None
    return HeadStart(SocketEngine(path, known), template, sidecar_image)
