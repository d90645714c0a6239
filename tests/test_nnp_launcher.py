"""iterare-nnp (container/nnp.c), the first program of a swarm task, in git-iterare's
image: it sets no_new_privs for what it starts, which a set-uid program then cannot lift,
and fails in one line with status 127 (a container of the image on the local engine,
without Docker's own no-new-privileges)."""

from __future__ import annotations

import subprocess

import pytest

from git_iterare.sandbox.swarm_backend import NNP_IN_IMAGE

pytestmark = pytest.mark.docker

#: A set-uid copy of id(1), then the task's view of itself through it.
SCRIPT = ("cp /usr/bin/id /tmp/id && chmod 4755 /tmp/id && "
          "exec setpriv --reuid 1900000 --regid 1900000 --clear-groups "
          f"{NNP_IN_IMAGE} /bin/sh -c "
          "'grep ^NoNewPrivs /proc/self/status; /tmp/id -u; echo \"$0 $1\"' one two")


def _run(image: str, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["docker", "run", "--rm", "--network", "none", "--entrypoint",
                           argv[0], image, *argv[1:]],
                          capture_output=True, text=True, timeout=120, check=False)


def test_it_sets_no_new_privs_before_its_command(sandbox_image: str) -> None:
    # Without it, the set-uid id says 0: the control that the test can see the bit's work.
    plain = _run(sandbox_image, "/bin/sh", "-c", SCRIPT.replace(f"{NNP_IN_IMAGE} ", ""))
    assert plain.stdout.splitlines()[:2] == ["NoNewPrivs:\t0", "0"], plain
    ran = _run(sandbox_image, "/bin/sh", "-c", SCRIPT)
    assert ran.returncode == 0, ran
    assert ran.stdout.splitlines() == ["NoNewPrivs:\t1", "1900000", "one two"], ran


@pytest.mark.parametrize("argv", [(), ("/no/such/program",)])
def test_it_fails_in_one_line(sandbox_image: str, argv: tuple[str, ...]) -> None:
    ran = _run(sandbox_image, NNP_IN_IMAGE, *argv)
    assert ran.returncode == 127, ran
    assert ran.stderr == ("iterare-nnp: error: cannot set no_new_privs or start the "
                          "command\n"), ran
