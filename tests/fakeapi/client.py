"""The test side of the fake APIs: a JSON request as an agent's SDK sends it."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Mapping
from typing import Any


def post(url: str, body: Any, headers: Mapping[str, str]) -> tuple[str, bytes]:
    """POST ``body`` as JSON to ``url`` with ``headers`` (the API key's, typically).

    Returns:
        The reply's content type and body.

    Raises:
        urllib.error.HTTPError: the fake answered an error status.
    """
    request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                     headers={"content-type": "application/json", **headers})
    with urllib.request.urlopen(request, timeout=10) as response:
        return response.headers["content-type"], response.read()
