"""Removing secrets, and the common encodings of them, from text git-iterare stores or shows.

Secrets are registered with :func:`git_iterare.proc.register_secret` (credentials, ``--env``
and frontmatter ``env:`` values). :func:`Redactor.redact` replaces, in one pass of one
compiled regular expression built once per set of secrets, every occurrence of:

* a secret of at least :data:`MIN_ENCODED` characters as it is, anywhere; and, when it
  holds at least :data:`MIN_ENCODED` letters and digits, also:

  - its letters and digits in any mix of upper and lower case, forwards and reversed, with
    any run of separators between any two of them: a separator is every character that is
    no letter or digit (a space, ``_``, ``.``, ``-``, a line break, a zero-width space, a
    soft hyphen, a combining mark...), the invisible letters Unicode has (the Hangul
    fillers), and a JSON escape (``\\n``, ``\\u200b``). So ``a b c``, ``a_b_c``, its
    characters with zero-width spaces between them and a DNS name split across labels
    (``abcd.efgh.example.org``) are caught;
  - its hex (any case, the same separators allowed);
  - its base64, standard and URL-safe alphabets, at each of the 3 alignments the secret
    can have inside a longer base64 text (only the characters that depend on the secret
    alone are matched; a line break may fall anywhere in it, as ``base64`` wraps at 76);
  - its base32 (RFC 4648, any case, at each of the 5 alignments, separators allowed);
  - its URL encoding (``quote`` and ``quote_plus``, any case of the ``%XX`` escapes);
* a secret of :data:`MIN_MASKED` to :data:`MIN_ENCODED` - 1 characters only as it is and
  only as a whole word (no letter or digit right before or after it), as Ansible masks
  short values: ``true`` is masked in ``debug=true``, not in ``untrue``;
* a secret shorter than :data:`MIN_MASKED` characters never (``DEBUG=1``): masking every
  ``1`` would destroy the text, as GitLab, Ansible and the Jenkins plugins say too.

Structured data (:meth:`Redactor.redact_value`: the agent's fields of a record, JSON lines
of its output) is redacted string by string, keys included, except that a string which is
exactly a short secret stays: the words an output format is made of (``"type": "text"``)
must survive a user's ``--env MODE=text``. :meth:`Redactor.redact_log` redacts JSON lines
so (they stay valid JSON) and other lines as text.

Not caught (git-iterare-execute(1), SECURITY): a secret split across the lines the live
stream shows one by one, with letters or digits between its characters, compressed,
encrypted, hashed, or encoded in any other way (base85, rot13, a character per line, a JSON
``\\uXXXX`` escape of every character, arithmetic on it...). Redaction keeps honest
mistakes out of records that travel with ``git push``; it cannot stop an agent that means
to smuggle a secret out.
"""

from __future__ import annotations

import base64
import re
import urllib.parse
from collections.abc import Callable, Iterable
from typing import Any

#: What a secret is replaced with.
MASK = "***"

#: Secrets shorter than this (characters) are never redacted: masking them would destroy
#: the text (``DEBUG=1``).
MIN_MASKED = 4

#: Secrets shorter than this (characters) are redacted only as they are and as whole
#: words; longer ones also in their encodings and with separators between characters.
MIN_ENCODED = 8

#: Letters Unicode counts as such that show as nothing (Hangul fillers): separators too.
_INVISIBLE_LETTERS = "\u115f\u1160\u3164\uffa0"
#: Any run of separators: characters that are no letter or digit (``\\W`` and ``_``), the
#: invisible letters, and JSON escapes (the agent's output is often JSON).
_SEP = rf"(?:\\u[0-9a-fA-F]{{4}}|\\[bfnrt]|[\W_{_INVISIBLE_LETTERS}])*"
#: Allowed between any two characters of a base64 form: a line break, also JSON-escaped.
_WRAP = r"(?:\r?\n|\\r?\\n)?"


def _joined(text: str, sep: str) -> str:
    return sep.join(re.escape(ch) for ch in text)


