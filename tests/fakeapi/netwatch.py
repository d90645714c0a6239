"""Run a command in a network namespace of its own and record every DNS name it asks for.

Used as ``unshare --net --mount python3 -m tests.fakeapi.netwatch SPEC.json`` (root): the
namespace has only a loopback interface, ``/etc/resolv.conf`` is bind-mounted (privately,
in the new mount namespace) to point at a logging resolver on 127.0.0.1:53 that answers
NXDOMAIN to everything, and a fake API listens on 127.0.0.1:8765. Nothing can leave the
machine, and every name the command tries to resolve is seen.

SPEC.json: ``{"turns": [...], "argv": [...], "env": {...}, "cwd": "...", "user": "...",
"api": "anthropic"}`` (``user`` optional: run through ``runuser``; ``api``: ``anthropic``,
the default, ``openai`` for tests/fakeapi/openai_server.py or ``gemini`` for
tests/fakeapi/gemini.py). Prints one JSON object: ``returncode``, ``stdout``, ``stderr``,
``dns`` (names asked, in order) and ``requests`` (the fake API's request log).
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

from tests.fakeapi.server import FakeAnthropic

API_PORT = 8765


def _question(packet: bytes) -> tuple[str, int]:
    """The queried name and where the question section ends."""
    labels, i = [], 12
    while i < len(packet) and packet[i]:
        size = packet[i]
        labels.append(packet[i + 1:i + 1 + size].decode("latin1"))
        i += size + 1
    return ".".join(labels), i + 5  # zero byte, QTYPE, QCLASS


def serve_dns(sock: socket.socket, names: list[str]) -> None:
    while True:
        packet, peer = sock.recvfrom(4096)
        name, end = _question(packet)
        names.append(name)
        # Same id, QR + RD + RA, RCODE 3 (NXDOMAIN), the question echoed, no answers.
        reply = packet[:2] + b"\x81\x83" + packet[4:6] + b"\0\0\0\0\0\0" + packet[12:end]
        sock.sendto(reply, peer)


def main(spec_path: str) -> int:
    spec = json.loads(Path(spec_path).read_text())
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    resolv = Path(tempfile.mkdtemp()) / "resolv.conf"
    resolv.write_text("nameserver 127.0.0.1\n")
    resolv.chmod(0o644)
    resolv.parent.chmod(0o755)
    subprocess.run(["mount", "--bind", str(resolv), "/etc/resolv.conf"], check=True)
    names: list[str] = []
    dns = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    dns.bind(("127.0.0.1", 53))
    threading.Thread(target=serve_dns, args=(dns, names), daemon=True).start()
    log = Path(resolv.parent) / "requests.jsonl"
    if spec.get("api") == "openai":
        from tests.fakeapi.openai_server import FakeOpenAI

        server: Any = FakeOpenAI(spec["turns"], log, port=API_PORT)
    elif spec.get("api") == "gemini":
        from tests.fakeapi.gemini import FakeGemini

        server = FakeGemini(spec["turns"], log, port=API_PORT)
    else:
        server = FakeAnthropic(spec["turns"], log, port=API_PORT)
    with server:
        runas = ["runuser", "-u", spec["user"], "--"] if spec.get("user") else []
        env = [f"{k}={v}" for k, v in spec["env"].items()]
        done = subprocess.run([*runas, "env", "-i", *env, *spec["argv"]], cwd=spec["cwd"],
                              capture_output=True, text=True, timeout=300, check=False)
    requests = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    json.dump({"returncode": done.returncode, "stdout": done.stdout, "stderr": done.stderr,
               "dns": names, "requests": requests}, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
