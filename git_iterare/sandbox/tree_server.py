"""git-iterare's tree server: how a run's trees reach an agent on a swarm worker and come back.

On a swarm the run's trees live in engine volumes on the manager, as for a remote engine
(:mod:`git_iterare.runner.placement.remote`): the worktree at ``/workspace``, the run
gitdir at ``/git/run`` (its ``objects/info/alternates`` names ``/git/cache/objects``) and
the repository's object cache at ``/git/cache``. The agent's container is a swarm task on
some worker, with empty tmpfs mounts at ``/workspace`` and ``/git``, so the trees travel:
this server runs in a container of git-iterare's own image on the manager, mounting the
run's volumes, as the agent's uid:gid with no capabilities, on the run's internal overlay
network under the name ``trees``; ``container/swarm-start`` in the agent's task fetches
the trees before the agent's command starts and uploads its results while it runs and
when it ends.

HTTP/1.1, one request a connection (every answer says ``Connection: close``):

* ``GET /ready``: ``200`` and ``ready``; while ``ITERARE_TREES_AFTER`` (``HOST:PORT``, the
  run's egress) takes no TCP connection yet, ``503`` (not logged): an agent that could
  start before its egress has no way out, but would see its first requests fail.
* ``GET /stop``: ``200`` and ``go``, or ``stop GRACE`` once the file ``ITERARE_STOP_FILE``
  (``/tmp/iterare-stop``, in the server's own container: the agent's uploads cannot make
  it) holds the seconds ``GRACE`` the agent has to end (``git iterare stop`` writes it
  through the engine). ``container/swarm-start`` asks every few seconds; those answers
  are not logged.
* ``GET /trees``: ``200`` and an uncompressed tar (GNU format, chunked transfer coding) of
  ``workspace/...``, ``git/run`` and ``git/run/...``, ``git/cache`` and ``git/cache/...``
  (the tops ``workspace`` and ``git`` themselves are left out: they are the agent's mount
  points, which it may not change). Modes are kept without set-uid and set-gid bits,
  symlinks are symlinks (never followed), sockets, fifos and devices are left out; every
  member is owned by the server's uid and gid.
* ``PUT /result``: a tar (``Content-Length`` or chunked) with only ``workspace/...`` and
  ``git/run/...`` members replaces the contents of ``ROOT/workspace`` and
  ``ROOT/git/run``. It is unpacked into a scratch folder of a random name inside each
  tree (a tree may be a mount point, which cannot be renamed), then swapped in by
  renames; the server's journal (``ITERARE_JOURNAL``, outside the trees: the trees' own
  entries are never taken for the server's) names those folders and holds the commit
  point, so a crash at any point leaves either both old trees or both new ones (the swap
  is finished when the server next starts or serves). The body is the agent's and
  hostile: absolute names, ``..``, names outside the two tops, members under a symlink
  or a file, hard links to what is not an earlier regular file of the same tree, a
  member replacing a directory, sparse members, extended headers over
  :data:`MAX_EXTENDED_HEADER`, and a tar without its end-of-archive block (one cut
  short, which ``tarfile`` takes for whole) get ``400``;
  more than ``ITERARE_MAX_RESULT_BYTES`` bytes of body gets ``413``; in both cases
  nothing changes. Devices, fifos and other special members are left out; set-uid, set-gid and
  sticky bits of files and set-uid and set-gid bits of directories are dropped; times
  past :data:`MAX_MTIME` are set to it. Uploads
  are served one at a time, so the last complete one wins. Answer: ``200`` and
  ``{"bytes": N, "files": M}`` (body bytes read, regular files and hard links written).

Errors: a bad request gets ``400`` (``404``, ``405``, ``411``, ``413`` as HTTP says), a
file the server cannot read or write (or a fault of its own) ``500``; the body is one
line ``iterare-trees: REASON``. A request head must arrive within :data:`HEAD_TIMEOUT`
seconds and be at most :data:`MAX_HEAD_BYTES`; at most :data:`MAX_CONNECTIONS`
connections are served at once (more get ``503``). Each request is logged as one JSON
line on standard error, with the agent's text in it made printable ASCII and cut short.

Runs as ``python3 tree_server.py PORT [HOST]`` (HOST ``0.0.0.0`` unless given; PORT 0
picks one); the trees' root is ``ITERARE_TREES_ROOT`` (``/`` unless set). It uses the
standard library only (git-iterare's image has ``python3`` 3.11 and nothing of this
package; no ``tarfile`` extraction filters, which Debian's 3.11.2 lacks: members are
written here, one ``O_NOFOLLOW`` step at a time). It prints ``iterare-trees: listening on
PORT`` once it accepts connections.
"""

from __future__ import annotations

import contextlib
import errno
import io
import json
import os
import secrets
import shutil
import socket
import stat
import sys
import tarfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

