"""The sandbox API against the real engine: lifecycle, limits, secrets, refusals.

A sandbox is the agent's container joined to a network sidecar of git-iterare's own
image (container/sidecar); these tests check both containers as the engine sees them.
"""

from __future__ import annotations

import dataclasses
import json
import os
import stat
import subprocess
import time
from pathlib import Path

import docker
import pytest

from git_iterare import sandbox
from git_iterare.errors import OperationFailed, UserError
from git_iterare.sandbox import EgressPolicy, Limits, SandboxExit, SandboxSpec, agent_ids
from git_iterare.sandbox.sidecar import SIDECAR_CAPABILITIES
from git_iterare.sandbox.spec import LABEL_ROLE, LABEL_SIDECAR
from tests.sandbox_fixtures import sandbox_image  # noqa: F401  (fixture)

pytestmark = [pytest.mark.docker]

#: Never contacted: the commands below look up no allowlisted name.
POLICY = EgressPolicy.build(["example.test"], dns=["198.51.100.53"])


@pytest.fixture
def make_spec(sandbox_image: str, tmp_path: Path, request: pytest.FixtureRequest):  # noqa: F811
    created: list[str] = []
    stamp = f"{os.getpid()}-{int(time.time() * 1000) % 10**8}"

    def make(*command: str, **kwargs) -> SandboxSpec:
        name = f"itr-sandbox-api-{stamp}-{len(created)}"
        created.append(name)
        kwargs.setdefault("limits", Limits(cpus=1.0, memory="256m", pids=128))
        kwargs.setdefault("sidecar_image", sandbox_image)
        return SandboxSpec(image=sandbox_image, name=name, command=tuple(command),
                           policy=POLICY, out_dir=tmp_path / f"out{len(created)}",
                           run_id=f"run-{stamp}-{len(created)}", repo_path=str(tmp_path),
                           **kwargs)

    yield make
    for number in range(1, len(created) + 1):
        sandbox.remove(f"run-{stamp}-{number}", str(tmp_path))


def _engine():
    return docker.from_env(version="auto")


def _exists(name: str) -> bool:
    try:
        _engine().containers.get(name)
        return True
    except docker.errors.NotFound:
        return False


def test_lifecycle_output_exit_code_labels(make_spec, tmp_path: Path) -> None:
    spec = make_spec("sh", "-c", "echo out; echo err >&2; pwd; id -u; exit 7")
    cid = sandbox.start(spec)
    assert sandbox.wait(cid, timeout=60) == 7
    lines = [line.decode() for line in sandbox.output(cid, follow=True)]
    assert b"".join(sandbox.output(cid)) == "".join(lines).encode()
    # The agent's output alone, as the agent's uid (no host account has it).
    assert sorted(lines) == sorted(["out\n", "err\n", "/workspace\n",
                                    f"{agent_ids()[0]}\n"])
    sidecar_log = _engine().containers.get(f"{spec.name}-net").logs().decode()
    assert ("iterare-sandbox: firewall up: 1 domains, 0 CIDRs, DNS via 198.51.100.53; "
            "self-check passed\niterare-sandbox: ready\n") in sidecar_log
    info = sandbox.inspect(cid)
    assert info is not None
    assert (info.state, info.exit_code, info.name) == ("exited", 7, spec.name)
    assert info.labels["dev.iterare.run"] == spec.run_id
    assert info.labels["dev.iterare.repo"] == str(tmp_path)
    assert info.labels[LABEL_ROLE] == "agent"
    # The sidecar carries the run's labels too, but only the agent is listed.
    assert [c.id for c in sandbox.list_sandboxes(str(tmp_path))] == [cid]
    status = json.loads((spec.out_dir / "status.json").read_text())
    assert status["ok"] is True and status["exit_code"] == 0
    assert status["checks"] == [
        {"name": "unlisted-address-refused", "passed": True,
         "detail": "198.51.100.7:443: Connection refused"},
        {"name": "unlisted-name-unresolved", "passed": True,
         "detail": "iterare-selfcheck.invalid: not found"},
        {"name": "embedded-dns-closed", "passed": True,
         "detail": "no embedded DNS server (default bridge network)"}]
    assert list(status["timings_ms"]) == ["locked", "policy", "firewall", "self_check", "go",
                                          "trees"]
    sandbox.remove(spec.run_id, spec.repo_path)
    assert sandbox.inspect(cid) is None
    assert not _exists(f"{spec.name}-net")
    sandbox.remove(spec.run_id, spec.repo_path)  # removing twice is fine


