"""The sandbox API against the real engine: lifecycle, limits, secrets, refusals."""

from __future__ import annotations

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
from git_iterare.sandbox import EgressPolicy, Limits, SandboxExit, SandboxSpec
from git_iterare.sandbox.docker_backend import LABEL_STATE
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
        return SandboxSpec(image=sandbox_image, name=name, command=tuple(command),
                           policy=POLICY, out_dir=tmp_path / f"out{len(created)}",
                           run_id=f"run-{stamp}", repo_path=str(tmp_path), **kwargs)

    yield make
    for name in created:
        sandbox.remove(name)


def test_lifecycle_output_exit_code_labels(make_spec, tmp_path: Path) -> None:
    spec = make_spec("sh", "-c", "echo out; echo err >&2; pwd; id -u; exit 7")
    cid = sandbox.launch(spec)
    assert sandbox.wait(cid, timeout=60) == 7
    lines = [line.decode() for line in sandbox.attach(cid)]
    assert sandbox.logs(cid) == "".join(lines).encode()
    assert lines[0].startswith("iterare-sandbox: firewall up: 1 domains, 0 CIDRs, "
                               "DNS via 198.51.100.53; self-check passed")
    # stdout and stderr are separate pipes: their relative order is not kept.
    assert sorted(lines[1:]) == sorted(["out\n", "err\n", "/workspace\n", "1000\n"])
    info = sandbox.inspect(cid)
    assert info is not None
    assert (info.state, info.exit_code, info.name) == ("exited", 7, spec.name)
    assert info.labels["dev.iterare.run"] == spec.run_id
    assert info.labels["dev.iterare.repo"] == str(tmp_path)
    assert [c.id for c in sandbox.list_sandboxes(str(tmp_path))] == [cid]
    state = Path(info.labels[LABEL_STATE])
    assert stat.S_IMODE(state.stat().st_mode) == 0o700
    status = json.loads((spec.out_dir / "status.json").read_text())
    assert status["ok"] is True and status["exit_code"] == 0
    assert status["checks"] == [
        {"name": "unlisted-address-refused", "passed": True,
         "detail": "198.51.100.7:443: Connection refused"},
        {"name": "unlisted-name-unresolved", "passed": True,
         "detail": "iterare-selfcheck.invalid: not found"},
        {"name": "embedded-dns-closed", "passed": True,
         "detail": "no embedded DNS server (default bridge network)"}]
    assert list(status["timings_ms"]) == ["policy", "firewall", "self_check"]
    sandbox.remove(cid)
    assert sandbox.inspect(cid) is None
    assert not state.exists()
    sandbox.remove(cid)  # removing twice is fine


def _agent_lines(cid: str) -> list[str]:
    text = b"".join(sandbox.attach(cid)).decode()
    return [line for line in text.splitlines() if not line.startswith("iterare-sandbox:")]


def test_host_config_limits_and_privileges(make_spec) -> None:
    spec = make_spec("true", limits=Limits(cpus=1.5, memory="300m", pids=99))
    cid = sandbox.launch(spec)
    assert sandbox.wait(cid, timeout=60) == 0
    host = docker.from_env(version="auto").containers.get(cid).attrs["HostConfig"]
    assert host["NanoCpus"] == 1_500_000_000
    assert host["Memory"] == 300 * 1024 * 1024
    assert host["PidsLimit"] == 99
    assert host["AutoRemove"] is False
    assert host["Privileged"] is False
    assert host["CapDrop"] == ["ALL"]
    assert "SYS_ADMIN" not in host["CapAdd"] and "NET_ADMIN" in host["CapAdd"]
    assert host["SecurityOpt"] == ["no-new-privileges:true"]


def test_wait_timeout_then_stop(make_spec) -> None:
    spec = make_spec("sleep", "60")
    cid = sandbox.launch(spec)
    started = time.monotonic()
    assert sandbox.wait(cid, timeout=1.5) is None
    assert 1.4 <= time.monotonic() - started < 10
    sandbox.stop(cid, grace_seconds=5)
    # The entrypoint forwards SIGTERM to the agent and exits with its status.
    assert sandbox.wait(cid, timeout=30) == 143
    assert time.monotonic() - started < 10
    refused = json.loads((spec.out_dir / "refused.json").read_text())
    assert refused == {"v": 1, "rejected_packets": {"ipv4": 0, "ipv6": 0}, "addresses": {}}


def test_secrets_reach_only_the_agent(make_spec, sandbox_image: str) -> None:  # noqa: F811
    script = ("echo \"token=$API_TOKEN\"; stat -c '%a %U' ~/.config/tool/cred.json; "
              "cat ~/.config/tool/cred.json; echo; stat -c '%a' ~/.config/tool; "
              "cat /proc/1/environ >/dev/null 2>&1 && echo environ-readable || echo environ-closed")
    spec = make_spec("bash", "-c", script, env={"PLAIN": "1"},
                     secret_env={"API_TOKEN": "tok-123"},
                     secret_files={".config/tool/cred.json": b'{"k": "v"}'})
    cid = sandbox.launch(spec)
    assert sandbox.wait(cid, timeout=60) == 0
    lines = _agent_lines(cid)
    assert lines == ["token=tok-123", "600 agent", '{"k": "v"}', "700", "environ-closed"]
    attrs = docker.from_env(version="auto").containers.get(cid).attrs
    assert not any("tok-123" in e for e in attrs["Config"]["Env"])
    assert "tok-123" not in json.dumps(attrs)
    state = Path(attrs["Config"]["Labels"][LABEL_STATE])
    secret = state / "secrets" / "env" / "API_TOKEN"
    assert stat.S_IMODE(secret.stat().st_mode) == 0o600
    assert "tok-123" not in (spec.out_dir / "status.json").read_text()