#: Largest request head (request line and headers), in bytes.
MAX_HEAD_BYTES = 8 * 1024
#: How long a client has to send its request head, in seconds.
HEAD_TIMEOUT = 10.0
#: Longest pause while a body is read or an answer written, in seconds.
IO_TIMEOUT = 60.0
#: Most connections served at once.
MAX_CONNECTIONS = 8
#: Where ``git iterare stop`` asks the agent to stop, unless ``ITERARE_STOP_FILE`` says.
DEFAULT_STOP_FILE = "/tmp/iterare-stop"
#: Upload limit when ``ITERARE_MAX_RESULT_BYTES`` is not set (the fetch limit of
#: :mod:`git_iterare.limits`).
DEFAULT_MAX_RESULT_BYTES = 4096 * 1024**2
#: Most members of one upload.
MAX_MEMBERS = 2_000_000
#: Longest name of an upload's member, in bytes.
MAX_NAME_BYTES = 4096
#: Bytes copied at a time.
CHUNK = 64 * 1024
#: Last bytes of an upload kept to find its end-of-archive block (``tarfile`` reads at most
#: a :data:`CHUNK` and a record ahead).
TAIL_BYTES = 4 * CHUNK
#: What is read after an answer at most, before closing (see :func:`_linger`).
LINGER_BYTES = 1024 * 1024
LINGER_SECONDS = 2.0
#: Longest piece of the agent's text in a log line or an answer.
MAX_SHOWN = 200

#: The trees a GET sends, and which of them a PUT replaces.
SENT = ("workspace", "git/run", "git/cache")
REPLACED = ("workspace", "git/run")
#: Prefix of an upload's scratch folder inside each replaced tree (a random name follows:
#: the trees' own entries of that name are never taken for one, see :data:`DEFAULT_JOURNAL`).
SCRATCH_PREFIX = ".iterare-put-"
#: Mark in a scratch folder: "the old contents are all out".
MOVED_MARK = "moved"
#: Where the server keeps the record of the upload under way (its scratch names, whether
#: it committed, which trees are swapped), unless ``ITERARE_JOURNAL`` says: in the
#: server's own container, outside the trees, so what the repository or the agent puts in
#: them is never taken for the server's.
DEFAULT_JOURNAL = "/tmp/iterare-trees-journal"
#: Latest file time an upload may set, in seconds since the epoch (later ones are set to
#: this: the kernel and Python refuse times past 64-bit nanoseconds).
MAX_MTIME = 2**33
#: Largest extended header of an upload (a GNU long name or link, a pax header), in bytes:
#: ``tarfile`` reads one whole into memory.
MAX_EXTENDED_HEADER = 64 * 1024

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_NEW_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


class HttpError(Exception):
    """A request answered with ``status`` and a one-line ``reason``."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status


def shown(text: str | bytes) -> str:
    """``text`` (the agent's) as printable ASCII, other characters escaped, at most
    :data:`MAX_SHOWN` characters of it."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", "surrogateescape")
    out = "".join(c if " " <= c <= "~" and c != "\\" else
                  ascii(c)[1:-1] if c != "\\" else "\\\\" for c in text[:MAX_SHOWN])
    return out + ("..." if len(text) > MAX_SHOWN else "")


# --- HTTP ------------------------------------------------------------------------------

@dataclass
class Request:
    """A parsed request head.

    Attributes:
        method, path: from the request line.
        headers: lower-case name -> value (a repeated header: HttpError).
        rest: bytes read past the head (the body's start).
    """

    method: str
    path: str
    headers: dict[str, str]
    rest: bytes


def read_head(conn: socket.socket, timeout: float = HEAD_TIMEOUT) -> Request:
    """Read and parse a request head from ``conn`` within ``timeout`` seconds.

    Raises:
        HttpError: 400 for a head that is too long, slow, or not HTTP/1.
        ConnectionError: the client went away before sending anything.
    """
    deadline = time.monotonic() + timeout
    data = b""
    while b"\r\n\r\n" not in data:
        if len(data) > MAX_HEAD_BYTES:
            raise HttpError(400, "the request head is too long")
        left = deadline - time.monotonic()
        if left <= 0:
            raise HttpError(400, "the request head came too slowly")
        conn.settimeout(left)
        try:
            got = conn.recv(4096)
        except TimeoutError:
            raise HttpError(400, "the request head came too slowly") from None
        if not got:
            raise ConnectionError("the client closed the connection")
        data += got
    head, _, rest = data.partition(b"\r\n\r\n")
    if len(head) > MAX_HEAD_BYTES:
        raise HttpError(400, "the request head is too long")
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or parts[2] not in ("HTTP/1.0", "HTTP/1.1"):
        raise HttpError(400, "not an HTTP/1 request line")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        name = name.strip().lower()
        if not sep or not name or name in headers:
            raise HttpError(400, f"bad or repeated header {shown(name)!r}")
        headers[name] = value.strip()
    return Request(parts[0], parts[1], headers, rest)