def _agent_lines(cid: str) -> list[str]:
    text = b"".join(sandbox.output(cid, follow=True)).decode()
    return [line for line in text.splitlines() if not line.startswith("iterare-sandbox:")]


def test_tmp_is_a_tmpfs_bounded_by_the_memory_limit(make_spec) -> None:
    """What the agent writes to /tmp is memory (bounded by docker.memory), not the
    engine's disk; programs still run from it."""
    cid = sandbox.start(make_spec(
        "sh", "-c", "stat -f -c %T /tmp; df -B1 --output=size /tmp | tail -1 | tr -d ' '; "
        "printf '#!/bin/sh\\necho ran\\n' > /tmp/x && chmod +x /tmp/x && /tmp/x",
        limits=Limits(cpus=1.0, memory="256m", pids=128)))
    assert sandbox.wait(cid, timeout=60) == 0
    lines = _agent_lines(cid)
    assert lines == ["tmpfs", str(256 * 1024 * 1024), "ran"], lines


def test_host_config_limits_and_privileges(make_spec) -> None:
    spec = make_spec("true", limits=Limits(cpus=1.5, memory="300m", pids=99))
    cid = sandbox.start(spec)
    assert sandbox.wait(cid, timeout=60) == 0
    agent = _engine().containers.get(cid).attrs
    sidecar = _engine().containers.get(f"{spec.name}-net").attrs
    host = agent["HostConfig"]
    assert host["NanoCpus"] == 1_500_000_000
    assert host["Memory"] == 300 * 1024 * 1024
    assert host["PidsLimit"] == 99
    assert host["AutoRemove"] is False
    assert host["Privileged"] is False
    # The agent's container: no capability at all, the agent's uid from the start,
    # Docker's init as PID 1, the sidecar's network namespace.
    assert host["CapDrop"] == ["ALL"] and not host["CapAdd"]
    assert host["SecurityOpt"] == ["no-new-privileges:true"]
    assert host["Init"] is True
    assert agent["Config"]["User"] == f"{spec.agent_uid}:{spec.agent_gid}"
    assert host["NetworkMode"] == f"container:{sidecar['Id']}"
    assert agent["Config"]["Labels"][LABEL_SIDECAR] == sidecar["Id"]
    assert host["LogConfig"] == {"Type": "json-file",
                                 "Config": {"max-size": "50m", "max-file": "2"}}
    # The sidecar: git-iterare's own image and the few capabilities the firewall needs.
    assert sidecar["Config"]["Image"] == spec.sidecar_image
    assert sidecar["HostConfig"]["CapDrop"] == ["ALL"]
    assert sorted(sidecar["HostConfig"]["CapAdd"]) == sorted(
        f"CAP_{c}" for c in SIDECAR_CAPABILITIES) or sorted(
        sidecar["HostConfig"]["CapAdd"]) == sorted(SIDECAR_CAPABILITIES)
    assert "SYS_ADMIN" not in str(sidecar["HostConfig"]["CapAdd"])
    assert sidecar["HostConfig"]["SecurityOpt"] == ["no-new-privileges:true"]


def test_wait_timeout_then_stop(make_spec) -> None:
    spec = make_spec("sleep", "60")
    cid = sandbox.start(spec)
    started = time.monotonic()
    assert sandbox.wait(cid, timeout=1.5) is None
    assert 1.4 <= time.monotonic() - started < 10
    sandbox.stop(cid, grace_seconds=5)
    # Docker's init forwards SIGTERM to the agent and exits with its status.
    assert sandbox.wait(cid, timeout=30) == 143
    assert time.monotonic() - started < 10
    sandbox.remove(spec.run_id, spec.repo_path)  # the sidecar records refused connections
    refused = json.loads((spec.out_dir / "refused.json").read_text())
    assert refused == {"v": 1, "rejected_packets": {"ipv4": 0, "ipv6": 0}, "addresses": {}}


