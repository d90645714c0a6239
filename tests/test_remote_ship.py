"""Shipping a run to an engine that shares no filesystem with the client (the DinD engine
of tests/engines.py over tcp+TLS), called directly: one archive fills the object cache,
the run gitdir and the worktree, and a porter from git-iterare's own image checks the
base out there, as the agent's uid, while the sandbox would be launched; the agent's
container then finds the checkout done."""

from __future__ import annotations

import contextlib
import io
import os
import tarfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import docker.errors
import pytest

from git_iterare.git import repo as repo_mod
from git_iterare.runner import ship
from git_iterare.sandbox import agent_ids, remote
from git_iterare.sandbox.engine import TLS, Engine, using
from tests.conftest import git
from tests.engines import DindEngine

pytestmark = pytest.mark.docker


@pytest.fixture(scope="module")
def remote_image(dind_engine: DindEngine, sandbox_image: str) -> str:
    """The sandbox image, built here and copied into the DinD engine."""
    dind_engine.load_image(sandbox_image)
    return sandbox_image


@pytest.fixture
def engine(dind_engine: DindEngine) -> Iterator[Engine]:
    certs = dind_engine.cert_path
    tls = TLS(True, str(certs / "ca.pem"), str(certs / "cert.pem"), str(certs / "key.pem"))
    with using(Engine("dind-test", dind_engine.tcp_url, tls)) as chosen:
        yield chosen


def _files(chunks: Iterator[bytes]) -> dict[str, tarfile.TarInfo | bytes]:
    """name (first component dropped) -> content of regular files, TarInfo of others."""
    data = b"".join(chunks)
    found: dict[str, tarfile.TarInfo | bytes] = {}
    if not data:
        return found
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        for member in tar:
            name = member.name.partition("/")[2]
            handle = tar.extractfile(member) if member.isfile() else None
            found[name] = handle.read() if handle is not None else member
            if handle is not None:
                found["@owner:" + name] = member
    return found


def test_ship_fills_the_volumes_and_the_porter_checks_out_as_the_agent(
        repo: Path, hermetic_env: Path, engine: Engine, remote_image: str,
        dind_engine: DindEngine) -> None:
    (repo / "tool.sh").write_text("#!/bin/sh\necho tool\n")
    os.chmod(repo / "tool.sh", 0o755)
    os.symlink("README.md", repo / "link")
    (repo / "notes.env").write_text("TOKEN=local\n")  # untracked, included
    (repo / ".iterare").mkdir()
    (repo / ".iterare" / "include").write_text("notes.env\n")
    git("add", "tool.sh", "link", ".iterare/include", cwd=repo)
    git("commit", "-qm", "files", cwd=repo)
    r = repo_mod.discover(repo)
    base = git("rev-parse", "HEAD", cwd=repo).stdout.strip()
    run_id = f"ship-{uuid.uuid4().hex[:8]}"
    uid, gid = agent_ids()
    trees = ship.remote_trees(r, run_id, {})
    labels = {"dev.iterare.repo": str(repo), "dev.iterare.run": run_id}
    inner = dind_engine.client()
    try:
        ship.make_volumes(r, trees, labels)
        first = ship.ship(r, run_id, base, trees, remote_image, labels, (uid, gid))
        assert first.objects > 0 and first.pack_bytes > 0
        volumes = {trees.work: ("/w", True), trees.git: ("/g", True)}
        with remote.Porter(remote_image, volumes, labels) as reader:
            deadline = time.monotonic() + 60
            while _files(reader.get(f"/g/{ship.PENDING}")):  # the checkout goes on
                assert time.monotonic() < deadline, "the porter's checkout did not end"
                time.sleep(0.2)
            work, gitdir = _files(reader.get("/w")), _files(reader.get("/g"))
        # The base is checked out, the include file copied over it, all the agent's.
        assert work["README.md"] == b"hello\n"
        assert work["tool.sh"] == b"#!/bin/sh\necho tool\n"
        assert work["notes.env"] == b"TOKEN=local\n"
        tool = work["@owner:tool.sh"]
        assert isinstance(tool, tarfile.TarInfo)
        assert (tool.uid, tool.gid, tool.mode & 0o111) == (uid, gid, 0o111)
        link = work["link"]
        assert isinstance(link, tarfile.TarInfo) and link.issym() and link.linkname == "README.md"
        index = gitdir["@owner:index"]
        assert isinstance(index, tarfile.TarInfo) and index.uid == uid
        assert "iterare-include/notes.env" not in gitdir
        # The porter removed itself once done.
        deadline = time.monotonic() + 30
        while inner.containers.list(all=True, filters={"label": f"dev.iterare.run={run_id}"}):
            assert time.monotonic() < deadline, "the porter was left behind"
            time.sleep(0.2)
        # The same base again: nothing new for the cache.
        trees2 = ship.remote_trees(r, run_id + "x", {})
        ship.make_volumes(r, trees2, labels)
        again = ship.ship(r, run_id + "x", base, trees2, remote_image, labels, (uid, gid))
        assert (again.objects, again.pack_bytes) == (0, 0)
    finally:
        for container in inner.containers.list(
                all=True, filters={"label": f"dev.iterare.repo={repo}"}):
            with contextlib.suppress(docker.errors.APIError):  # or the engine removes it
                container.remove(force=True)
        for volume in inner.volumes.list(filters={"label": f"dev.iterare.repo={repo}"}):
            for _ in range(20):
                try:
                    volume.remove(force=True)
                    break
                except Exception:  # still in use by a porter that is ending
                    time.sleep(0.3)
