"""Terminal output: colors, warnings and errors.

Whether to color follows, highest first: ``--color=always|never|auto``; ``NO_COLOR``
(https://no-color.org: any non-empty value turns color off); git's ``color.iterare``,
then ``color.ui`` (``always``, ``never``, ``auto``, ``true``, ``false``); then ``auto``,
which colors only when the stream is a terminal. git's config is read only when a colored
line is about to be printed, so commands that print plain text never pay for it.

Every string that comes from an agent, a repository or a record (file names, commit
subjects, results, errors, DNS names, run names) goes through :func:`sanitize` (text of
several lines) or :func:`sanitize_line` (one field of one line) before it is printed;
:func:`warn` and :func:`error` apply :func:`sanitize_line` to their whole message.
"""

from __future__ import annotations

import os
import re
import sys
from typing import TextIO

#: Characters a terminal acts on or that hide or reorder text: the C0 controls (tab and
#: newline are added by :func:`sanitize_line`), DEL, the C1 controls, lone surrogates (bytes
#: that were not UTF-8), and the invisible format characters of Unicode (categories Cf, Zl,
#: Zp: bidirectional overrides and isolates U+202A..U+202E and U+2066..U+2069, marks,
#: zero-width spaces and joiners, the byte-order mark, tag characters) plus the invisible
#: Hangul fillers.
_UNSAFE = (r"\x00-\x08\x0b-\x1f\x7f-\x9f\u00ad\u034f\u0600-\u0605\u061c\u06dd\u070f"
           r"\u0890\u0891\u08e2\u115f\u1160\u180e\u200b-\u200f\u2028-\u202e"
           r"\u2060-\u206f\u3164\ufeff\uffa0\ufff9-\ufffb\ud800-\udfff"
           r"\U000110bd\U000110cd\U00013430-\U0001343f\U0001bca0-\U0001bca3"
           r"\U0001d173-\U0001d17a\U000e0001\U000e0020-\U000e007f")
#: The two patterns, compiled on first use (compiling them costs milliseconds that
#: ``git iterare --version`` and completion should not pay): text, then line.
_patterns: tuple[re.Pattern[str], re.Pattern[str]] | None = None


def _unsafe() -> tuple[re.Pattern[str], re.Pattern[str]]:
    global _patterns
    if _patterns is None:
        _patterns = (re.compile(f"[{_UNSAFE}]"), re.compile(f"[\t\n{_UNSAFE}]"))
    return _patterns


def _visible(match: re.Match[str]) -> str:
    code = ord(match.group())
    if code < 0x20 or code == 0x7F:
        return "^" + chr(code ^ 0x40)  # caret notation: ESC -> ^[, BEL -> ^G, DEL -> ^?
    if code <= 0x9F:
        return f"\\x{code:02x}"
    if 0xDC80 <= code <= 0xDCFF:  # a byte that was not UTF-8 (surrogateescape)
        return f"\\x{code - 0xDC00:02x}"
    return f"<U+{code:04X}>"


def sanitize(text: str) -> str:
    """``text`` with every character a terminal would act on made visible, tab and newline
    kept: for text of several lines written by an agent (its log, a prompt).

    An agent's output and a repository's file names are untrusted: escape sequences could
    set the terminal's title, write the clipboard (OSC 52), show disguised links (OSC 8),
    query the terminal (DCS) or erase lines already printed (a warning), and bidirectional
    overrides or zero-width characters can make one name look like another. They become
    visible text: ``ESC`` -> ``^[``, ``BEL`` -> ``^G``, C1 ``\\x9b`` -> ``\\x9b``, a byte
    that was not UTF-8 -> ``\\xff``, U+202E -> ``<U+202E>``.

    Args:
        text: untrusted text.

    Returns:
        The same text with no character a terminal acts on besides tab and newline, and no
        invisible format character.
    """
    return _unsafe()[0].sub(_visible, text)


def sanitize_line(text: str) -> str:
    """Like :func:`sanitize`, and tab and newline made visible too (``^I``, ``^J``): for one
    field of one line (a file name, a DNS name, a result, an error message), which must not
    start a line of its own that would pass for ours."""
    return _unsafe()[1].sub(_visible, text)

#: Set by the CLI from ``--color``: "always", "never", "auto" or None (not given).
COLOR_FLAG: str | None = None

_decided: dict[int, bool] = {}

_CODES = {
    "red": "\033[31m",
    "green": "\033[32m",
    "yellow": "\033[33m",
    "blue": "\033[34m",
    "magenta": "\033[35m",
    "cyan": "\033[36m",
    "bold": "\033[1m",
    "dim": "\033[2m",
}
_RESET = "\033[0m"


def _git_color_setting() -> str | None:
    from git_iterare.proc import read_git_config

    try:
        entries = read_git_config(r"^color\.(ui|iterare)$")
    except Exception:  # a broken git config must not stop us from printing
        return None
    values = {e.key: e.value.lower() for e in entries}
    return values.get("color.iterare") or values.get("color.ui")


