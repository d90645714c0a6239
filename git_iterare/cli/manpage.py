"""Finding and showing the manual pages in ``man/``.

``git iterare --help`` runs ``man`` on the installed page, as ``git help`` does; where
``man`` is missing or fails, the page's roff source is turned into plain text here, so the
same text is shown. Pages are installed to ``<prefix>/share/man/man1`` (``setup.cfg``);
in a source checkout they are read from ``man/``.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

from git_iterare.errors import ExitCode


def find_page(name: str, section: str = "1") -> Path | None:
    """Return the file of manual page ``name(section)``, or None when not found.

    Looks in ``<sys.prefix>/share/man/man<section>`` (pip installs), then in the ``man/``
    folder next to the package (source checkouts and editable installs).
    """
    filename = f"{name}.{section}"
    here = Path(__file__).resolve().parent
    for folder in (
        Path(sys.prefix) / "share" / "man" / f"man{section}",
        here.parents[1] / "man",
    ):
        candidate = folder / filename
        if candidate.is_file():
            return candidate
    return None


def show(name: str, section: str = "1") -> int:
    """Show manual page ``name(section)`` with ``man``, or print it as text without it.

    Returns:
        0 when shown; 1 when no such page is installed (a message says so).
    """
    page = find_page(name, section)
    if page is None:
        print(f"error: no manual entry for {name}({section}); reinstall git-iterare",
              file=sys.stderr)
        return ExitCode.FAILED
    import shutil
    import subprocess

    if shutil.which("man") and os.environ.get("ITERARE_NO_MAN") != "1":
        sys.stdout.flush()
        if subprocess.run(["man", str(page)], check=False).returncode == 0:
            return ExitCode.OK
    sys.stdout.write(render_text(page.read_text(encoding="utf-8")))
    return ExitCode.OK


_FONT = re.compile(r"\\f[BIRP]|\\f\(..|\\f\[[^\]]*\]")
_ESCAPES = {r"\-": "-", r"\(em": "--", r"\(en": "-", r"\(bu": "*", r"\e": "\\", r"\&": "",
            r"\(aq": "'", r"\(dq": '"', r"\ ": " ", r"\~": " ", r"\|": "", r"\^": "",
            r"\(lq": '"', r"\(rq": '"', r"\(co": "(c)"}


def _inline(text: str) -> str:
    text = _FONT.sub("", text)
    for escape, plain in _ESCAPES.items():
        text = text.replace(escape, plain)
    return text


def _macro_args(rest: str) -> list[str]:
    return [a[1:-1] if len(a) > 1 and a[0] == a[-1] == '"' else a
            for a in re.findall(r'"[^"]*"|\S+', rest)]


def render_text(source: str, width: int = 80) -> str:
    """Render the subset of man(7) roff that our pages use as plain text.

    Handles .TH .SH .SS .PP/.P/.LP .TP .IP .RS/.RE .nf/.fi .EX/.EE .B .I .BR .IR .RB .RI
    .BI .IB and the usual font and character escapes; other requests are dropped.

    Args:
        source: the page's roff text.
        width: line width in characters.

    Returns:
        The page as text, sections flush left and paragraphs indented.
    """
    import textwrap

    out: list[str] = []
    para: list[str] = []
    indent, extra = 7, 0
    fill = True
    tag_pending = False

    def flush() -> None:
        nonlocal para
        if para:
            text = " ".join(para)
            lead = " " * (indent + extra)
            out.append(textwrap.fill(text, width=width, initial_indent=lead,
                                     subsequent_indent=lead, break_on_hyphens=False))
            para = []

    for raw in source.splitlines():
        if raw.startswith(('.\\"', "'\\\"")):
            continue
        if raw.startswith("."):
            name, _, rest = raw[1:].partition(" ")
            args = _macro_args(rest)
            if name == "TH":
                title = f"{args[0]}({args[1]})" if len(args) > 1 else rest
                out.append(f"{title}\n")
            elif name in ("SH", "SS"):
                flush()
                extra = 0
                out.append(("\n" if out else "") + (" " * (0 if name == "SH" else 3))
                           + _inline(" ".join(args)))
            elif name in ("PP", "P", "LP"):
                flush()
                extra = 0
                out.append("")
            elif name == "TP":
                flush()
                extra = 0
                out.append("")
                tag_pending = True
            elif name == "IP":
                flush()
                out.append("")
                if args:
                    out.append(" " * indent + _inline(args[0]))
                extra = 4
            elif name == "RS":
                flush()
                indent += 4
            elif name == "RE":
                flush()
                indent = max(7, indent - 4)
            elif name in ("nf", "EX"):
                flush()
                fill = False
            elif name in ("fi", "EE"):
                fill = True
            elif name in ("B", "I", "SM", "SB"):
                para.append(_inline(" ".join(args)))
            elif name in ("BR", "IR", "RB", "RI", "BI", "IB"):
                para.append(_inline("".join(args)))
            elif name == "br":
                flush()
            else:
                continue
            if tag_pending and name in ("B", "I", "BR", "IR", "RB", "RI", "BI", "IB"):
                flush()
                extra = 4
                tag_pending = False
            continue
        line = _inline(raw)
        if not fill:
            out.append(" " * (indent + extra) + line)
        elif tag_pending:
            out.append(" " * indent + line)
            extra = 4
            tag_pending = False
        elif line.strip():
            para.append(line.strip())
        else:
            flush()
            out.append("")
    flush()
    return "\n".join(out).rstrip() + "\n"
