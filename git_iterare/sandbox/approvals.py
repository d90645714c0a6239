"""Approvals of what a repository asks the sandbox for (``git iterare trust``).

A repository is untrusted: settings in it that widen the sandbox (config values, an image
layer, host variables to pass in) act only after the user approved their exact content,
as direnv's ``allow`` and mise's ``trust`` do. This module is the generic part: the
request as data (:class:`TrustRequest`), its canonical text and hash, the approval store
and the diff between what was approved and what is asked for now. Which settings count is
decided by the caller (``git_iterare.runner.trust``).

The store is one JSON file per repository in ``<config dir>/trust/`` (directory 0700,
files 0600), named by the SHA-256 of the repository's path, never inside the repository::

    {"v": 1, "repo": "/home/me/src/project", "sha256": "<hex of the canonical request>",
     "approved_at": "2026-01-01T00:00:00+00:00",
     "request": {"settings": {"mounts.volumes": ["/data:/data:ro"]},
                 "dockerfile": "FROM ...\\n", "env": ["NPM_TOKEN"]}}

A file that does not parse, has another version or whose hash does not match its request
counts as no approval (the user is asked again).
"""

from __future__ import annotations

import datetime
import difflib
import hashlib
import json
import os
import re
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: Version of the approval file format.
FORMAT_VERSION = 1

#: Largest approval file read back, in bytes (a request holds a Dockerfile and settings).
MAX_APPROVAL_BYTES = 4 * 1024 * 1024

#: Item name of the project Dockerfile in :meth:`TrustRequest.items` and messages.
DOCKERFILE = "Dockerfile"


@dataclass(frozen=True)
class TrustRequest:
    """What a repository asks for beyond the defaults.

    Attributes:
        settings: setting name (a config key ``section.key``, or another named item such
            as ``.iterare/include``) -> value (str, number, bool or a list of strings), only
            those that need approval.
        dockerfile: the project Dockerfile's text (bytes decoded as UTF-8 with
            ``surrogateescape``, so the exact bytes are kept), or None when none counts.
        env: names of host environment variables to pass into the sandbox, sorted,
            without duplicates.
    """

    settings: Mapping[str, Any] = field(default_factory=dict)
    dockerfile: str | None = None
    env: tuple[str, ...] = ()

    @classmethod
    def build(cls, settings: Mapping[str, Any] | None = None, dockerfile: str | None = None,
              env: Iterable[str] = ()) -> TrustRequest:
        """A request with ``settings`` sorted by key and ``env`` sorted and deduplicated."""
        return cls(dict(sorted((settings or {}).items())), dockerfile,
                   tuple(sorted(set(env))))

    @property
    def empty(self) -> bool:
        """True when nothing is asked for."""
        return not self.settings and self.dockerfile is None and not self.env

    def to_dict(self) -> dict[str, Any]:
        """The JSON form (see the module docstring)."""
        return {"settings": dict(self.settings), "dockerfile": self.dockerfile,
                "env": list(self.env)}

    @classmethod
    def from_dict(cls, data: Any) -> TrustRequest:
        """Read the JSON form back.

        Raises:
            ValueError: ``data`` is not of the shape :meth:`to_dict` writes.
        """
        if not isinstance(data, dict):
            raise ValueError("request is not an object")
        settings, dockerfile, env = data.get("settings"), data.get("dockerfile"), data.get("env")
        if (not isinstance(settings, dict) or not isinstance(env, list)
                or not all(isinstance(n, str) for n in env)
                or not (dockerfile is None or isinstance(dockerfile, str))):
            raise ValueError("request has the wrong shape")
        return cls.build(settings, dockerfile, env)

    def canonical(self) -> bytes:
        """The exact content as bytes: sorted, compact, ASCII JSON (what is hashed)."""
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"),
                          ensure_ascii=True).encode("ascii")

    def digest(self) -> str:
        """SHA-256 of :meth:`canonical`, as 64 hex digits."""
        return hashlib.sha256(self.canonical()).hexdigest()

    def lines(self) -> list[str]:
        """A readable form, one item per line (Dockerfile lines indented), for summaries
        and diffs. Values are JSON; nothing is sanitized here (the caller does that before
        printing to a terminal)."""
        out: list[str] = []
        for key, value in self.settings.items():
            out.append(f"{key} = {json.dumps(value, ensure_ascii=False)}")
        if self.dockerfile is not None:
            out.append(f"{DOCKERFILE}:")
            out += [f"    {line}" for line in self.dockerfile.splitlines()] or ["    "]
        if self.env:
            out.append(f"env: {', '.join(self.env)}")
        return out


@dataclass(frozen=True)
class Approval:
    """A stored approval.

    Attributes:
        repo: the repository's path as given when approving.
        request: what was approved.
        approved_at: when, ISO 8601 with offset.
    """

    repo: str
    request: TrustRequest
    approved_at: str


def unapproved(request: TrustRequest, approval: Approval | None) -> list[str]:
    """The items of ``request`` the approval does not cover, in request order.

    A setting or the Dockerfile is covered when the approved content is exactly the
    same; environment names are covered one by one (names approved earlier stay approved).

    Returns:
        Config keys, :data:`DOCKERFILE` and ``env NAME`` entries; empty when all is
        approved.
    """
    approved = approval.request if approval is not None else TrustRequest()
    missing = [key for key, value in request.settings.items()
               if key not in approved.settings or not _same(approved.settings[key], value)]
    if request.dockerfile is not None and request.dockerfile != approved.dockerfile:
        missing.append(DOCKERFILE)
    missing += [f"env {name}" for name in request.env if name not in approved.env]
    return missing