def color_enabled(stream: TextIO | None = None) -> bool:
    """Whether to color output written to ``stream`` (stdout when None)."""
    stream = stream or sys.stdout
    key = id(stream)
    if key not in _decided:
        setting = COLOR_FLAG
        if setting is None and os.environ.get("NO_COLOR"):
            setting = "never"
        if setting is None:
            setting = _git_color_setting() or "auto"
        if setting in ("always", "true"):
            enabled = True
        elif setting in ("never", "false"):
            enabled = False
        else:
            enabled = stream.isatty() and os.environ.get("TERM") != "dumb"
        _decided[key] = enabled
    return _decided[key]


def paint(text: str, *styles: str, stream: TextIO | None = None) -> str:
    """Return ``text`` wrapped in ANSI styles (names in ``_CODES``) when color is on."""
    if not styles or not color_enabled(stream):
        return text
    return "".join(_CODES[s] for s in styles) + text + _RESET


def _width(char: str) -> int:
    import unicodedata

    return 2 if unicodedata.east_asian_width(char) in ("W", "F") else 1


def _fit(text: str, columns: int) -> str:
    """``text`` cut to at most ``columns`` terminal columns (wide characters take two), so
    it never wraps onto a second line."""
    used = 0
    for index, char in enumerate(text):
        used += _width(char)
        if used > columns:
            return text[:index]
    return text


class Progress:
    """Progress lines on stderr (launch steps, image build steps), sanitized: build output
    comes from the project's Dockerfile, which the repository wrote.

    What a build step prints goes to :meth:`output`. On a terminal its last
    :attr:`WINDOW` lines show under the step, redrawn in place as they come and cleared
    when the next progress line comes (as ``docker build`` shows a running step); off a
    terminal they are not shown (``--verbose`` shows every one, see
    :func:`git_iterare.sandbox.image.build_image`).

    Args:
        stream: where to write; ``sys.stderr`` (looked up at each call) when None.
    """

    #: Lines of a step's output shown at once on a terminal.
    WINDOW = 6

    def __init__(self, stream: TextIO | None = None):
        self._stream = stream
        self._window: list[str] = []
        self._drawn = 0

    @property
    def stream(self) -> TextIO:
        return self._stream if self._stream is not None else sys.stderr

    def __call__(self, line: str) -> None:
        """Print one progress line (the step window above it cleared first)."""
        self.clear()
        print(sanitize_line(line), file=self.stream, flush=True)

    def output(self, line: str) -> None:
        """One line a build step printed: shown in the step's window on a terminal."""
        stream = self.stream
        if not self._redraws(stream):
            return
        import shutil

        columns = shutil.get_terminal_size().columns
        self._window = [*self._window[-(self.WINDOW - 1):], line]
        shown = [paint("  " + _fit(sanitize_line(text), max(10, columns - 3)), "dim",
                       stream=stream) for text in self._window]
        stream.write(self._erase() + "".join(text + "\n" for text in shown))
        stream.flush()
        self._drawn = len(shown)

    def meter(self, line: str) -> None:
        """Show ``line`` as the one line of a transfer's progress on a terminal, redrawn in
        place at each call (as ``git push`` shows its counts) and cleared by the next
        progress line or :meth:`clear`; nothing off a terminal."""
        stream = self.stream
        if not self._redraws(stream):
            return
        stream.write(self._erase() + sanitize_line(line) + "\n")
        stream.flush()
        self._window, self._drawn = [line], 1

    @staticmethod
    def _redraws(stream: TextIO) -> bool:
        """Whether ``stream`` is a terminal lines can be redrawn on (not ``TERM=dumb``)."""
        try:
            return stream.isatty() and os.environ.get("TERM") != "dumb"
        except (AttributeError, ValueError):
            return False

    def clear(self) -> None:
        """Erase the step's window from the terminal (nothing when none is shown)."""
        if self._drawn:
            self.stream.write(self._erase())
            self.stream.flush()
        self._window, self._drawn = [], 0

    def _erase(self) -> str:
        # Up to the first line of the window, then clear to the end of the screen.
        return f"\033[{self._drawn}F\033[J" if self._drawn else ""


#: The progress lines of every command (see :class:`Progress`).
progress = Progress()


def bounded_line(message: str) -> str:
    """``message`` sanitized (:func:`sanitize_line`) and cut to
    :data:`~git_iterare.limits.MAX_MESSAGE_CHARS` characters, the rest counted: a message
    that names whatever a tool printed (a list of files, an engine's explanation) stays
    one readable line."""
    from git_iterare.limits import MAX_MESSAGE_CHARS

    line = sanitize_line(message)
    if len(line) <= MAX_MESSAGE_CHARS:
        return line
    return f"{line[:MAX_MESSAGE_CHARS]}... ({len(line) - MAX_MESSAGE_CHARS} more characters)"