def test_secrets_reach_only_the_agent(make_spec, sandbox_image: str) -> None:  # noqa: F811
    script = ("echo \"token=$API_TOKEN\"; stat -c '%a %U' ~/.config/tool/cred.json; "
              "cat ~/.config/tool/cred.json; echo; stat -c '%a' ~/.config/tool; "
              "tr '\\0' '\\n' </proc/1/environ | grep -q \"$API_TOKEN\" "
              "&& echo init-has-it || echo init-clean")
    spec = make_spec("bash", "-c", script, env={"PLAIN": "1"},
                     secret_env={"API_TOKEN": "tok-123"},
                     secret_files={".config/tool/cred.json": b'{"k": "v"}'})
    cid = sandbox.start(spec)
    assert sandbox.wait(cid, timeout=60) == 0
    lines = _agent_lines(cid)
    # PID 1 is Docker's init, which the agent may read: the secrets are not in its
    # environment but in the agent's own process only.
    assert lines == ["token=tok-123", "600 agent", '{"k": "v"}', "700", "init-clean"]
    attrs = _engine().containers.get(cid).attrs
    assert not any("tok-123" in e for e in attrs["Config"]["Env"])
    assert "tok-123" not in json.dumps(attrs)
    assert "tok-123" not in json.dumps(_engine().containers.get(f"{spec.name}-net").attrs)
    # Nothing of it on the host: no file under the output directory holds it.
    for path in spec.out_dir.rglob("*"):
        assert not path.is_file() or b"tok-123" not in path.read_bytes()


def test_other_agent_uid_owns_the_trees_until_reclaimed(make_spec, tmp_path: Path,
                                                         sandbox_image: str) -> None:  # noqa: F811
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "kept.txt").write_text("kept\n")
    # A sibling (another run's tree) in the same parent, which the sidecar mounts.
    sibling = tmp_path / "sibling"
    sibling.mkdir()
    (sibling / "f").write_text("x")
    os.chmod(sibling / "f", 0o4755)
    cid = sandbox.start(make_spec(
        "sh", "-c", "id -u; id -g; whoami; test -O ~ && echo owns-home; "
        "stat -c %u /workspace/kept.txt; cp /bin/sh /workspace/suid; chmod 4755 /workspace/suid; "
        "mkfifo /workspace/pipe; echo new > /workspace/new.txt; mkdir /workspace/shared; "
        "chmod 2777 /workspace/shared; echo w > /workspace/shared/w; chmod 0666 "
        "/workspace/shared/w",
        agent_uid=1234, agent_gid=2345, owned=(tree,),
        mounts=(sandbox.Mount(tree, "/workspace", False),)))
    assert sandbox.wait(cid, timeout=60) == 0
    assert _agent_lines(cid) == ["1234", "2345", "agent", "owns-home", "1234"]
    assert (tree / "suid").stat().st_mode & stat.S_ISUID
    notes = sandbox.reclaim(cid, [tree], os.getuid(), os.getgid(), sandbox_image)
    assert notes == ["removed special file: tree/pipe"]
    for path in (tree, tree / "kept.txt", tree / "suid", tree / "new.txt"):
        assert (path.lstat().st_uid, path.lstat().st_gid) == (os.getuid(), os.getgid())
    assert not (tree / "suid").stat().st_mode & (stat.S_ISUID | stat.S_ISGID)
    assert not (tree / "pipe").exists()
    # Nothing other local users may write into: a chmod 2777 folder is 0775 again.
    assert stat.S_IMODE((tree / "shared").stat().st_mode) == 0o775
    assert stat.S_IMODE((tree / "shared" / "w").stat().st_mode) == 0o664
    for path in (sibling, sibling / "f"):  # never given away, never stripped
        assert (path.lstat().st_uid, path.lstat().st_gid) == (os.getuid(), os.getgid())
    assert (sibling / "f").stat().st_mode & stat.S_ISUID


def test_reclaim_without_the_sidecar(make_spec, tmp_path: Path,
                                     sandbox_image: str) -> None:  # noqa: F811
    """A sandbox whose sidecar is gone is reclaimed by a container of its own."""
    tree = tmp_path / "tree"
    tree.mkdir()
    spec = make_spec("sh", "-c", "mkfifo /workspace/p; touch /workspace/f", owned=(tree,),
                     mounts=(sandbox.Mount(tree, "/workspace", False),))
    cid = sandbox.start(spec)
    assert sandbox.wait(cid, timeout=60) == 0
    sandbox.remove(spec.run_id, spec.repo_path)
    assert (tree / "f").stat().st_uid == spec.agent_uid
    assert sandbox.reclaim(cid, [tree], os.getuid(), os.getgid(), sandbox_image) == [
        "removed special file: tree/p"]
    assert (tree / "f").stat().st_uid == os.getuid() and not (tree / "p").exists()
    leftovers = _engine().containers.list(all=True, filters={"label": f"{LABEL_ROLE}=reclaim"})
    assert leftovers == []


