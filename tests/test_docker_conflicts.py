"""The engine's 409 (conflict) answers, as docker_errors words them: a name taken, a volume
in use, or a container someone else is removing already (or has marked for removal). The
real engine's answers for the first two are in test_sandbox_api.py; the third is a race
(two removals at once), so its answer is built here as the engine words it."""

from __future__ import annotations

from typing import Any

import pytest
import requests

from git_iterare.errors import OperationFailed
from git_iterare.sandbox.docker_errors import docker_errors


def _conflict(message: str) -> Any:
    import docker.errors

    response = requests.Response()
    response.status_code = 409
    response.reason = "Conflict"
    return docker.errors.APIError("409 Client Error: Conflict", response=response,
                                  explanation=message)


@pytest.mark.parametrize(("message", "said"), [
    ('Conflict. The container name "/x" is already in use by container "c0ffee".',
     "the name is already taken"),
    ("remove x: volume is in use - [c0ffee]", "it is in use by a container"),
    ("removal of container c0ffee is already in progress", "something else is removing it"),
    ("container c0ffee is dead or marked for removal", "something else is removing it"),
])
def test_conflicts_say_what_conflicted(message: str, said: str) -> None:
    with pytest.raises(OperationFailed) as raised, docker_errors("remove x"):
        raise _conflict(message)
    assert str(raised.value).startswith(f"cannot remove x: {said} (")
