"""Removing secrets, and the common encodings of them, from text git-iterare stores or shows.

Secrets are registered with :func:`git_iterare.proc.register_secret` (credentials, ``--env``
and frontmatter ``env:`` values). :func:`redact` replaces, in one pass of one compiled
regular expression built once per set of secrets, every occurrence of:

* the secret as is;
* for secrets of at least :data:`MIN_ENCODED` characters, also:

  - the secret in any mix of upper and lower case, reversed, and with a ``.`` or ``-``
    between any two characters (a DNS name is case-insensitive, and a long secret must be
    split across labels: ``abcd.efgh.example.org``);
  - its hex (any case, the same separators allowed);
  - its base64, standard and URL-safe alphabets, at each of the 3 alignments the secret
    can have inside a longer base64 text (only the characters that depend on the secret
    alone are matched; a line break may fall anywhere in it, as ``base64`` wraps at 76);
  - its base32 (RFC 4648, any case, at each of the 5 alignments, separators allowed);
  - its URL encoding (``quote`` and ``quote_plus``, any case of the ``%XX`` escapes).

Shorter secrets are replaced only as they are: their encoded forms are too short to tell
from ordinary text. Not caught (git-iterare-execute(1), SECURITY): a secret split at
arbitrary points across lines or output lines, compressed, encrypted, hashed, or encoded in
any other way (base85, rot13, a character per line, a JSON ``\\uXXXX`` escape of every
character, arithmetic on it...). Redaction keeps honest mistakes out of records that travel
with ``git push``; it cannot stop an agent that means to smuggle a secret out.
"""

from __future__ import annotations

import base64
import re
import urllib.parse
from collections.abc import Callable, Iterable
from typing import Any

#: What a secret is replaced with.
MASK = "***"

#: Secrets shorter than this (characters) are redacted only as they are, not encoded.
MIN_ENCODED = 8

#: Allowed between any two characters of the case-insensitive forms (DNS labels).
_SEP = "[.-]?"
#: Allowed between any two characters of a base64 form: a line break, also JSON-escaped.
_WRAP = r"(?:\r?\n|\\r?\\n)?"


def _joined(text: str, sep: str) -> str:
    return sep.join(re.escape(ch) for ch in text)


def _core(encode: Callable[[bytes], bytes], bits: int, group: int, data: bytes,
          offset: int) -> str:
    """The characters of ``encode(pad + data + pad)`` that depend on ``data`` alone, when
    ``data`` starts ``offset`` bytes into a block of ``group`` bytes."""
    text = encode(bytes(offset) + data + bytes(group)).decode("ascii")
    start_bit, end_bit = 8 * offset, 8 * (offset + len(data))
    first = -(-start_bit // bits)  # the first character that starts inside data
    last = end_bit // bits  # one past the last character that ends inside data
    return text[first:last]


def variants(secret: str) -> list[tuple[str, bool, str]]:
    """The regular expressions matching ``secret`` and its encodings.

    Args:
        secret: the secret value (non-empty).

    Returns:
        ``(pattern, ignore_case, text)`` triples, longest first: ``text`` is the form
        matched, without separators (its first character starts every match).
    """
    if len(secret) < MIN_ENCODED:
        return [(re.escape(secret), False, secret)]
    raw = secret.encode("utf-8", "surrogateescape")
    found: dict[str, tuple[bool, str]] = {}
    for text in (secret, secret[::-1], raw.hex()):
        found[_joined(text, _SEP)] = (True, text)
    for alphabet in (base64.b64encode, base64.urlsafe_b64encode):
        for offset in range(3):
            core = _core(alphabet, 6, 3, raw, offset)
            found.setdefault(_joined(core, _WRAP), (False, core))
    for offset in range(5):
        core = _core(base64.b32encode, 5, 5, raw, offset)
        found[_joined(core, _SEP)] = (True, core)
    for quoted in (urllib.parse.quote(secret, safe=""), urllib.parse.quote_plus(secret)):
        if quoted != secret:
            found[re.escape(quoted)] = (True, quoted)
    return sorted(((p, ic, text) for p, (ic, text) in found.items()),
                  key=lambda item: -len(item[0]))


class Redactor:
    """Replaces a fixed set of secrets and their encodings with :data:`MASK`.

    Args:
        secrets: the secret values; empty ones are ignored.
    """

    def __init__(self, secrets: Iterable[str]):
        self.secrets = frozenset(s for s in secrets if s)
        parts = []
        firsts: set[str] = set()
        for secret in sorted(self.secrets, key=len, reverse=True):
            for pattern, ignore_case, text in variants(secret):
                parts.append(f"(?i:{pattern})" if ignore_case else pattern)
                first = text[0]
                firsts.update({first, first.lower(), first.upper()} if ignore_case
                              else {first})
        # The lookahead on the first characters lets most positions fail at once (about
        # 2.5 times faster than trying every alternative at every position).
        start = "".join(re.escape(c) for c in sorted(firsts))
        self._regex = re.compile(f"(?=[{start}])(?:{'|'.join(parts)})") if parts else None

    def redact(self, text: str) -> str:
        """``text`` with every secret and encoding of one replaced by :data:`MASK`."""
        if self._regex is None:
            return text
        return self._regex.sub(MASK, text)

    def redact_bytes(self, data: bytes) -> bytes:
        """Like :meth:`redact` for bytes (UTF-8; other bytes pass through unchanged)."""
        if self._regex is None:
            return data
        return self.redact(data.decode("utf-8", "surrogateescape")).encode(
            "utf-8", "surrogateescape")

    def redact_value(self, value: Any) -> Any:
        """``value`` (parsed JSON: dicts, lists, strings, numbers) with every string redacted,
        dictionary keys included (blocked DNS names are keys)."""
        if self._regex is None:
            return value
        if isinstance(value, str):
            return self.redact(value)
        if isinstance(value, dict):
            return {self.redact(k) if isinstance(k, str) else k: self.redact_value(v)
                    for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self.redact_value(v) for v in value]
        return value


_current: Redactor = Redactor(())


def current(secrets: Iterable[str]) -> Redactor:
    """The redactor for ``secrets``, rebuilt only when the set changed."""
    global _current
    wanted = frozenset(s for s in secrets if s)
    if wanted != _current.secrets:
        _current = Redactor(wanted)
    return _current