def _same(a: Any, b: Any) -> bool:
    # Exact content: 1 and 1.0 or True and 1 are different values here.
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def merged(approval: Approval | None, request: TrustRequest) -> TrustRequest:
    """What approving ``request`` stores: its settings and Dockerfile, and the union of
    its environment names with those approved before."""
    earlier = approval.request.env if approval is not None else ()
    return TrustRequest.build(request.settings, request.dockerfile, (*earlier, *request.env))


#: Most lines of each side aligned line by line in :func:`diff` once the lines both sides
#: start and end with are set aside (difflib takes time quadratic in them: two Dockerfiles
#: of 100,000 lines took more than ten minutes); a longer middle is shown as replaced.
MAX_DIFF_LINES = 2000

_HUNK = re.compile(r"@@ -(\d+)(,\d+)? \+(\d+)(,\d+)? @@")


def diff(approval: Approval | None, request: TrustRequest) -> str:
    """A unified diff from the approved content to ``request`` (:meth:`TrustRequest.lines`),
    or "" when they read the same. Without an approval the diff is from nothing.

    Of sides longer than :data:`MAX_DIFF_LINES`, only what lies between the lines both
    start and end with is aligned, when that is at most :data:`MAX_DIFF_LINES` lines on
    each side; a longer middle is one hunk replacing it whole."""
    old = approval.request.lines() if approval is not None else []
    new = request.lines()
    if max(len(old), len(new)) <= MAX_DIFF_LINES:
        return "\n".join(difflib.unified_diff(old, new, "approved", "requested", lineterm="",
                                               n=2))
    same = min(len(old), len(new))
    start = next((i for i in range(same) if old[i] != new[i]), same)
    end = next((i for i in range(same - start) if old[-1 - i] != new[-1 - i]), same - start)
    if start == len(old) == len(new):
        return ""
    first = max(0, start - 2)  # two lines of context, as difflib's n=2
    window_old = old[first:len(old) - max(0, end - 2)]
    window_new = new[first:len(new) - max(0, end - 2)]
    if max(len(old), len(new)) - start - end <= MAX_DIFF_LINES:
        lines = list(difflib.unified_diff(window_old, window_new, "approved", "requested",
                                          lineterm="", n=2))
    else:
        lines = ["--- approved", "+++ requested",
                 f"@@ -{int(bool(window_old))},{len(window_old)} "
                 f"+{int(bool(window_new))},{len(window_new)} @@",
                 *(f" {line}" for line in old[first:start]),
                 *(f"-{line}" for line in old[start:len(old) - end]),
                 *(f"+{line}" for line in new[start:len(new) - end]),
                 *(f" {line}" for line in old[len(old) - end:len(window_old) + first])]

    def shifted(line: str) -> str:  # hunks count lines from the window's start
        match = _HUNK.match(line)
        if match is None:
            return line
        return (f"@@ -{int(match[1]) + first}{match[2] or ''} "
                f"+{int(match[3]) + first}{match[4] or ''} @@{line[match.end():]}")

    return "\n".join(shifted(line) for line in lines)


class TrustStore:
    """Approvals kept under ``root`` (``<config dir>/trust``), one file per repository.

    Args:
        root: the directory; created 0700 on the first approval.
    """

    def __init__(self, root: Path):
        self.root = Path(root)

    def path(self, repo: str) -> Path:
        """The approval file of the repository at path ``repo``."""
        name = hashlib.sha256(os.fsencode(repo)).hexdigest()
        return self.root / f"{name}.json"

    def load(self, repo: str) -> Approval | None:
        """The approval of ``repo``, or None when there is none or it is unusable
        (too large, not JSON, another version, another repository, hash mismatch)."""
        path = self.path(repo)
        try:
            with path.open("rb") as handle:
                data = handle.read(MAX_APPROVAL_BYTES + 1)
        except OSError:
            return None
        if len(data) > MAX_APPROVAL_BYTES:
            return None
        try:
            doc = json.loads(data)
            if not isinstance(doc, dict) or doc.get("v") != FORMAT_VERSION:
                return None
            request = TrustRequest.from_dict(doc.get("request"))
        except ValueError:
            return None
        if doc.get("repo") != repo or doc.get("sha256") != request.digest():
            return None
        return Approval(repo, request, str(doc.get("approved_at", "")))

    def save(self, repo: str, request: TrustRequest) -> Approval:
        """Store ``request`` as the approval of ``repo``, replacing any earlier one.

        The file is written 0600 to a temporary name and renamed into place, in a 0700
        directory.

        Raises:
            OSError: the directory or file cannot be written.
        """
        self._make_root()
        now = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
        doc = {"v": FORMAT_VERSION, "repo": repo, "sha256": request.digest(),
               "approved_at": now, "request": request.to_dict()}
        text = json.dumps(doc, indent=2, ensure_ascii=True) + "\n"
        fd, tmp = tempfile.mkstemp(prefix=".approval-", dir=self.root)
        try:
            os.fchmod(fd, 0o600)
            with os.fdopen(fd, "w", encoding="ascii") as handle:
                handle.write(text)
            os.replace(tmp, self.path(repo))
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return Approval(repo, request, now)

    def revoke(self, repo: str) -> bool:
        """Forget the approval of ``repo``; True when there was one."""
        try:
            self.path(repo).unlink()
        except FileNotFoundError:
            return False
        return True

    def _make_root(self) -> None:
        self.root.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.root.mkdir(mode=0o700, exist_ok=True)
        os.chmod(self.root, 0o700)