def usd(amount: float) -> str:
    """US dollars as ``$0.61``: two decimals, or as many more as a smaller amount needs to
    show its first two significant digits (``$0.0016``, ``$0.001``; at most six), so that
    a small cost and a small budget never both read ``$0.00``."""
    decimals = 2
    while decimals < 6 and 0 < abs(amount) < 10.0 ** (1 - decimals):
        decimals += 1
    text = f"{amount:.{decimals}f}"
    while decimals > 2 and text.endswith("0"):
        text, decimals = text[:-1], decimals - 1
    return "$" + text


def elide_path(path: str, limit: int = 120) -> str:
    """``path`` cut in the middle to at most ``limit`` characters (its start and its file
    name kept, ``...`` between), so one long name leaves room for the others in a line."""
    if len(path) <= limit:
        return path
    tail = limit * 2 // 3
    return f"{path[:limit - tail - 3]}...{path[-tail:]}"


def warn(message: str) -> None:
    """Print ``warning: message`` to stderr, ``message`` made one bounded line
    (:func:`bounded_line`)."""
    progress.clear()
    print(paint("warning:", "yellow", stream=sys.stderr), bounded_line(message),
          file=sys.stderr)


def error(message: str) -> None:
    """Print ``error: message`` to stderr, ``message`` made one bounded line
    (:func:`bounded_line`)."""
    progress.clear()
    print(paint("error:", "red", "bold", stream=sys.stderr), bounded_line(message),
          file=sys.stderr)


#: Characters that make git run a command through the shell (run-command.c); a pager
#: without them is one program, which git starts itself.
_SHELL_META = "|&;<>()$`\\\"' \t\n*?[#~=%"
#: What git sets in a pager's environment when the variable is unset (git's PAGER_ENV).
_PAGER_ENV = {"LESS": "FRX", "LV": "-c"}


def _git_bool(value: str) -> bool | None:
    """A git config value as git's ``git_config_maybe_bool`` reads it: True, False, or
    None when it is no boolean (for ``pager.<cmd>``: a pager command)."""
    word = value.strip().lower()
    if word in ("true", "yes", "on", "1"):
        return True
    if word in ("false", "no", "off", "0", ""):
        return False
    return None


def pager(command: str, cwd: str | os.PathLike[str] | None = None) -> str | None:
    """The pager for the output of ``git iterare <command>``, chosen as git chooses one
    (git-config(1) ``core.pager`` and ``pager.<cmd>``, git-var(1) ``GIT_PAGER``), or None.

    None when stdout is no terminal, or git already started a pager (``GIT_PAGER_IN_USE``),
    or ``pager.iterare-<command>`` is false. Otherwise, first found: ``$GIT_PAGER``,
    ``pager.iterare-<command>`` when it names a command, ``core.pager``, ``$PAGER``,
    ``less``; a pager of ``cat`` or an empty one is none. ``git --no-pager iterare ...``
    works too: git then sets ``GIT_PAGER=cat``.

    Args:
        command: the subcommand (``list``); its config key is ``pager.iterare-<command>``,
            the one git itself reads for ``git iterare-<command>``.
        cwd: a directory of the repository whose git config counts (the current one when
            None).
    """
    if not sys.stdout.isatty() or os.environ.get("GIT_PAGER_IN_USE"):
        return None
    from git_iterare.proc import read_git_config

    key = f"pager.iterare-{command}"
    try:
        entries = read_git_config(rf"^(core\.pager|pager\.iterare-{command})$",
                                  cwd=None if cwd is None else os.fspath(cwd))
        values = {e.key: e.value for e in entries}  # later files win, as in git
    except Exception:  # a broken git config must not stop us from printing
        values = {}
    own = values.get(key)
    if own is not None and _git_bool(own) is False:
        return None
    program = os.environ.get("GIT_PAGER")
    if program is None:
        program = own if own is not None and _git_bool(own) is None else values.get(
            "core.pager")
    if program is None:
        program = os.environ.get("PAGER", "less")
    return None if program in ("", "cat") else program


def page(text: str, command: str, cwd: str | os.PathLike[str] | None = None) -> None:
    """Write ``text`` to stdout, through the :func:`pager` of ``command`` when there is
    one (run by ``sh -c`` as git runs it, with ``LESS=FRX`` and ``LV=-c`` unless set).

    Colors in ``text`` were decided for the terminal, as git's ``color.pager`` (true by
    default) keeps them for a pager. Ctrl-C is left to the pager while it runs.
    """
    program = pager(command, cwd)
    if program is not None and not any(c in _SHELL_META for c in program):
        import shutil

        if shutil.which(program) is None:  # as git, which then writes without one
            warn(f"cannot run the pager {program}: not found")
            program = None
    if program is None:
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    import signal

    from git_iterare.proc import run

    env = {name: value for name, value in _PAGER_ENV.items() if name not in os.environ}
    sys.stdout.flush()
    try:
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    except ValueError:  # not the main thread
        previous = None
    try:
        run(["sh", "-c", program], input=text, capture=False, check=False, env=env)
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)


def reset() -> None:
    """Forget cached color decisions (tests, and after ``--color`` is parsed)."""
    _decided.clear()
