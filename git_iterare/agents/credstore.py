"""Credentials kept on the host for runs to hand to the sandbox: what every agent's store
shares.

A store keeps its files in one directory (the global configuration directory,
:func:`git_iterare.config.global_config_dir`, unless the agent has a key choosing another),
made 0700, every file 0600 and written to a temporary name then renamed, so a reader never
sees a partial file. Secret values are registered with
:func:`git_iterare.proc.register_secret` as soon as they are read, and never printed.

:class:`CredentialStore` is what ``git iterare credentials`` drives (through
:func:`git_iterare.runner.credentials.store_credentials`); an agent that needs credentials
sets :attr:`git_iterare.agents.base.Agent.credential_store` to one. :class:`KeyFileStore` is
the whole store of an agent whose credential is one API key.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from git_iterare import proc
from git_iterare.errors import OperationFailed, UserError
from git_iterare.settings import Settings, global_config_dir

if TYPE_CHECKING:
    from git_iterare.agents.values import Credentials

#: Runs ``argv`` interactively (terminal attached) in the sandbox with ``home`` mounted
#: read-write as the agent user's home directory; returns its exit status.
Launcher = Callable[[Sequence[str], Path], int]


@dataclass(frozen=True)
class Stored:
    """What was written.

    Attributes:
        kind: what it is, with whose it is (``Claude API key``, ``OpenAI API key``).
        paths: the files, each 0600.
    """

    kind: str
    paths: tuple[Path, ...]

    def describe(self) -> str:
        """One line for the user, without the secret."""
        return f"stored {self.kind} in {', '.join(map(str, self.paths))} (mode 0600)"


def refuse_non_files(paths: Sequence[Path]) -> None:
    """Refuse directories (or other non-files) where credential files belong.

    iterare (iterare-llm) bind-mounted ``.credentials.json`` and ``.claude.json`` from its
    credentials directory; where one was missing, Docker created a directory in its place
    (what the engine does for a bind-mount source that does not exist). Such a directory
    is nobody's credential: it is named for the user to remove, never changed.

    Args:
        paths: where credential files belong (symbolic links followed); missing ones are
            fine.

    Raises:
        UserError: some are directories or other non-regular files; one line naming them
            all and the command that removes them.
    """
    bad: list[Path] = []
    empty_dirs = True
    for path in paths:
        try:
            mode = path.stat().st_mode
        except FileNotFoundError:
            continue
        if stat.S_ISREG(mode):
            continue
        bad.append(path)
        try:
            empty_dirs = empty_dirs and stat.S_ISDIR(mode) and not any(os.scandir(path))
        except OSError:
            empty_dirs = False
    if not bad:
        return
    several = len(bad) > 1
    if all(path.is_dir() for path in bad):
        what = "directories" if several else "a directory"
    else:
        what = "not regular files" if several else "not a regular file"
    belongs = "credential files belong" if several else "a credential file belongs"
    raise UserError(f"{', '.join(map(str, bad))}: {what} where {belongs} (Docker makes a "
                    f"directory when it mounts a missing file, as iterare's runs did)",
                    hint=f"remove {'them' if several else 'it'}: "
                         f"{'rmdir' if empty_dirs else 'rm -r'} {' '.join(map(str, bad))}")


def check_private(path: Path) -> None:
    """Make a credential file others can read private again, or refuse it.

    iterare (iterare-llm) copied its credential files with mode 0644: a file owned by the
    user running git iterare is fixed (``chmod 600``) with a one-line warning, since its
    secret may have been read meanwhile. A file of another user cannot be fixed.

    Raises:
        FileNotFoundError: there is no such file.
        UserError: it is no regular file (:func:`refuse_non_files`), or it is readable by
            others and is not the user's own, or the mode cannot be changed.
    """
    from git_iterare import ui

    refuse_non_files([path])
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


def read_secret(path: Path) -> bytes | None:
    """The content of a credential file (checked by :func:`check_private`), or None when
    there is no such file.

    Raises:
        UserError: unreadable, or readable by others and not fixable.
    """
    try:
        check_private(path)
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise UserError(f"{path}: cannot read: {exc.strerror}") from None
    return data


def read_token(path: Path) -> str | None:
    """The one-line secret in ``path`` (registered as a secret), or None without a file.

    Raises:
        UserError: as :func:`read_secret`, or the file is empty.
    """
    data = read_secret(path)
    if data is None:
        return None
    value = data.decode("utf-8", "replace").strip()
    if not value:
        raise UserError(f"{path}: empty", hint="run `git iterare credentials --force`")
    proc.register_secret(value)
    return value


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


def existing(folder: Path, names: Sequence[str]) -> list[Path]:
    """The files of ``names`` already in ``folder``.

    Raises:
        UserError: some are directories or other non-files (:func:`refuse_non_files`).
    """
    found = [folder / name for name in names if (folder / name).exists()]
    refuse_non_files(found)
    return found


def replace_files(folder: Path, names: Sequence[str], new: Mapping[str, bytes], force: bool,
                  label: str) -> tuple[Path, ...]:
    """Store ``new`` in ``folder`` (made 0700) as the one set of credentials among the
    files of ``names``.

    Nothing is removed before the new files are written: each is written 0600 and renamed
    into place (:func:`write_private`), and only then are the other files of ``names``
    removed, so a failure leaves the credentials stored before.

    Args:
        folder: the store's directory.
        names: every file name the store writes there.
        new: file name (one of ``names``) to content, in the order written.
        force: replace credentials already stored.
        label: whose credentials, in messages.

    Returns:
        The paths written, in the order of ``new``.

    Raises:
        UserError: some exist and ``force`` is false, or one of ``names`` is a directory
            (:func:`refuse_non_files`); nothing was changed.
    """
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    if stat.S_IMODE(folder.stat().st_mode) & 0o077:
        folder.chmod(0o700)
    found = existing(folder, names)
    if found and not force:
        raise UserError(f"{label} credentials already stored in {found[0]}",
                        hint="use --force to replace them")
    for name, data in new.items():
        write_private(folder / name, data)
    written = tuple(folder / name for name in new)
    for path in found:
        if path not in written:
            path.unlink(missing_ok=True)
    return written


class CredentialStore:
    """How one agent's credentials are kept on the host and stored by
    ``git iterare credentials``; subclasses fill in what their agent has.

    Attributes:
        label: whose credentials, in messages (``Claude``, ``OpenAI``).
        files: every file name the store writes in :meth:`directory` (``--force`` clears
            them all).
        api_key_env: the host variable ``--api-key-env`` stores.
        token_prompt: what a terminal asks for when no option is given.
        login_command: argv of a login run inside the sandbox (``--login``), or None when
            the agent has none.
        login_domains: names that login must reach besides the agent's API.
        location_keys: configuration keys choosing where the files go (a repository sets
            them only with the user's approval).
    """

    label: str = ""
    files: tuple[str, ...] = ()
    api_key_env: str = ""
    token_prompt: str = "Paste an API key"
    login_command: tuple[str, ...] | None = None
    login_domains: tuple[str, ...] = ()
    location_keys: tuple[str, ...] = ()

    def directory(self, config: Settings) -> Path:
        """The directory the files are kept in."""
        return global_config_dir()

    def existing(self, config: Settings) -> list[Path]:
        """The credential files already stored."""
        return existing(self.directory(config), self.files)

    def refuse_existing(self, config: Settings) -> None:
        """Raise the standard refusal when credentials are stored.

        Raises:
            UserError: some are (``--force`` replaces them).
        """
        found = self.existing(config)
        if found:
            raise UserError(f"{self.label} credentials already stored in {found[0]}",
                            hint="use --force to replace them")

    def load(self, config: Settings) -> Credentials | None:
        """The stored credentials as the agent hands them to a run, or None when none are.

        Raises:
            UserError: a stored file is readable by others, unreadable, or empty.
        """
        return None

    def store_token(self, config: Settings, token: str, *, force: bool = False) -> Stored:
        """Store a token (an API key, or what the agent's login prints).

        Raises:
            UserError: credentials exist and ``force`` is false.
        """
        raise NotImplementedError

    def store_api_key_from_env(self, config: Settings, env: Mapping[str, str], *,
                               force: bool = False) -> Stored:
        """Store the key in :attr:`api_key_env`.

        Raises:
            UserError: the variable is unset or empty, or credentials exist without
                ``force``.
        """
        value = env.get(self.api_key_env, "")
        if not value.strip():
            raise UserError(f"{self.api_key_env} is not set",
                            hint="export it, or paste a token")
        return self.store_token(config, clean_token(value, self.api_key_env), force=force)

    def host_login(self, home: Path) -> Path | None:
        """A login the agent's own CLI left under ``home`` that :meth:`copy_login` takes,
        or None (``git iterare credentials`` without options then asks for a token)."""
        return None

    def copy_login(self, config: Settings, home: Path, *, force: bool = False) -> Stored:
        """Store the login the agent's CLI keeps under ``home``.

        Raises:
            UserError: there is none, it is malformed, or credentials exist without
                ``force``.
        """
        raise UserError(f"{self.label}: no login to copy", hint="give a token")

    def login_in_sandbox(self, launch: Launcher, config: Settings, scratch: Path, *,
                         force: bool = False, argv: Sequence[str] | None = None) -> Stored:
        """Run :attr:`login_command` in the sandbox with ``scratch`` as the agent's home
        (``launch(argv, scratch)``, see :data:`Launcher`), then store the login it left
        there as :meth:`copy_login` does.

        The hook for ``git iterare credentials --login``: a login needs the agent's CLI and
        often a browser handshake, so it runs in the sandbox image rather than on the
        host. ``launch`` must run the command with a terminal, as the agent user, with
        ``scratch`` (an empty 0700 directory the caller removes afterwards) as its home.
        ``argv`` replaces :attr:`login_command` (tests).

        Raises:
            UserError: the agent has no such login, or credentials exist without ``force``.
            OperationFailed: the login exited non-zero or left no login.
        """
        argv = self.login_command if argv is None else tuple(argv)
        if argv is None:
            raise UserError(f"{self.label} has no login in the sandbox",
                            hint="use --token-file or --api-key-env")
        if not force:
            self.refuse_existing(config)
        status = launch(list(argv), scratch)
        if status != 0:
            raise OperationFailed(f"`{' '.join(argv)}` in the sandbox failed "
                                  f"(exit status {status})")
        if self.host_login(scratch) is None:
            raise OperationFailed(f"`{' '.join(argv)}` finished without storing a login")
        return self.copy_login(config, scratch, force=force)


class KeyFileStore(CredentialStore):
    """An agent whose credential is one API key, kept in the file :attr:`key_file` and
    handed to runs as the variable :attr:`api_key_env`."""

    key_file: str = ""

    def __init__(self, label: str, api_key_env: str, key_file: str):
        self.label = label
        self.api_key_env = api_key_env
        self.key_file = key_file
        self.files = (key_file,)
        self.token_prompt = f"Paste an {label} API key"

    def load(self, config: Settings) -> Credentials | None:
        from git_iterare.agents.values import Credentials

        value = read_token(self.directory(config) / self.key_file)
        return None if value is None else Credentials(env={self.api_key_env: value})

    def store_token(self, config: Settings, token: str, *, force: bool = False) -> Stored:
        proc.register_secret(token)
        paths = replace_files(self.directory(config), self.files,
                              {self.key_file: token.encode() + b"\n"}, force, self.label)
        return Stored(f"{self.label} API key", paths)