class Body(io.RawIOBase):
    """A request body as a readable stream (``Content-Length`` or chunked), that raises
    :class:`HttpError` 413 past ``limit`` bytes and 400 when it breaks off.

    Only :meth:`read` is meant to be used (it is what ``tarfile`` ``r|`` calls).
    """

    def __init__(self, conn: socket.socket, request: Request, limit: int) -> None:
        self.conn, self.limit = conn, limit
        self.pending = request.rest
        self.count = 0
        self.done = False
        coding = request.headers.get("transfer-encoding", "").lower()
        length = request.headers.get("content-length")
        if coding and coding != "chunked":
            raise HttpError(400, "only the chunked transfer coding is taken")
        if coding and length is not None:
            raise HttpError(400, "both Content-Length and Transfer-Encoding")
        self.chunked = bool(coding)
        if not coding:
            if length is None:
                raise HttpError(411, "a body needs a Content-Length or chunked coding")
            if not (length.isascii() and length.isdigit()):
                raise HttpError(400, "bad Content-Length")
            if int(length) > limit:
                raise HttpError(413, f"the upload is over {limit} bytes")
        self.left = 0 if self.chunked else int(length or 0)
        conn.settimeout(IO_TIMEOUT)

    def _recv(self) -> bytes:
        if not self.pending:
            try:
                self.pending = self.conn.recv(CHUNK)
            except TimeoutError:
                raise HttpError(400, "the upload stalled") from None
            if not self.pending:
                raise HttpError(400, "the upload broke off")
        data, self.pending = self.pending, b""
        return data

    def _line(self) -> bytes:
        data = b""
        while b"\r\n" not in data:
            if len(data) > 1024:
                raise HttpError(400, "bad chunk")
            data += self._recv()
        line, _, self.pending = data.partition(b"\r\n")
        return line

    def _next_chunk(self) -> None:
        size = self._line().split(b";", 1)[0].strip()
        if not 0 < len(size) <= 16 or size.strip(b"0123456789abcdefABCDEF"):
            raise HttpError(400, "bad chunk size")
        self.left = int(size, 16)
        if self.left == 0:
            while self._line():  # trailer fields, then the empty line
                pass
            self.done = True

    def read(self, n: int = -1) -> bytes:
        """Up to ``n`` bytes of the body (``b""`` at its end)."""
        if self.done:
            return b""
        if self.left == 0:
            if not self.chunked:
                self.done = True
                return b""
            self._next_chunk()
            if self.done:
                return b""
        want = self.left if n < 0 else min(n, self.left)
        data = self._recv()
        data, self.pending = data[:want], data[want:]
        self.left -= len(data)
        self.count += len(data)
        if self.count > self.limit:
            raise HttpError(413, f"the upload is over {self.limit} bytes")
        if self.chunked and self.left == 0:
            end = self.pending
            while len(end) < 2:
                self.pending = b""
                end += self._recv()
            if end[:2] != b"\r\n":
                raise HttpError(400, "bad chunk end")
            self.pending = end[2:]
        return data

    def drain(self, most: int) -> None:
        """Read and drop what is left of the body, up to ``most`` bytes (so the client
        sees the answer rather than a reset)."""
        seen = 0
        try:
            while seen < most and (data := self.read(CHUNK)):
                seen += len(data)
        except (HttpError, OSError):
            pass


class ChunkedWriter(io.RawIOBase):
    """A response body in the chunked transfer coding (``tarfile`` ``w|`` calls
    :meth:`write`); :meth:`finish` sends the last chunk."""

    def __init__(self, conn: socket.socket) -> None:
        self.conn = conn
        self.buffer = bytearray()

    def write(self, data: bytes) -> int:  # type: ignore[override]
        """Queue ``data``; send a chunk when :data:`CHUNK` bytes are queued."""
        self.buffer += data
        if len(self.buffer) >= CHUNK:
            self.flush()
        return len(data)

    def flush(self) -> None:
        """Send what is queued as one chunk."""
        if self.buffer:
            self.conn.sendall(b"%x\r\n" % len(self.buffer) + bytes(self.buffer) + b"\r\n")
            self.buffer.clear()

    def finish(self) -> None:
        """Send the rest and the last chunk."""
        self.flush()
        self.conn.sendall(b"0\r\n\r\n")


_PHRASES = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed",
            411: "Length Required", 413: "Content Too Large", 500: "Internal Server Error",
            503: "Service Unavailable"}


def answer(conn: socket.socket, status: int, body: bytes,
           content_type: str = "text/plain") -> None:
    """Send a whole answer with ``Connection: close``."""
    conn.sendall(f"HTTP/1.1 {status} {_PHRASES[status]}\r\nContent-Type: {content_type}\r\n"
                 f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode() + body)


# --- Trees out -------------------------------------------------------------------------

def _tarinfo(name: str, st: os.stat_result) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.mode = stat.S_IMODE(st.st_mode) & ~(stat.S_ISUID | stat.S_ISGID)
    info.mtime = int(st.st_mtime)
    info.uid, info.gid = os.getuid(), os.getgid()
    info.uname = info.gname = ""
    if stat.S_ISDIR(st.st_mode):
        info.type = tarfile.DIRTYPE
    return info


def send_trees(root: str, out: io.RawIOBase, log: Callable[[str], None]) -> int:
    """Write the tar of :data:`SENT` under ``root`` to ``out``; return its member count.
    Trees that are missing are left out, and so are files that vanish or turn special
    while they are read (``log`` names them).

    Raises:
        OSError: a folder cannot be read.
    """
    count = 0
    with tarfile.open(fileobj=out, mode="w|", format=tarfile.GNU_FORMAT) as tar:
        for top in SENT:
            path = os.path.join(root, top)
            try:
                fd = os.open(path, _DIR_FLAGS)
            except FileNotFoundError:
                continue
            try:
                if top != "workspace":
                    tar.addfile(_tarinfo(top, os.fstat(fd)))
                    count += 1
                count += _send_dir(tar, fd, top, log)
            finally:
                os.close(fd)
    return count


