"""A few Docker Engine API requests over the local engine's Unix socket, without the SDK.

Loading the docker SDK (requests, urllib3 and what they import) costs more CPU than
anything else in ``execute`` before the sandbox exists, and as long as starting a
container. :mod:`git_iterare.sandbox.headstart` starts a run's network sidecar meanwhile,
with the few requests here (stdlib ``http.client``); everything else goes through the
SDK. Paths are versioned (``/v1.41/...``) with the API version the SDK negotiated with this
engine before (:func:`git_iterare.sandbox.docker_errors.engine_facts`), else the engine's
own (``GET /version``), which must be :data:`MIN_API_VERSION` or later. The API:
https://docs.docker.com/engine/api/.
"""

from __future__ import annotations

import http.client
import json
import socket
import urllib.parse
from typing import Any

#: Largest answer read (bytes): an image's inspect data is a few KiB.
MAX_ANSWER_BYTES = 1 << 20
#: The oldest API version spoken here: ``HostConfig.Mounts`` came with 1.30.
MIN_API_VERSION = (1, 30)


class EngineAnswer(Exception):
    """The engine answered a request with an error status.

    Attributes:
        status: the HTTP status (404: no such image or container).
        message: the engine's ``message``.
    """

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"{status}: {message}")
        self.status = status
        self.message = message


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self._path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        try:
            sock.connect(self._path)
        except BaseException:
            sock.close()
            raise
        self.sock = sock


def socket_path(url: str) -> str | None:
    """The socket's path of an engine endpoint ``unix:///path``; None for any other."""
    if not url.startswith("unix://"):
        return None
    path = url[len("unix://"):]
    return path if path.startswith("/") else None


class SocketEngine:
    """The engine behind a Unix socket, spoken to in API version ``api_version``.

    Args:
        path: the socket's path (``/var/run/docker.sock``).
        api_version: ``1.41``, say; None to ask the engine for its own at the first
            request.
        timeout: seconds a request may take.
    """

    def __init__(self, path: str, api_version: str | None, timeout: float = 60.0) -> None:
        self.path, self.api_version, self.timeout = path, api_version, timeout

    def _version(self) -> str:
        """``api_version``, asked of the engine when unknown.

        Raises:
            OSError: the engine is older than :data:`MIN_API_VERSION`, or did not say.
            EngineAnswer: as :meth:`request`.
        """
        if self.api_version is None:
            found = self.request("GET", "/version", versioned=False)
            version = str(found.get("ApiVersion") or "") if isinstance(found, dict) else ""
            try:
                known = tuple(int(part) for part in version.split("."))
            except ValueError:
                known = ()
            if known < MIN_API_VERSION:
                raise OSError(f"the engine's API version {version or 'unknown'} is older "
                              f"than {'.'.join(map(str, MIN_API_VERSION))}")
            self.api_version = version
        return self.api_version

    def request(self, method: str, path: str, body: Any = None,
                query: dict[str, str] | None = None, *, versioned: bool = True) -> Any:
        """Send one request; return the decoded JSON answer (None when it has none).

        Raises:
            EngineAnswer: the engine answered with status 400 or more.
            OSError: the socket cannot be reached, or the answer is too long or not
                JSON.
        """
        target = f"/v{self._version()}{path}" if versioned else path
        if query:
            target += "?" + urllib.parse.urlencode(query)
        data = json.dumps(body).encode() if body is not None else None
        connection = _UnixConnection(self.path, self.timeout)
        try:
            connection.request(method, target, body=data, headers={
                "Content-Type": "application/json"} if data is not None else {})
            answer = connection.getresponse()
            raw = answer.read(MAX_ANSWER_BYTES + 1)
        except http.client.HTTPException as exc:
            raise OSError(f"the engine's answer to {method} {path} was malformed: {exc}") \
                from None
        finally:
            connection.close()
        if len(raw) > MAX_ANSWER_BYTES:
            raise OSError(f"the engine's answer to {method} {path} is too long")
        try:
            decoded = json.loads(raw) if raw.strip() else None
        except ValueError:
            decoded = None
            if answer.status < 400:
                raise OSError(f"the engine's answer to {method} {path} is not JSON") from None
        if answer.status >= 400:
            message = decoded.get("message") if isinstance(decoded, dict) else None
            raise EngineAnswer(answer.status, str(message or answer.reason))
        return decoded

    def inspect_image(self, name: str) -> dict[str, Any] | None:
        """``GET /images/{name}/json``; None when there is no such image.

        Raises:
            EngineAnswer, OSError: as :meth:`request`.
        """
        try:
            found = self.request("GET", f"/images/{urllib.parse.quote(name, safe='/:@')}/json")
        except EngineAnswer as exc:
            if exc.status == 404:
                return None
            raise
        return found if isinstance(found, dict) else None

    def create_container(self, config: dict[str, Any], name: str) -> str:
        """``POST /containers/create``; return the new container's id.

        Raises:
            EngineAnswer, OSError: as :meth:`request` (409: the name is taken).
        """
        made = self.request("POST", "/containers/create", config, {"name": name})
        if not isinstance(made, dict) or not isinstance(made.get("Id"), str):
            raise OSError("the engine's answer to a container's creation names no id")
        return str(made["Id"])

    def start_container(self, container_id: str) -> None:
        """``POST /containers/{id}/start``.

        Raises:
            EngineAnswer, OSError: as :meth:`request`.
        """
        self.request("POST", f"/containers/{container_id}/start")

    def rename_container(self, container_id: str, name: str) -> None:
        """``POST /containers/{id}/rename?name=NAME``.

        Raises:
            EngineAnswer, OSError: as :meth:`request` (409: the name is taken).
        """
        self.request("POST", f"/containers/{container_id}/rename", query={"name": name})

    def remove_container(self, container_id: str) -> None:
        """``DELETE /containers/{id}?force=1&v=1``; a missing container is no error.

        Raises:
            EngineAnswer, OSError: as :meth:`request`.
        """
        try:
            self.request("DELETE", f"/containers/{container_id}", query={"force": "1",
                                                                        "v": "1"})
        except EngineAnswer as exc:
            if exc.status != 404:
                raise