def test_name_taken_is_one_line(make_spec) -> None:
    spec = make_spec("true")
    sandbox.start(spec)
    with pytest.raises(OperationFailed) as info:
        sandbox.start(spec)
    assert info.value.render().startswith(f"cannot create the network sidecar of {spec.name}: "
                                          "the name is already taken (Conflict.")


def test_a_volume_in_use_is_named_as_such(sandbox_image: str) -> None:  # noqa: F811
    from git_iterare.sandbox import volumes as remote

    name = f"itr-inuse-{os.urandom(4).hex()}"
    engine = _engine()
    engine.volumes.create(name)
    holder = engine.containers.create(sandbox_image, ["true"], entrypoint=["true"],
                                      volumes={name: {"bind": "/v", "mode": "rw"}})
    try:
        with pytest.raises(OperationFailed) as info:
            remote.remove_volumes([name])
        assert info.value.render().startswith(
            f"cannot remove the volume {name}: it is in use by a container (")
    finally:
        holder.remove(force=True)
        engine.volumes.get(name).remove(force=True)


def test_missing_image_is_a_user_error(tmp_path: Path, sandbox_image: str) -> None:  # noqa: F811
    spec = SandboxSpec(image="itr-sandbox-no-such-image:1", name="itr-sandbox-noimg",
                       sidecar_image=sandbox_image, command=("true",), policy=POLICY,
                       out_dir=tmp_path)
    with pytest.raises(UserError) as info:
        sandbox.start(spec)
    assert info.value.render().startswith("cannot create the sandbox itr-sandbox-noimg: "
                                          "image not found")
    assert "git iterare image build" in info.value.render()
    assert not _exists("itr-sandbox-noimg-net")  # the sidecar made first is gone too


def test_missing_network_leaves_nothing_behind(make_spec) -> None:
    spec = make_spec("true", network="itr-sandbox-no-such-network")
    with pytest.raises(OperationFailed) as info:
        sandbox.start(spec)
    assert info.value.render() == (f"cannot start the network sidecar of {spec.name}: "
                                   "network itr-sandbox-no-such-network not found")
    assert sandbox.inspect(spec.name) is None
    assert not _exists(f"{spec.name}-net")


def test_sidecar_failure_is_one_line_and_leaves_nothing(make_spec) -> None:
    """The sidecar's image must be git-iterare's own: one without the sidecar fails."""
    spec = make_spec("true", sidecar_image="iterare-base:bookworm")
    with pytest.raises(OperationFailed) as info:
        sandbox.start(spec)
    assert "network sidecar" in info.value.render()
    assert "\n" not in info.value.render()
    assert not _exists(spec.name) and not _exists(f"{spec.name}-net")


def _run_raw(image: str, tmp_path: Path, *args: str, policy: str | None = None
             ) -> subprocess.CompletedProcess:
    (tmp_path / "out").mkdir(exist_ok=True)
    name = f"itr-sandbox-raw-{os.getpid()}-{int(time.time() * 1000) % 10**8}"
    try:
        return subprocess.run(
            ["docker", "run", "--name", name,
             "-e", f"ITERARE_POLICY={POLICY.to_lines() if policy is None else policy}",
             "-v", f"{tmp_path}/out:/run/iterare/out", *args, image],
            capture_output=True, text=True, timeout=60, check=False)
    finally:
        subprocess.run(["docker", "rm", "-f", name], capture_output=True, check=False)


U = ["-e", "ITERARE_AGENT_UID=1900000", "-e", "ITERARE_AGENT_GID=1900000"]


