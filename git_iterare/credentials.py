"""Claude credentials stored on the host, for runs to hand to the sandbox.

They live in the credentials directory: ``[claude] credentials_path`` when set (iterare
kept ``.credentials.json`` and ``.claude.json`` there, so its directory works as is),
else the global configuration directory (:func:`git_iterare.config.global_config_dir`).
The directory is made 0700 and every file 0600, written to a temporary name and renamed,
so a reader never sees a partial file. One kind is stored at a time:

* ``anthropic-api-key``: an Anthropic API key (``sk-ant-api...``), given to Claude Code
  as ANTHROPIC_API_KEY;
* ``claude-oauth-token``: a long-lived token from ``claude setup-token``
  (``sk-ant-oat...``), given as CLAUDE_CODE_OAUTH_TOKEN;
* ``.credentials.json`` (and ``.claude.json`` when present): a Claude Code login,
  copied into the agent's ``~/.claude/`` and ``~``.

Secret values are registered with :func:`git_iterare.proc.register_secret` as soon as
they are read, and never printed.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from git_iterare import proc
from git_iterare.config import Config, global_config_dir
from git_iterare.errors import OperationFailed, UserError

if TYPE_CHECKING:
    from git_iterare.agents.base import Credentials

API_KEY_FILE = "anthropic-api-key"
OAUTH_TOKEN_FILE = "claude-oauth-token"
CREDENTIALS_JSON = ".credentials.json"
CLAUDE_JSON = ".claude.json"

#: Every file this module writes, for ``--force`` to clear.
ALL_FILES = (API_KEY_FILE, OAUTH_TOKEN_FILE, CREDENTIALS_JSON, CLAUDE_JSON)

#: Command a sandboxed login runs (see :func:`login_in_sandbox`).
LOGIN_COMMAND = ("claude", "auth", "login")


@dataclass(frozen=True)
class Stored:
    """What was written.

    Attributes:
        kind: ``API key``, ``OAuth token`` or ``Code login`` (shown after "Claude").
        paths: the files, each 0600.
    """

    kind: str
    paths: tuple[Path, ...]

    def describe(self) -> str:
        """One line for the user, without the secret."""
        return f"stored Claude {self.kind} in {', '.join(map(str, self.paths))} (mode 0600)"


def credentials_dir(config: Config) -> Path:
    """The directory credentials are kept in (see the module docstring)."""
    custom = config["claude.credentials_path"]
    return Path(os.path.expanduser(custom)) if custom else global_config_dir()


def _check_private(path: Path) -> None:
    """Make a credential file others can read private again, or refuse it.

    iterare (iterare-llm) copied its credential files with mode 0644: a file owned by the
    user running git iterare is fixed (``chmod 600``) with a one-line warning, since its
    secret may have been read meanwhile. A file of another user cannot be fixed.

    Raises:
        UserError: the file is readable by others and is not the user's own, or the mode
            cannot be changed.
    """
    from git_iterare import ui

    info = path.stat()
    mode = stat.S_IMODE(info.st_mode)
    if not mode & (stat.S_IRWXG | stat.S_IRWXO):
        return
    if info.st_uid == os.geteuid():
        try:
            os.chmod(path, mode & 0o700)
        except OSError as exc:
            raise UserError(f"{path}: readable by other users (mode {mode:04o}) and "
                            f"cannot be fixed: {exc.strerror}",
                            hint=f"chmod 600 {path}") from None
        ui.warn(f"{path} was readable by other users (mode {mode:04o}); made it 0600 "
                f"(replace the credential if it may have leaked)")
        return
    raise UserError(f"{path}: readable by other users (mode {mode:04o}) and owned by "
                    f"uid {info.st_uid}, not you",
                    hint=f"have its owner run chmod 600 {path}, or store your own with "
                         f"`git iterare credentials --force`")


def _read_secret(path: Path) -> bytes | None:
    try:
        _check_private(path)
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise UserError(f"{path}: cannot read: {exc.strerror}") from None
    return data


def load(config: Config) -> Credentials | None:
    """The stored credentials as the claude agent hands them over, or None when none are.

    Raises:
        UserError: a stored file is readable by others, unreadable, or empty.
    """
    from git_iterare.agents.base import Credentials

    folder = credentials_dir(config)
    for filename, var in ((API_KEY_FILE, "ANTHROPIC_API_KEY"),
                          (OAUTH_TOKEN_FILE, "CLAUDE_CODE_OAUTH_TOKEN")):
        data = _read_secret(folder / filename)
        if data is not None:
            value = data.decode("utf-8", "replace").strip()
            if not value:
                raise UserError(f"{folder / filename}: empty",
                                hint="run `git iterare credentials --force`")
            proc.register_secret(value)
            return Credentials(env={var: value})
    login = _read_secret(folder / CREDENTIALS_JSON)
    if login is None:
        return None
    _register_login_secrets(login)
    files = {f".claude/{CREDENTIALS_JSON}": login}
    settings = _read_secret(folder / CLAUDE_JSON)
    if settings is not None:
        files[CLAUDE_JSON] = settings
    return Credentials(files=files)


def _register_login_secrets(login: bytes) -> None:
    """Register the tokens in a Claude Code login (``{"claudeAiOauth": {"accessToken":
    ..., "refreshToken": ...}}``) as secrets; other shapes are left as they are."""
    import json

    try:
        oauth = json.loads(login).get("claudeAiOauth", {})
    except (ValueError, AttributeError):
        return
    if isinstance(oauth, dict):
        for key in ("accessToken", "refreshToken"):
            if isinstance(oauth.get(key), str):
                proc.register_secret(oauth[key])


def existing(folder: Path) -> list[Path]:
    """The credential files already in ``folder``."""
    return [folder / name for name in ALL_FILES if (folder / name).exists()]


def _prepare(folder: Path, force: bool) -> None:
    """Create ``folder`` 0700; clear old credentials when ``force``, else refuse to."""
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    if stat.S_IMODE(folder.stat().st_mode) & 0o077:
        folder.chmod(0o700)
    found = existing(folder)
    if found and not force:
        raise UserError(f"Claude credentials already stored in {found[0]}",
                        hint="use --force to replace them")
    for path in found:
        path.unlink()


def write_private(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` with mode 0600, atomically (temporary file, rename)."""
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def clean_token(text: str, source: str) -> str:
    """The token in ``text`` (surrounding whitespace dropped), registered as a secret.

    Raises:
        UserError: empty, or more than one word or line (naming ``source``, not the value).
    """
    token = text.strip()
    if not token:
        raise UserError(f"{source}: no token given")
    if any(c.isspace() or ord(c) < 32 or ord(c) == 127 for c in token):
        raise UserError(f"{source}: a token is one word on one line")
    proc.register_secret(token)
    return token


