"""Exit statuses of the sandbox entrypoint when it refuses to start the agent.

They mirror the table at the top of ``container/entrypoint``; any other status is the
agent's own.
"""

from __future__ import annotations

import enum


class SandboxExit(enum.IntEnum):
    """Why the entrypoint stopped before the agent started."""

    BAD_AGENT_USER = 90
    BAD_POLICY = 91
    RESOLVER_FAILED = 92
    FIREWALL_FAILED = 93
    SELF_CHECK_FAILED = 94
    SECRETS_FAILED = 95
    NO_COMMAND = 96


def describe(code: int) -> str | None:
    """One line explaining an entrypoint status, or None for the agent's own statuses."""
    try:
        return {
            SandboxExit.BAD_AGENT_USER: "bad agent uid/gid",
            SandboxExit.BAD_POLICY: "bad or missing egress policy",
            SandboxExit.RESOLVER_FAILED: "the sandbox resolver did not start",
            SandboxExit.FIREWALL_FAILED: "the firewall could not be set up (NET_ADMIN missing?)",
            SandboxExit.SELF_CHECK_FAILED: "the firewall self-check failed",
            SandboxExit.SECRETS_FAILED: "secrets could not be installed",
            SandboxExit.NO_COMMAND: "no command to run",
        }[SandboxExit(code)]
    except ValueError:
        return None