@pytest.mark.parametrize("args,policy,code,message", [
    ([*U, "--cap-drop", "NET_ADMIN"], None, SandboxExit.FIREWALL_FAILED,
     "cannot lock the network (the sidecar needs NET_ADMIN)"),
    (["--cap-add", "NET_ADMIN", "-e", "ITERARE_AGENT_UID=0", "-e", "ITERARE_AGENT_GID=0"], None,
     SandboxExit.BAD_AGENT_USER, "refusing to run the agent as root"),
    (["--cap-add", "NET_ADMIN"], None,
     SandboxExit.BAD_AGENT_USER, "ITERARE_AGENT_UID/GID must be numbers"),
    ([*U, "--cap-add", "NET_ADMIN"], "domain x.test:70000\ndns 1.2.3.4\n",
     SandboxExit.BAD_POLICY, "bad port in policy: 'x.test:70000'"),
    ([*U, "--cap-add", "NET_ADMIN"], "domain x.test:0443\n", SandboxExit.BAD_POLICY,
     "bad port in policy: 'x.test:0443'"),
    ([*U, "--cap-add", "NET_ADMIN"], "domain bad_name\ndns 1.2.3.4\n",
     SandboxExit.BAD_POLICY, "bad domain in policy: 'bad_name'"),
    ([*U, "--cap-add", "NET_ADMIN"], f"domain {'a' * 64}.test\n", SandboxExit.BAD_POLICY,
     "bad domain in policy: "),
    ([*U, "--cap-add", "NET_ADMIN"], "domain -x.test\n", SandboxExit.BAD_POLICY,
     "bad domain in policy: '-x.test'"),
    ([*U, "--cap-add", "NET_ADMIN"], "domain x..test\n", SandboxExit.BAD_POLICY,
     "bad domain in policy: 'x..test'"),
    ([*U, "--cap-add", "NET_ADMIN"], "domain x.*.test\n", SandboxExit.BAD_POLICY,
     "bad domain in policy: 'x.*.test'"),
    ([*U, "--cap-add", "NET_ADMIN"], "domain x.test/#\n", SandboxExit.BAD_POLICY,
     "bad domain in policy: 'x.test/#'"),
    ([*U, "--cap-add", "NET_ADMIN"], "local bad/name\n", SandboxExit.BAD_POLICY,
     "bad local name in policy: 'bad/name'"),
    # One entry a line: a second word is never read as another entry.
    ([*U, "--cap-add", "NET_ADMIN"], "domain x.test cidr 0.0.0.0/0\n", SandboxExit.BAD_POLICY,
     "bad policy line: "),
    ([*U, "--cap-add", "NET_ADMIN"], "open everything\n", SandboxExit.BAD_POLICY,
     "bad policy line: 'open everything'"),
    ([*U, "--cap-add", "NET_ADMIN"], "v 2\n", SandboxExit.BAD_POLICY,
     "policy version 2 is not supported"),
    ([*U, "--cap-add", "NET_ADMIN"], "", SandboxExit.BAD_POLICY, "no policy"),
    ([*U, "--cap-add", "NET_ADMIN"], "cidr 10.0.0.0/33\ndns 1.2.3.4\n",
     SandboxExit.BAD_POLICY, "bad CIDR in policy: "),
])
def test_sidecar_refuses_and_is_never_ready(sandbox_image: str, tmp_path: Path,  # noqa: F811
                                                 args: list[str], policy: str | None,
                                                 code: int, message: str) -> None:
    result = _run_raw(sandbox_image, tmp_path, *args, policy=policy)
    assert result.returncode == code, result.stderr
    assert "iterare-sandbox: ready" not in result.stderr
    # Its one error line, after at most the line that says the namespace is locked.
    lines = result.stderr.splitlines()
    assert lines[-1].startswith("iterare-sandbox: error: ")
    assert lines[:-1] in ([], ["iterare-sandbox: locked"])
    assert message in lines[-1]
    status = json.loads((tmp_path / "out" / "status.json").read_text())
    assert status["ok"] is False and status["exit_code"] == code


