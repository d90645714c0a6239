"""The run lifecycle: the one place that ties records, sandbox, agents and worktrees.

* :mod:`.launch` -- ``execute``: prompt, credentials, image, record, worktree, sandbox.
* :mod:`.finish` -- whoever sees a run end first commits its work, imports it, records
  the result and removes the container; :func:`reconcile` does it for every run whose
  container ended (or vanished) while nobody watched.
* :mod:`.follow` -- streaming a run's log while it runs, or from its record afterwards.
* :mod:`.manage` -- stop, diff, merge, cleanup.

Heavy modules (docker, dulwich) are imported inside functions, so importing this package
stays cheap.
"""

from __future__ import annotations
