"""Numeric option values whose errors say what is wanted.

click's ``IntRange`` and ``FloatRange`` answer ``--timeout abc`` with "'abc' is not a valid
integer range", which names click's type, not the value the option wants. These types
take the same values and say, for instance, "'abc' is not a whole number of seconds (0 or
more; 0: no limit)".
"""

from __future__ import annotations

import math
from typing import Any

import click


class Number(click.ParamType):  # type: ignore[type-arg]  # generic only in click 8.2
    """A whole number (``whole=True``) or any finite number within ``minimum..maximum``.

    Args:
        what: what the value counts, for messages: ``seconds``, ``US dollars``, ``turns``.
        whole: only integers (returned as ``int``); otherwise ``float``.
        minimum: the smallest value allowed.
        maximum: the largest value allowed, or None for no bound.
        zero: what 0 means (``no limit``), said in messages; None when 0 means nothing
            special.
    """

    def __init__(self, what: str, *, whole: bool, minimum: float = 0,
                 maximum: float | None = None, zero: str | None = None):
        self.what = what
        self.whole = whole
        self.minimum = minimum
        self.maximum = maximum
        self.zero = zero
        self.name = f"{'whole ' if whole else ''}number of {what}"

    def wanted(self) -> str:
        """What a valid value is, as the end of "'abc' is not ...": ``a whole number of
        seconds (0 or more; 0: no limit)``, or ``0, 1 or 2`` for a small whole range."""
        low = _plain(self.minimum)
        if self.whole and self.maximum is not None and self.maximum - self.minimum <= 3:
            values = [str(v) for v in range(int(self.minimum), int(self.maximum) + 1)]
            return f"{', '.join(values[:-1])} or {values[-1]}"
        bounds = (f"{low} to {_plain(self.maximum)}" if self.maximum is not None
                  else f"{low} or more")
        meaning = f"; 0: {self.zero}" if self.zero else ""
        return f"a {self.name} ({bounds}{meaning})"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None
                ) -> Any:
        if isinstance(value, bool):
            self.fail(f"{value!r} is not {self.wanted()}", param, ctx)
        number: float
        if isinstance(value, (int, float)):
            number = value
        else:
            try:
                number = int(str(value).strip()) if self.whole else float(str(value).strip())
            except ValueError:
                self.fail(f"{value!r} is not {self.wanted()}", param, ctx)
        if self.whole and number != int(number):
            self.fail(f"{value!r} is not {self.wanted()}", param, ctx)
        if not math.isfinite(number) or number < self.minimum or (
                self.maximum is not None and number > self.maximum):
            self.fail(f"{value!r} is not {self.wanted()}", param, ctx)
        return int(number) if self.whole else float(number)


def _plain(value: float) -> str:
    return str(int(value)) if value == int(value) else str(value)


#: ``-v/--verbosity`` of ``log`` and ``execute``: 0, 1 or 2.
VERBOSITY = Number("verbosity level", whole=True, minimum=0, maximum=2)