def _send_dir(tar: tarfile.TarFile, dir_fd: int, name: str,
              log: Callable[[str], None]) -> int:
    count = 0
    for entry in sorted(os.listdir(dir_fd)):
        member = f"{name}/{entry}"
        try:
            st = os.stat(entry, dir_fd=dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            continue
        if stat.S_ISLNK(st.st_mode):
            info = _tarinfo(member, st)
            info.type = tarfile.SYMTYPE
            info.linkname = os.readlink(entry, dir_fd=dir_fd)
            tar.addfile(info)
        elif stat.S_ISDIR(st.st_mode):
            try:
                fd = os.open(entry, _DIR_FLAGS, dir_fd=dir_fd)
            except OSError as err:
                log(json.dumps({"trees": "left out", "name": shown(member),
                                "reason": err.strerror}))
                continue
            try:
                tar.addfile(_tarinfo(member, os.fstat(fd)))
                count += _send_dir(tar, fd, member, log)
            finally:
                os.close(fd)
        elif stat.S_ISREG(st.st_mode):
            if not _send_file(tar, dir_fd, entry, member):
                log(json.dumps({"trees": "left out", "name": shown(member),
                                "reason": "not a regular file when opened"}))
                continue
        else:
            continue
        count += 1
    return count


class _Exactly(io.RawIOBase):
    """``size`` bytes of a file: what it has, then zeros if it shrank."""

    def __init__(self, fd: int, size: int) -> None:
        self.fd, self.left = fd, size

    def read(self, n: int = -1) -> bytes:
        want = self.left if n < 0 else min(n, self.left)
        data = os.read(self.fd, want) if want else b""
        if want and not data:
            data = bytes(want)
        self.left -= len(data)
        return data


def _send_file(tar: tarfile.TarFile, dir_fd: int, entry: str, member: str) -> bool:
    try:
        fd = os.open(entry, _READ_FLAGS, dir_fd=dir_fd)
    except OSError:
        return False
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return False
        info = _tarinfo(member, st)
        info.size = st.st_size
        tar.addfile(info, _Exactly(fd, st.st_size))
        return True
    finally:
        os.close(fd)


# --- Trees in --------------------------------------------------------------------------

class Refused(HttpError):
    """An upload's member that is not taken (400)."""

    def __init__(self, name: str, reason: str) -> None:
        super().__init__(400, f"{shown(name)!r}: {reason}")


def split_member(name: str) -> tuple[str, tuple[str, ...]]:
    """``(tree, parts)`` of an upload's member name: ``tree`` one of :data:`REPLACED`
    (or ``"git"`` for the folder ``git`` itself), ``parts`` the path inside it (empty
    for the tree itself); ``.`` and empty steps are dropped.

    Raises:
        Refused: an absolute name, ``..``, or a name outside :data:`REPLACED`.
    """
    if name.startswith("/"):
        raise Refused(name, "an absolute name")
    if len(os.fsencode(name)) > MAX_NAME_BYTES:
        raise Refused(name, "the name is too long")
    steps = [step for step in name.split("/") if step not in ("", ".")]
    if ".." in steps:
        raise Refused(name, "a name with '..'")
    if steps[:1] == ["workspace"]:
        return "workspace", tuple(steps[1:])
    if steps[:2] == ["git", "run"]:
        return "git/run", tuple(steps[2:])
    if steps == ["git"]:
        return "git", ()
    raise Refused(name, "only workspace/ and git/run/ are taken")


def _open_parent(root_fd: int, parts: Sequence[str], name: str) -> int:
    """A new descriptor of the folder of ``parts`` under ``root_fd``, made (0700) where
    missing, never through a symlink.

    Raises:
        Refused: a step is a symlink or not a folder.
    """
    fd = os.dup(root_fd)
    try:
        for part in parts[:-1]:
            try:
                step = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                os.mkdir(part, 0o700, dir_fd=fd)
                step = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except OSError as err:
                if err.errno in (errno.ELOOP, errno.ENOTDIR):
                    raise Refused(name, "a member under a symlink or a file") from None
                raise
            os.close(fd)
            fd = step
    except BaseException:
        os.close(fd)
        raise
    return fd


def _clear(dir_fd: int, leaf: str, name: str, is_dir: bool) -> bool:
    """Make room for ``leaf``: remove a non-folder there; True when a folder is there
    (and ``is_dir``).

    Raises:
        Refused: a non-folder member would replace a folder.
    """
    try:
        st = os.stat(leaf, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return False
    if stat.S_ISDIR(st.st_mode):
        if is_dir:
            return True
        raise Refused(name, "a member replacing a folder")
    os.unlink(leaf, dir_fd=dir_fd)
    return False


@dataclass
class Unpacking:
    """One upload being unpacked into the scratch folders of :data:`REPLACED`.

    Attributes:
        trees: tree -> descriptor of its scratch folder's ``new``.
        files: regular files (tree, parts) written, for hard links.
        dirs: (tree, parts, mode, mtime) of the folders, applied after the swap.
        written: regular files and hard links written.
        parent: the folder kept open (:meth:`_parent`): its (tree, parts) and descriptor.
    """

    trees: dict[str, int]
    files: set[tuple[str, tuple[str, ...]]] = field(default_factory=set)
    dirs: dict[tuple[str, tuple[str, ...]], tuple[int, float]] = field(default_factory=dict)
    written: int = 0
    parent: tuple[tuple[str, tuple[str, ...]], int] | None = None

    def member(self, tar: tarfile.TarFile, info: tarfile.TarInfo) -> None:
        """Write one member (special ones are left out).

        Raises:
            Refused: see the module's docstring.
            OSError: the scratch folder cannot be written.
        """
        info.mtime = min(max(int(info.mtime), 0), MAX_MTIME)
        tree, parts = split_member(info.name)
        if not parts:
            if not info.isdir():
                raise Refused(info.name, "a tree's top must be a folder")
            return
        if not (info.isreg() or info.isdir() or info.issym() or info.islnk()):
            return
        key = (tree, parts)
        fd = self._parent(tree, parts, info.name)
        leaf = parts[-1]
        exists = _clear(fd, leaf, info.name, info.isdir())
        self.files.discard(key)
        if info.isdir():
            if not exists:
                os.mkdir(leaf, 0o700, dir_fd=fd)
            mode = info.mode & 0o1777
            self.dirs[key] = (mode, info.mtime)
        elif info.issym():
            os.symlink(info.linkname, leaf, dir_fd=fd)
            os.utime(leaf, (info.mtime, info.mtime), dir_fd=fd, follow_symlinks=False)
        elif info.islnk():
            self._link(info, tree, leaf, fd)
            self.files.add(key)
            self.written += 1
        else:
            self._file(tar, info, leaf, fd)
            self.files.add(key)
            self.written += 1

    def _parent(self, tree: str, parts: tuple[str, ...], name: str) -> int:
        """The folder of ``parts`` in ``tree`` (:func:`_open_parent`), kept open while
        members come from one folder (a tar lists a folder's files together). A folder
        made here is never replaced (see :func:`_clear`), so a kept one is still the
        folder at that path."""
        key = (tree, parts[:-1])
        if self.parent is None or self.parent[0] != key:
            fd = _open_parent(self.trees[tree], parts, name)
            self.close()
            self.parent = (key, fd)
        return self.parent[1]

    def close(self) -> None:
        """Close the folder kept open."""
        if self.parent is not None:
            os.close(self.parent[1])
            self.parent = None

    def _file(self, tar: tarfile.TarFile, info: tarfile.TarInfo, leaf: str, dir_fd: int) -> None:
        source = tar.extractfile(info)
        out = os.open(leaf, _NEW_FLAGS, 0o600, dir_fd=dir_fd)
        try:
            while source is not None and (data := source.read(CHUNK)):
                view = memoryview(data)
                while view:
                    view = view[os.write(out, view):]
            os.fchmod(out, info.mode & 0o777)
            os.utime(out, (info.mtime, info.mtime))
        finally:
            os.close(out)

    def _link(self, info: tarfile.TarInfo, tree: str, leaf: str, dir_fd: int) -> None:
        try:
            target_tree, target = split_member(info.linkname)
        except Refused:
            raise Refused(info.name, "a hard link out of the upload") from None
        if (target_tree, target) not in self.files or target_tree != tree:
            raise Refused(info.name, "a hard link to what is not an earlier file of its tree")
        source = _open_parent(self.trees[tree], target, info.name)
        try:
            os.link(target[-1], leaf, src_dir_fd=source, dst_dir_fd=dir_fd,
                    follow_symlinks=False)
        finally:
            os.close(source)


def _make_writable(path: str) -> None:
    """Give the owner rwx on every folder under ``path`` (``path`` included), not
    following symlinks, so it can be renamed and removed."""
    if not stat.S_ISDIR(os.lstat(path).st_mode):
        return
    os.chmod(path, 0o700)
    for folder, names, _ in os.walk(path):
        for name in names:
            full = os.path.join(folder, name)
            if stat.S_ISDIR(os.lstat(full).st_mode):
                os.chmod(full, 0o700)


def _remove(path: str) -> None:
    """Remove ``path`` and all under it, whatever its folders' modes (missing: nothing)."""
    try:
        shutil.rmtree(path)
    except FileNotFoundError:
        return
    except PermissionError:
        # A folder of the agent's without write or search permission (rare: fix them all).
        _make_writable(path)
        shutil.rmtree(path)


def _renamable(path: str) -> None:
    """Give a folder at ``path`` its owner's write permission, which moving it to another
    folder needs (its ``..`` changes)."""
    st = os.lstat(path)
    if stat.S_ISDIR(st.st_mode) and not st.st_mode & stat.S_IWUSR:
        os.chmod(path, stat.S_IMODE(st.st_mode) | stat.S_IRWXU)


def _swap(tree: str, scratch: str) -> None:
    """Move the contents of ``tree`` (but ``scratch``) into ``scratch/old`` and those of
    ``scratch/new`` into ``tree``; resumable at any point (the caller removes
    ``scratch`` once it has noted the tree as swapped)."""
    base = os.path.join(tree, scratch)
    moved = os.path.join(base, MOVED_MARK)
    if not os.path.exists(moved):
        for entry in os.listdir(tree):
            if entry != scratch:
                _renamable(os.path.join(tree, entry))
                os.rename(os.path.join(tree, entry), os.path.join(base, "old", entry))
        os.close(os.open(moved, _NEW_FLAGS, 0o600))
    new = os.path.join(base, "new")
    for entry in os.listdir(new):
        os.rename(os.path.join(new, entry), os.path.join(tree, entry))


@dataclass
class Journal:
    """The server's record of the upload under way, kept as one JSON file outside the
    trees and replaced atomically (written, then renamed over).

    Attributes:
        path: the file.
        scratch: tree (of :data:`REPLACED`) -> its scratch folder's name.
        committed: the upload is whole; from here on it is swapped in, crash or not.
        swapped: the trees already swapped in.
    """

    path: str
    scratch: dict[str, str] = field(default_factory=dict)
    committed: bool = False
    swapped: list[str] = field(default_factory=list)

    @classmethod
    def read(cls, path: str) -> Journal | None:
        """The journal at ``path``; None when there is none (or it is not one of ours)."""
        try:
            with open(path, "rb") as handle:
                data = json.loads(handle.read(64 * 1024))
        except FileNotFoundError:
            return None
        except ValueError:
            data = None
        scratch = data.get("scratch") if isinstance(data, dict) else None
        if not (isinstance(scratch, dict) and set(scratch) <= set(REPLACED) and all(
                isinstance(v, str) and v.startswith(SCRATCH_PREFIX) and "/" not in v
                for v in scratch.values())):
            os.unlink(path)
            return None
        swapped = data.get("swapped")
        return cls(path, dict(scratch), data.get("committed") is True,
                   [t for t in swapped if t in REPLACED] if isinstance(swapped, list) else [])

    def write(self) -> None:
        """Replace the file with this record."""
        with open(self.path + ".tmp", "w") as handle:
            json.dump({"scratch": self.scratch, "committed": self.committed,
                       "swapped": self.swapped}, handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.rename(self.path + ".tmp", self.path)

    def remove(self) -> None:
        """Remove the file (the upload is done with)."""
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)


def recover(root: str, journal: str = DEFAULT_JOURNAL) -> None:
    """Finish the upload the journal at ``journal`` says committed, or drop the scratch
    folders of one that did not: what a server that stopped midway left.

    Raises:
        OSError: the trees cannot be changed.
    """
    found = Journal.read(journal)
    if found is None:
        return
    for tree in REPLACED:
        name = found.scratch.get(tree)
        if name is None:
            continue
        path = os.path.join(root, tree)
        if found.committed and tree not in found.swapped:
            if os.path.isdir(os.path.join(path, name)):
                _swap(path, name)
            found.swapped.append(tree)
            found.write()
        _remove(os.path.join(path, name))
    found.remove()


def _apply_dirs(root: str, dirs: dict[tuple[str, tuple[str, ...]], tuple[int, float]]) -> None:
    """Set the uploaded folders' modes and times, deepest first, never through a symlink."""
    for (tree, parts), (mode, mtime) in sorted(dirs.items(), key=lambda kv: -len(kv[0][1])):
        tree_fd = os.open(os.path.join(root, tree), _DIR_FLAGS)
        try:
            fd = _open_parent(tree_fd, parts, "/".join(parts))
            try:
                leaf = os.open(parts[-1], _DIR_FLAGS, dir_fd=fd)
            finally:
                os.close(fd)
            try:
                os.utime(leaf, (mtime, mtime))
                os.fchmod(leaf, mode)
            finally:
                os.close(leaf)
        except (Refused, OSError):
            continue
        finally:
            os.close(tree_fd)


class _BoundedInfo(tarfile.TarInfo):
    """A member header of an upload: extended headers over :data:`MAX_EXTENDED_HEADER`
    and sparse members (which ``tarfile`` reads whole into memory) are refused (400)."""

    def _proc_member(self, tarfile_: tarfile.TarFile) -> tarfile.TarInfo:
        if self.type == tarfile.GNUTYPE_SPARSE:
            raise Refused(self.name, "a sparse member")
        if self.type in (tarfile.GNUTYPE_LONGNAME, tarfile.GNUTYPE_LONGLINK,
                         tarfile.XHDTYPE, tarfile.XGLTYPE, tarfile.SOLARIS_XHDTYPE) \
                and self.size > MAX_EXTENDED_HEADER:
            raise Refused(self.name, f"an extended header over {MAX_EXTENDED_HEADER} bytes")
        return super()._proc_member(tarfile_)  # type: ignore[misc,no-any-return]


class _Tail(io.RawIOBase):
    """A body that keeps its last :data:`TAIL_BYTES`, to tell whether a tar in it ended
    with an end-of-archive block: ``tarfile`` takes a stream that stops at a member's end,
    or a broken header, for the archive's end, which an upload that broke off must not
    be (and Debian's 3.11 ``tarfile`` has no hook for it)."""

    def __init__(self, body: io.RawIOBase) -> None:
        self.body = body
        self.tail = bytearray()
        self.total = 0

    def readable(self) -> bool:
        return True

    def read(self, n: int = -1) -> bytes:
        data = self.body.read(n) or b""
        self.total += len(data)
        self.tail += data
        del self.tail[:-TAIL_BYTES]
        return data

    def zeros_at(self, offset: int) -> bool:
        """Whether the 512 bytes at ``offset`` (of the stream) were read and are zeros."""
        start = self.total - len(self.tail)
        if offset < start or offset + tarfile.BLOCKSIZE > self.total:
            return False
        return not self.tail[offset - start:offset - start + tarfile.BLOCKSIZE].strip(b"\0")


def receive(root: str, body: io.RawIOBase, journal: str = DEFAULT_JOURNAL) -> int:
    """Unpack the upload ``body`` and swap it in for :data:`REPLACED` under ``root``
    (the caller serializes uploads, and has run :func:`recover`); return the regular files
    and hard links written. ``journal`` is the server's :class:`Journal` file.

    Raises:
        HttpError: a refused member (400), a body that is not a tar (400) or too large
            (413, from ``body``); nothing changed.
        OSError: a tree cannot be written; nothing changed.
    """
    scratch = {tree: SCRATCH_PREFIX + secrets.token_hex(8) for tree in REPLACED}
    record = Journal(journal, scratch)
    record.write()
    fds: dict[str, int] = {}
    unpacking: Unpacking | None = None
    try:
        for tree in REPLACED:
            path = os.path.join(root, tree)
            os.mkdir(os.path.join(path, scratch[tree]), 0o700)
            for sub in ("new", "old"):
                os.mkdir(os.path.join(path, scratch[tree], sub), 0o700)
            fds[tree] = os.open(os.path.join(path, scratch[tree], "new"), _DIR_FLAGS)
        unpacking = Unpacking(fds)
        stream = _Tail(body)
        try:
            with tarfile.open(fileobj=stream, mode="r|", tarinfo=_BoundedInfo) as tar:
                for count, info in enumerate(tar):
                    if count >= MAX_MEMBERS:
                        raise HttpError(400, f"more than {MAX_MEMBERS} members")
                    unpacking.member(tar, info)
                end = tar.offset
        except tarfile.TarError as err:
            raise HttpError(400, f"not a tar: {shown(str(err))}") from None
        if not stream.zeros_at(end):
            raise HttpError(400, "the tar has no end-of-archive block (it broke off)")
        for tree in REPLACED:
            if any(os.path.basename(e) == scratch[tree] for e in os.listdir(fds[tree])):
                raise Refused(scratch[tree], "a name the server uses")
    except BaseException:
        if unpacking is not None:
            unpacking.close()
        for fd in fds.values():
            os.close(fd)
        for tree, name in scratch.items():
            _remove(os.path.join(root, tree, name))
        record.remove()
        raise
    unpacking.close()
    for fd in fds.values():
        os.close(fd)
    record.committed = True
    record.write()
    recover(root, journal)
    _apply_dirs(root, unpacking.dirs)
    return unpacking.written


# --- Server ----------------------------------------------------------------------------

def _linger(conn: socket.socket) -> None:
    """Close ``conn`` after the answer: stop sending, then read what the client still
    sends (at most :data:`LINGER_BYTES`, :data:`LINGER_SECONDS`) until it closes, so that
    closing with its data unread sends no reset, which could drop the answer before the
    client reads it."""
    with contextlib.suppress(OSError):
        conn.shutdown(socket.SHUT_WR)
        deadline = time.monotonic() + LINGER_SECONDS
        seen = 0
        while seen < LINGER_BYTES and (left := deadline - time.monotonic()) > 0:
            conn.settimeout(left)
            data = conn.recv(CHUNK)
            if not data:
                break
            seen += len(data)
    conn.close()


class TreeServer:
    """The server's state: its root, upload limit, one lock for the trees (GETs and PUTs
    are served one at a time) and the connection slots.

    Args:
        root: the trees' root.
        max_bytes: the upload limit.
        log: called with one JSON line a request.
        stop_file: the file whose presence says the agent is to stop (``GET /stop``).
        journal: the file of the upload under way (:class:`Journal`).
        after: ``(host, port)`` that must take a TCP connection before ``GET /ready`` says
            ready, or None.
    """

    def __init__(self, root: str, max_bytes: int,
                 log: Callable[[str], None] | None = None,
                 stop_file: str = DEFAULT_STOP_FILE, journal: str = DEFAULT_JOURNAL,
                 after: tuple[str, int] | None = None) -> None:
        self.stop_file, self.stopping, self.journal = stop_file, False, journal
        self.after = after
        self.root, self.max_bytes = root, max_bytes
        self.log = log or (lambda line: print(line, file=sys.stderr, flush=True))
        self.lock = threading.Lock()
        self.slots = threading.BoundedSemaphore(MAX_CONNECTIONS)

    def handle(self, conn: socket.socket) -> None:
        """Serve one connection (and close it)."""
        note: dict[str, object] = {}
        try:
            self._handle(conn, note)
        except HttpError as err:
            note.update(status=err.status, reason=str(err))
            with contextlib.suppress(OSError):
                answer(conn, err.status, f"iterare-trees: {err}\n".encode())
        except OSError as err:
            note.update(status=note.get("status", 500), reason=err.strerror or str(err))
            if "sent" not in note:
                with contextlib.suppress(OSError):
                    answer(conn, 500, f"iterare-trees: {err.strerror or err}\n".encode())
        except Exception as err:  # a bug of the server's: one line, never a traceback
            note.update(status=500, reason=f"internal error: {type(err).__name__}")
            if "sent" not in note:
                with contextlib.suppress(OSError):
                    answer(conn, 500, f"iterare-trees: internal error "
                                      f"({type(err).__name__})\n".encode())
        finally:
            note.pop("sent", None)
            if "request" in note or "status" in note:
                self.log(json.dumps({"trees": note.pop("request", "?"), **note}))
            _linger(conn)

    def _handle(self, conn: socket.socket, note: dict[str, object]) -> None:
        try:
            request = read_head(conn)
        except ConnectionError:
            return
        note["request"] = f"{shown(request.method)} {shown(request.path)}"
        route = (request.method, request.path)
        if request.path not in ("/ready", "/stop", "/trees", "/result"):
            raise HttpError(404, "no such path")
        if route == ("GET", "/ready"):
            waiting = self.after
            if waiting is not None and not self._after_ready():
                answer(conn, 503, f"iterare-trees: waiting for {waiting[0]}:{waiting[1]}\n"
                       .encode())
                note.clear()
                return
            answer(conn, 200, b"ready\n")
            note["status"] = 200
        elif route == ("GET", "/stop"):
            answer(conn, 200, stop_answer(self.stop_file))
            if note.pop("request", None) and not self.stopping:
                note.clear()  # polled every few seconds: only the first stop is logged
            self.stopping = self.stopping or os.path.exists(self.stop_file)
        elif route == ("GET", "/trees"):
            self._get(conn, note)
        elif route == ("PUT", "/result"):
            self._put(conn, request, note)
        else:
            raise HttpError(405, "not served")

    def _after_ready(self) -> bool:
        """Whether :attr:`after` took a connection (once it has, it is not asked again)."""
        if self.after is None:
            return True
        try:
            socket.create_connection(self.after, timeout=1.0).close()
        except OSError:
            return False
        self.after = None
        return True

    def _get(self, conn: socket.socket, note: dict[str, object]) -> None:
        conn.settimeout(IO_TIMEOUT)
        with self.lock:
            recover(self.root, self.journal)
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/x-tar\r\n"
                         b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n")
            note.update(status=200, sent=True)
            out = ChunkedWriter(conn)
            note["members"] = send_trees(self.root, out, self.log)
            out.finish()

    def _put(self, conn: socket.socket, request: Request, note: dict[str, object]) -> None:
        body = Body(conn, request, self.max_bytes)
        if request.headers.get("expect", "").lower() == "100-continue":
            conn.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")
        with self.lock:
            recover(self.root, self.journal)
            try:
                files = receive(self.root, body, self.journal)
            except HttpError as err:
                if err.status != 413:
                    body.drain(CHUNK * 64)
                raise
        body.drain(CHUNK * 64)
        note.update(status=200, bytes=body.count, files=files)
        answer(conn, 200, json.dumps({"bytes": body.count, "files": files}).encode(),
               "application/json")

    def serve(self, listener: socket.socket) -> None:
        """Accept connections on ``listener`` forever, each in a thread of its own."""
        while True:
            conn, _ = listener.accept()
            if not self.slots.acquire(blocking=False):
                with contextlib.suppress(OSError):
                    conn.settimeout(1.0)
                    answer(conn, 503, b"iterare-trees: too many connections\n")
                    conn.shutdown(socket.SHUT_WR)
                    # What the client sent already, so that closing sends no reset.
                    conn.recv(MAX_HEAD_BYTES, socket.MSG_DONTWAIT)
                conn.close()
                continue
            threading.Thread(target=self._run, args=(conn,), daemon=True).start()

    def _run(self, conn: socket.socket) -> None:
        try:
            self.handle(conn)
        finally:
            self.slots.release()


def stop_answer(stop_file: str) -> bytes:
    """The body of ``GET /stop``: ``go``, or ``stop GRACE`` (whole seconds, 1 to 3600;
    10 when the file holds no such number)."""
    try:
        with open(stop_file, "rb") as handle:
            said = handle.read(32).strip()
    except FileNotFoundError:
        return b"go\n"
    except OSError:
        said = b""
    grace = int(said) if said.isdigit() and 1 <= int(said) <= 3600 else 10
    return f"stop {grace}\n".encode()


def _address(text: str | None) -> tuple[str, int] | None:
    if not text:
        return None
    host, sep, port = text.rpartition(":")
    if not (sep and host and port.isascii() and port.isdigit() and 0 < int(port) < 65536):
        raise ValueError(f"ITERARE_TREES_AFTER is not HOST:PORT: {text!r}")
    return host, int(port)


def _limit(text: str | None) -> int:
    if text is None or text == "":
        return DEFAULT_MAX_RESULT_BYTES
    if not (text.isascii() and text.isdigit()):
        raise ValueError(f"ITERARE_MAX_RESULT_BYTES is not a number of bytes: {text!r}")
    return int(text)


def main(argv: Sequence[str]) -> int:
    """``tree_server.py PORT [HOST]``; exit status 2 for bad usage or settings (never
    returns otherwise)."""
    try:
        port = int(argv[1]) if len(argv) in (2, 3) else -1
        limit = _limit(os.environ.get("ITERARE_MAX_RESULT_BYTES"))
        after = _address(os.environ.get("ITERARE_TREES_AFTER"))
    except ValueError as bad:
        print(f"iterare-trees: error: {bad}", file=sys.stderr)
        return 2
    if not 0 <= port < 65536:
        print("iterare-trees: usage: tree_server.py PORT [HOST]", file=sys.stderr)
        return 2
    root = os.environ.get("ITERARE_TREES_ROOT") or "/"
    journal = os.environ.get("ITERARE_JOURNAL") or DEFAULT_JOURNAL
    server = TreeServer(root, limit,
                        stop_file=os.environ.get("ITERARE_STOP_FILE") or DEFAULT_STOP_FILE,
                        journal=journal, after=after)
    # Trees as deep as a path may be long (4096 bytes: 2048 levels) are walked by
    # recursion, here and in shutil.rmtree.
    sys.setrecursionlimit(20_000)
    threading.stack_size(64 * 1024**2)
    recover(root, journal)
    listener = socket.create_server((argv[2] if len(argv) == 3 else "0.0.0.0", port),
                                    backlog=16, reuse_port=False)
    print(f"iterare-trees: listening on {listener.getsockname()[1]}", file=sys.stderr,
          flush=True)
    server.serve(listener)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