def test_other_agent_uid(make_spec) -> None:
    cid = sandbox.launch(make_spec("sh", "-c", "id -u; id -g; test -O ~ && echo owns-home",
                                   agent_uid=1234, agent_gid=2345))
    assert sandbox.wait(cid, timeout=60) == 0
    assert _agent_lines(cid) == ["1234", "2345", "owns-home"]


def test_name_taken_is_one_line(make_spec) -> None:
    spec = make_spec("true")
    sandbox.launch(spec)
    with pytest.raises(OperationFailed) as info:
        sandbox.launch(spec)
    assert info.value.render().startswith(f"cannot create the sandbox {spec.name}: "
                                          "the name is already taken (Conflict.")


def test_missing_image_is_a_user_error(tmp_path: Path) -> None:
    spec = SandboxSpec(image="itr-sandbox-no-such-image:1", name="itr-sandbox-noimg",
                       command=("true",), policy=POLICY, out_dir=tmp_path)
    with pytest.raises(UserError) as info:
        sandbox.launch(spec)
    assert info.value.render().startswith("cannot create the sandbox itr-sandbox-noimg: "
                                          "image not found")
    assert "git iterare image build" in info.value.render()


def test_missing_network_leaves_nothing_behind(make_spec) -> None:
    spec = make_spec("true", network="itr-sandbox-no-such-network")
    with pytest.raises(OperationFailed) as info:
        sandbox.launch(spec)
    assert info.value.render() == (f"cannot start the sandbox {spec.name}: "
                                   "network itr-sandbox-no-such-network not found")
    assert sandbox.inspect(spec.name) is None


def _run_raw(image: str, tmp_path: Path, *args: str, policy: str | None = None
             ) -> subprocess.CompletedProcess:
    (tmp_path / "policy.json").write_text(policy or POLICY.to_json())
    (tmp_path / "out").mkdir(exist_ok=True)
    name = f"itr-sandbox-raw-{os.getpid()}-{int(time.time() * 1000) % 10**8}"
    try:
        return subprocess.run(
            ["docker", "run", "--name", name, "-v",
             f"{tmp_path}/policy.json:/run/iterare/policy.json:ro",
             "-v", f"{tmp_path}/out:/run/iterare/out", *args, image,
             "sh", "-c", "echo AGENT-RAN"],
            capture_output=True, text=True, timeout=60, check=False)
    finally:
        subprocess.run(["docker", "rm", "-f", name], capture_output=True, check=False)


@pytest.mark.parametrize("args,policy,code,message", [
    (["--cap-drop", "NET_ADMIN"], None, SandboxExit.FIREWALL_FAILED,
     "cannot create ipsets (the container needs NET_ADMIN)"),
    (["--cap-add", "NET_ADMIN", "-e", "ITERARE_AGENT_UID=0"], None,
     SandboxExit.BAD_AGENT_USER, "refusing to run the agent as root"),
    (["--cap-add", "NET_ADMIN"], '{"domains": "x"}', SandboxExit.BAD_POLICY,
     "needs arrays domains, cidrs, dns"),
    (["--cap-add", "NET_ADMIN"], '{"domains": ["bad_name"], "cidrs": [], "dns": ["1.2.3.4"]}',
     SandboxExit.BAD_POLICY, "bad domain in policy: 'bad_name'"),
    (["--cap-add", "NET_ADMIN"],
     '{"domains": ["x.test\\nc 0.0.0.0/0"], "cidrs": [], "dns": ["1.2.3.4"]}',
     SandboxExit.BAD_POLICY, "needs arrays domains, cidrs, dns of strings without spaces"),
    (["--cap-add", "NET_ADMIN"], '{"domains": [], "cidrs": ["10.0.0.0/33"], "dns": ["1.2.3.4"]}',
     SandboxExit.BAD_POLICY, "bad CIDR in policy: "),
])
def test_entrypoint_refuses_and_agent_never_runs(sandbox_image: str, tmp_path: Path,  # noqa: F811
                                                 args: list[str], policy: str | None,
                                                 code: int, message: str) -> None:
    result = _run_raw(sandbox_image, tmp_path, *args, policy=policy)
    assert result.returncode == code, result.stderr
    assert "AGENT-RAN" not in result.stdout
    assert result.stderr.startswith("iterare-sandbox: error: ")
    assert message in result.stderr
    status = json.loads((tmp_path / "out" / "status.json").read_text())
    assert status["ok"] is False and status["exit_code"] == code
