"""One connection pool per ``ssh://`` engine.

The docker SDK's paramiko transport (``docker.transport.SSHHTTPAdapter``) keeps a pool of
connections per request URL, not per engine (docker/docker-py#2966): nearly every call
(container ids, query strings) opens a new ssh channel, and the idle ones stay open in
their pools. sshd allows 10 channels a connection (``MaxSessions``), so a command that
makes a few calls at once from several threads runs out of them ("ChannelException(2,
'Connect failed')"). :func:`adapter_class` gives the SDK's adapter with all of an engine's
calls in one pool, whose size the client sets (``max_pool_size``).
"""

from __future__ import annotations

from typing import Any


def adapter_class(base: type[Any]) -> type[Any]:
    """A subclass of ``base`` (the SDK's ``SSHHTTPAdapter``) that keys its pools by the
    engine, not by the request URL."""

    class OnePoolSSHAdapter(base):  # type: ignore[misc]  # the SDK has no types
        def get_connection(self, url: str, proxies: Any = None) -> Any:
            # The pool's host is the adapter's own; the URL only chose the pool.
            return super().get_connection(self.ssh_host, proxies)

    return OnePoolSSHAdapter