def _letters(text: str) -> str:
    """The letters and digits of ``text`` (what separators are matched between)."""
    return "".join(c for c in text if c.isalnum() and c not in _INVISIBLE_LETTERS)


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
    """The regular expressions matching ``secret`` and its encodings (see the module
    docstring).

    Args:
        secret: the secret value, at least :data:`MIN_MASKED` characters.

    Returns:
        ``(pattern, ignore_case, text)`` triples, the secret as it is first, then longest
        first: ``text`` is the form matched, without separators (its first character starts
        every match).
    """
    exact = re.escape(secret)
    if len(secret) < MIN_ENCODED:
        # Only as a whole word: no letter or digit right before or after it.
        return [(rf"(?<![^\W_]){exact}(?![^\W_])", False, secret)]
    raw = secret.encode("utf-8", "surrogateescape")
    found: dict[str, tuple[bool, str]] = {}
    letters = _letters(secret)
    if len(letters) >= MIN_ENCODED:
        for text in (letters, letters[::-1]):
            found[_joined(text, _SEP)] = (True, text)
    found[_joined(raw.hex(), _SEP)] = (True, raw.hex())
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
    found.pop(exact, None)
    rest = sorted(((p, ic, text) for p, (ic, text) in found.items()),
                  key=lambda item: -len(item[0]))
    # The secret as it is comes first: an alternative matching only its letters would
    # leave what surrounds them (``==`` at its end).
    return [(exact, False, secret), *rest]


def _compile(triples: list[tuple[str, bool, str]]) -> re.Pattern[str] | None:
    """One expression for every ``(pattern, ignore_case, text)`` of :func:`variants`."""
    parts = []
    firsts: set[str] = set()
    for pattern, ignore_case, text in triples:
        parts.append(f"(?i:{pattern})" if ignore_case else pattern)
        first = text[0]
        firsts.update({first, first.lower(), first.upper()} if ignore_case else {first})
    if not parts:
        return None
    # The lookahead on the first characters lets most positions fail at once (about
    # 2.5 times faster than trying every alternative at every position).
    start = "".join(re.escape(c) for c in sorted(firsts))
    return re.compile(f"(?=[{start}])(?:{'|'.join(parts)})")


class Redactor:
    """Replaces a fixed set of secrets and their encodings with :data:`MASK`.

    Args:
        secrets: the secret values; those shorter than :data:`MIN_MASKED` are ignored.
    """

    def __init__(self, secrets: Iterable[str]):
        self.secrets = frozenset(s for s in secrets if s)
        kept = sorted((s for s in self.secrets if len(s) >= MIN_MASKED), key=len,
                      reverse=True)
        self._regex = _compile([t for secret in kept for t in variants(secret)])
        short = [s for s in kept if len(s) < MIN_ENCODED]
        # A string that is exactly a short secret stays in structured data.
        self._short = re.compile("|".join(re.escape(s) for s in short)) if short else None
        self._long = _compile([t for s in kept if len(s) >= MIN_ENCODED for t in variants(s)])

    def redact(self, text: str) -> str:
        """``text`` with every secret and encoding of one replaced by :data:`MASK`."""
        if self._regex is None:
            return text
        return self._regex.sub(MASK, text)

    def _redact_string(self, text: str) -> str:
        if self._short is not None and self._short.fullmatch(text):
            return self._long.sub(MASK, text) if self._long is not None else text
        return self.redact(text)

    def redact_value(self, value: Any) -> Any:
        """``value`` (parsed JSON: dicts, lists, strings, numbers) with every string
        redacted, dictionary keys included (blocked DNS names are keys); a string that is
        exactly a short secret (under :data:`MIN_ENCODED` characters) stays."""
        if self._regex is None:
            return value
        if isinstance(value, str):
            return self._redact_string(value)
        if isinstance(value, dict):
            return {self._redact_string(k) if isinstance(k, str) else k: self.redact_value(v)
                    for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self.redact_value(v) for v in value]
        return value

    def redact_line(self, line: str) -> str:
        """One line of an agent's output: a JSON object or array redacted value by value
        (:meth:`redact_value`, written back compact when that changed it, so it stays valid
        JSON), anything else as text (:meth:`redact`). A line holding no secret is returned
        as it is."""
        if self._regex is None or not self._regex.search(line):
            return line
        body = line.rstrip("\r\n")
        if body.lstrip()[:1] in ("{", "["):
            import json

            try:
                data = json.loads(body)
            except ValueError:
                pass
            else:
                redacted = self.redact_value(data)
                if redacted == data:
                    return line
                return json.dumps(redacted, ensure_ascii=False,
                                  separators=(",", ":")) + line[len(body):]
        return self.redact(line)

    def redact_log(self, data: bytes) -> bytes:
        """An agent's output (UTF-8 lines; other bytes pass through unchanged), line by
        line as :meth:`redact_line` does."""
        if self._regex is None:
            return data
        text = data.decode("utf-8", "surrogateescape")
        return "".join(self.redact_line(line) for line in text.splitlines(keepends=True)
                       ).encode("utf-8", "surrogateescape")


_current: Redactor = Redactor(())


def current(secrets: Iterable[str]) -> Redactor:
    """The redactor for ``secrets``, rebuilt only when the set changed."""
    global _current
    wanted = frozenset(s for s in secrets if s)
    if wanted != _current.secrets:
        _current = Redactor(wanted)
    return _current