def test_inbound_connections_are_dropped(make_spec) -> None:
    """The agent may listen (on loopback it reaches itself), but nothing from outside the
    sandbox connects: the sidecar's INPUT policy drops it."""
    import socket

    spec = make_spec("sh", "-c", "nc -lk 7777 & sleep 0.5; nc -z -w 2 127.0.0.1 7777 "
                     "&& echo loopback-ok; sleep 30")
    cid = sandbox.start(spec)
    try:
        sidecar = _engine().containers.get(f"{spec.name}-net")
        address = sidecar.attrs["NetworkSettings"]["IPAddress"]
        assert address
        deadline = time.monotonic() + 20
        while (b"loopback-ok\n" not in sandbox.output(cid)
               and time.monotonic() < deadline):
            time.sleep(0.2)
        assert b"loopback-ok\n" in sandbox.output(cid)
        with pytest.raises(OSError):
            socket.create_connection((address, 7777), timeout=2).close()
    finally:
        sandbox.stop(cid, grace_seconds=1)


def test_volumes_of_the_image_go_with_the_sandbox(make_spec, sandbox_image: str,  # noqa: F811
                                                  tmp_path: Path) -> None:
    """A project image may declare volumes over the places secrets are put (the agent's
    home, /run/iterare): Docker then keeps them in anonymous volumes, which are removed
    with the sandbox, secrets and all."""
    context = tmp_path / "context"
    context.mkdir()
    (context / "Dockerfile").write_text(
        f'FROM {sandbox_image}\nVOLUME ["/home/agent", "/run/iterare"]\n')
    tag = f"itr-volumes-{os.getpid()}:1"
    subprocess.run(["docker", "build", "-q", "-t", tag, str(context)], check=True,
                   capture_output=True, timeout=300)
    try:
        spec = make_spec("sh", "-c", "cat /run/iterare/secrets/env/VOLUME_SECRET",
                         secret_env={"VOLUME_SECRET": "kept-in-a-volume"})
        spec = dataclasses.replace(spec, image=tag)
        cid = sandbox.start(spec)
        assert sandbox.wait(cid, timeout=60) == 0
        assert b"kept-in-a-volume" in b"".join(sandbox.output(cid))
        volumes = [m["Name"] for m in _engine().api.inspect_container(cid)["Mounts"]
                   if m["Type"] == "volume"]
        assert len(volumes) == 2
        sandbox.remove(spec.run_id, spec.repo_path)
        for name in volumes:
            with pytest.raises(docker.errors.NotFound):
                _engine().volumes.get(name)
    finally:
        subprocess.run(["docker", "rmi", "-f", tag], capture_output=True, check=False)


def test_an_attached_networks_gateway_is_known_without_one_in_its_configuration() -> None:
    """Docker leaves the gateway out of a network's IPAM configuration unless it was asked
    for (`docker network create` without --gateway); the host's address on it is still
    the subnet's first one, and it must be closed to the sandbox (found by an adversarial
    test: on a remote engine nothing else closed it)."""
    from git_iterare.sandbox.networks import network_gateways

    name = f"itr-gw-{os.getpid()}"
    subprocess.run(["docker", "network", "create", "--ipv6", "--subnet", "172.31.211.0/24",
                    "--subnet", "fd00:211::/64", name], capture_output=True, check=True)
    try:
        ipam = json.loads(subprocess.run(
            ["docker", "network", "inspect", name, "--format", "{{json .IPAM.Config}}"],
            capture_output=True, text=True, check=True).stdout)
        assert sorted(network_gateways(name)) == ["172.31.211.1", "fd00:211::1"], ipam
        # And that is the address the engine gave its bridge (the Docker host's).
        probe = subprocess.run(
            ["docker", "run", "--rm", "--network", name, "--entrypoint", "sh",
             "iterare-base:bookworm", "-c", "cat /proc/net/route"],
            capture_output=True, text=True, check=True).stdout
        assert "\t01D31FAC\t" in probe  # 172.31.211.1, little-endian
    finally:
        subprocess.run(["docker", "network", "rm", name], capture_output=True, check=False)


def test_an_allowlist_too_long_to_hand_over_is_one_line_and_leaves_nothing(make_spec) -> None:
    """The policy goes into the sidecar's environment, which Linux caps at 128 KiB."""
    names = [f"host{i}.example{i % 50}.test" for i in range(6000)]
    spec = dataclasses.replace(make_spec("true"), policy=EgressPolicy.build(names))
    with pytest.raises(UserError) as info:
        sandbox.start(spec)
    assert info.value.render().startswith(
        "the sandbox's allowlist is too long: 6000 names, ")
    assert "*.example.com" in info.value.render()
    assert not _exists(spec.name) and not _exists(f"{spec.name}-net")
