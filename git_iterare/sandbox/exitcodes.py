"""Exit statuses of the network sidecar when it cannot prepare a run's sandbox.

They mirror the table at the top of ``container/sidecar``. They are the sidecar's own:
the agent runs in a container of its own, whose exit status is always the agent's.
"""

from __future__ import annotations

import enum


class SandboxExit(enum.IntEnum):
    """Why the sidecar stopped before the agent started."""

    BAD_AGENT_USER = 90
    BAD_POLICY = 91
    RESOLVER_FAILED = 92
    FIREWALL_FAILED = 93
    SELF_CHECK_FAILED = 94
    TREES_FAILED = 95
    BAD_USAGE = 96


def describe(code: int) -> str | None:
    """One line explaining a sidecar exit status, or None for a status it never uses."""
    try:
        return {
            SandboxExit.BAD_AGENT_USER: "bad agent uid/gid",
            SandboxExit.BAD_POLICY: "bad or missing egress policy",
            SandboxExit.RESOLVER_FAILED: "the sandbox resolver did not start",
            SandboxExit.FIREWALL_FAILED: "the firewall could not be set up (NET_ADMIN missing?)",
            SandboxExit.SELF_CHECK_FAILED: "the firewall self-check failed",
            SandboxExit.TREES_FAILED: "the run's trees could not be given to the agent",
            SandboxExit.BAD_USAGE: "the sidecar was started wrongly",
        }[SandboxExit(code)]
    except ValueError:
        return None
