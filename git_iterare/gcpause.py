"""Python's cyclic garbage collector, paused while a command starts up.

Starting a command builds hundreds of thousands of long-lived objects (modules, classes,
the docker SDK) and almost no cyclic garbage, yet the collector runs every few hundred
allocations and scans them all: about a tenth of ``execute``'s start-up CPU time. The
``bin/`` scripts pause it before importing anything; :func:`resume` brings it back, with
what start-up made moved out of its way (``gc.freeze``), before a command's real work:
at once for most commands, after the launch for ``execute`` and ``interactive``.
"""

from __future__ import annotations

import gc

#: Commands that resume collection themselves, once their sandbox is launched
#: (:func:`git_iterare.runner.launch.execute`).
RESUMED_AFTER_LAUNCH = frozenset({"execute", "interactive"})

_paused = False


def pause() -> None:
    """Stop automatic collection until :func:`resume` (the ``bin/`` scripts call it)."""
    global _paused
    if gc.isenabled():
        gc.disable()
        _paused = True


def resume() -> None:
    """Collect automatically again if :func:`pause` stopped it; objects made so far are
    frozen (never scanned again). Idempotent; does nothing when nothing was paused."""
    global _paused
    if _paused:
        _paused = False
        gc.freeze()
        gc.enable()
