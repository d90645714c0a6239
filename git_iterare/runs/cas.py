"""Compare-and-swap ref updates with dulwich, retried until they win.

Every write to a record or to the notes ref goes through :func:`cas_update`: read the ref,
build new objects from what it points to, then move it with
``refs.set_if_equals(ref, old, new)``. When another process moved the ref first, or holds
its ``.lock`` file, we read again and rebuild, so no update is ever lost; the wait between
attempts grows a little (with jitter) so 16 writers do not move in lock-step.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, cast

from dulwich.file import FileLocked
from dulwich.objects import ZERO_SHA, ShaFile
from dulwich.repo import Repo as DulwichRepo

from git_iterare.errors import OperationFailed

if TYPE_CHECKING:
    from dulwich.objects import ObjectID
    from dulwich.refs import Ref

#: Seconds after which a write that keeps losing the race gives up.
CAS_TIMEOUT = 120.0
#: Longest pause between two attempts, seconds.
MAX_BACKOFF = 0.05

#: Identity of the commits git-iterare writes to record and notes refs.
IDENTITY = b"git-iterare <git-iterare@localhost>"


def oid(value: bytes) -> ObjectID:
    """``value`` (40 hex bytes) typed as dulwich's ObjectID."""
    return cast("ObjectID", value)


def refname(value: str | bytes) -> Ref:
    """A full ref name typed as dulwich's Ref."""
    return cast("Ref", value.encode() if isinstance(value, str) else value)


class Unchanged(Exception):
    """Raised by a builder to say the ref should stay as it is."""


def add_object(repo: DulwichRepo, obj: ShaFile) -> None:
    """Store ``obj`` as a loose object, tolerating another process writing the same one.

    dulwich writes a loose object through ``<object>.lock``; two runs of one prompt create
    identical blobs at the same moment, and the second writer then gets FileLocked. The
    object is the same whoever writes it, so wait for the other writer instead.

    Raises:
        OperationFailed: the lock stayed for :data:`CAS_TIMEOUT` seconds.
    """
    deadline = time.monotonic() + CAS_TIMEOUT
    while True:
        try:
            repo.object_store.add_object(obj)
            return
        except FileLocked:
            if obj.id in repo.object_store:
                return
            if time.monotonic() > deadline:
                raise OperationFailed(f"could not write object {obj.id.decode()}: it stayed "
                                      "locked", hint="remove a stale .lock file under "
                                      "objects/") from None
            time.sleep(0.005)


def read_ref(repo: DulwichRepo, ref: bytes) -> bytes | None:
    """The object id ``ref`` points to (hex bytes), or None when it does not exist."""
    try:
        return repo.refs[refname(ref)]
    except KeyError:
        return None


def cas_update(
    repo: DulwichRepo,
    ref: bytes,
    build: Callable[[bytes | None], bytes],
    message: str,
    *,
    timeout: float = CAS_TIMEOUT,
) -> bytes | None:
    """Move ``ref`` to ``build(old)`` atomically, retrying until no one raced us.

    Args:
        repo: the repository (its common dir).
        ref: full ref name, e.g. ``b"refs/iterare/runs/x-0123abcd"``.
        build: given the current id (None when the ref is missing), writes the new objects
            and returns the new id. Called again after every lost race, so it must only
            depend on its argument. It may raise :class:`Unchanged` to leave the ref alone.
        message: reflog message.
        timeout: seconds to keep trying.

    Returns:
        The id the ref points to afterwards (None when it was missing and left alone).

    Raises:
        OperationFailed: still losing the race after ``timeout`` seconds.
    """
    deadline = time.monotonic() + timeout
    attempt = 0
    while True:
        old = read_ref(repo, ref)
        try:
            new = build(old)
        except Unchanged:
            return old
        if new == old:
            return old
        try:
            if repo.refs.set_if_equals(refname(ref), oid(old if old is not None else ZERO_SHA),
                                       oid(new),
                                       committer=IDENTITY, message=message.encode()):
                return new
        except FileLocked:
            pass  # another writer holds ref.lock: same as losing the race
        attempt += 1
        if time.monotonic() > deadline:
            raise OperationFailed(f"could not update {ref.decode()}: other processes kept "
                                  f"changing it for {timeout:.0f} seconds",
                                  hint="try again; remove a stale .lock file if one remains")
        time.sleep(random.uniform(0, min(MAX_BACKOFF, 0.001 * 2 ** min(attempt, 6))))
