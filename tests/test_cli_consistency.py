"""The commands behave as git, the docker CLI and gh do where users expect it: option
errors that say what is wanted, TOML errors in one readable line."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import iterare


@pytest.mark.parametrize(("args", "message"), [
    (("execute", "p", "--timeout", "abc"),
     "Invalid value for '--timeout': 'abc' is not a whole number of seconds (0 or more; "
     "0: no limit) (see 'git iterare execute -h')"),
    (("execute", "p", "--timeout", "1.5"),
     "Invalid value for '--timeout': '1.5' is not a whole number of seconds (0 or more; "
     "0: no limit) (see 'git iterare execute -h')"),
    (("execute", "p", "--max-budget-usd", "nan"),
     "Invalid value for '--max-budget-usd': 'nan' is not a number of US dollars (0 or more; "
     "0: no limit) (see 'git iterare execute -h')"),
    (("log", "-v", "3"),
     "Invalid value for '-v' / '--verbosity': '3' is not 0, 1 or 2 (see 'git iterare log -h')"),
    (("stop", "--grace", "-1"),
     "Invalid value for '--grace': '-1' is not a number of seconds (0 or more) "
     "(see 'git iterare stop -h')"),
])
def test_a_bad_number_says_what_is_wanted(repo: Path, args: tuple[str, ...],
                                          message: str) -> None:
    result = iterare(*args, cwd=repo)
    assert (result.returncode, result.stderr) == (2, f"error: {message}\n")


@pytest.mark.parametrize(("text", "where", "message"), [
    ("[run]\ntimeout = 1\n[run]\n", "3:5", "Cannot declare run twice"),
    ('[claude."a b"]\n[claude."a b"]\n', "2:14", 'Cannot declare claude."a b" twice'),
    ("a = {b = 1}\na.c = 2\n", "2:8", "Cannot mutate immutable namespace a"),
])
def test_a_toml_error_is_one_line_naming_the_key(repo: Path, text: str, where: str,
                                                 message: str) -> None:
    config = repo / ".iterare" / "config.toml"
    config.parent.mkdir()
    config.write_text(text)
    result = iterare("config", cwd=repo)
    assert (result.returncode, result.stderr) == (2, f"error: {config}:{where}: {message}\n")