def store_token(folder: Path, token: str, *, force: bool = False) -> Stored:
    """Store an API key (``sk-ant-api...``) or an OAuth token (anything else).

    Raises:
        UserError: credentials exist and ``force`` is false.
    """
    proc.register_secret(token)
    is_api_key = token.startswith("sk-ant-api")
    _prepare(folder, force)
    path = folder / (API_KEY_FILE if is_api_key else OAUTH_TOKEN_FILE)
    write_private(path, token.encode() + b"\n")
    return Stored("API key" if is_api_key else "OAuth token", (path,))


def store_api_key_from_env(folder: Path, env: Mapping[str, str], *,
                           force: bool = False) -> Stored:
    """Store ANTHROPIC_API_KEY from ``env``.

    Raises:
        UserError: the variable is unset or empty, or credentials exist without ``force``.
    """
    value = env.get("ANTHROPIC_API_KEY", "")
    if not value.strip():
        raise UserError("ANTHROPIC_API_KEY is not set", hint="export it, or paste a token")
    key = clean_token(value, "ANTHROPIC_API_KEY")
    _prepare(folder, force)
    path = folder / API_KEY_FILE
    write_private(path, key.encode() + b"\n")
    return Stored("API key", (path,))


def claude_login_files(home: Path) -> tuple[Path, Path]:
    """Where Claude Code keeps its login under ``home``: ``.claude/.credentials.json``,
    and its settings ``.claude.json``."""
    return home / ".claude" / CREDENTIALS_JSON, home / CLAUDE_JSON


def copy_claude_login(folder: Path, home: Path, *, force: bool = False) -> Stored:
    """Copy a Claude Code login from ``home`` (``~/.claude/.credentials.json``, and
    ``~/.claude.json`` when present).

    Raises:
        UserError: no login there, it is not JSON, or credentials exist without ``force``.
    """
    import json

    source, settings = claude_login_files(home)
    try:
        data = source.read_bytes()
    except FileNotFoundError:
        raise UserError(f"no Claude Code login in {source}",
                        hint="log in with `claude`, or give a token") from None
    try:
        json.loads(data)
    except ValueError:
        raise UserError(f"{source}: not JSON; is it a Claude Code login?") from None
    _prepare(folder, force)
    paths = [folder / CREDENTIALS_JSON]
    write_private(paths[0], data)
    if settings.is_file():
        paths.append(folder / CLAUDE_JSON)
        write_private(paths[1], settings.read_bytes())
    return Stored("Code login", tuple(paths))


#: Runs ``argv`` interactively (terminal attached) in the sandbox with ``home`` mounted
#: read-write as the agent user's home directory; returns its exit status.
Launcher = Callable[[Sequence[str], Path], int]


def login_in_sandbox(launch: Launcher, folder: Path, scratch: Path, *,
                     force: bool = False, argv: Sequence[str] = LOGIN_COMMAND) -> Stored:
    """Log in to Claude inside the sandbox and store the result.

    The hook for ``git iterare credentials --login`` (the runner provides ``launch``): the
    login needs Claude Code and a browser handshake with claude.ai, so it runs in the
    sandbox image rather than on the host. ``launch(argv, scratch)`` must run ``argv``
    with a terminal, as the agent user, with ``scratch`` (an empty 0700 directory)
    mounted as its home, and return the exit status. Claude Code writes the login to
    ``~/.claude/.credentials.json`` there, which is then stored as by
    :func:`copy_claude_login`. The caller removes ``scratch`` afterwards.

    Raises:
        OperationFailed: the login exited non-zero or left no credentials.
        UserError: credentials exist and ``force`` is false.
    """
    if existing(folder) and not force:
        _prepare(folder, force)  # raises with the standard message
    status = launch(list(argv), scratch)
    if status != 0:
        raise OperationFailed(f"`{' '.join(argv)}` in the sandbox failed (exit status {status})")
    if not claude_login_files(scratch)[0].is_file():
        raise OperationFailed(f"`{' '.join(argv)}` finished without storing a login")
    return copy_claude_login(folder, scratch, force=force)
