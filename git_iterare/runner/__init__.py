"""The run lifecycle: the one place that ties records, sandbox, agents and worktrees.

* :mod:`.launch` -- ``execute``: prompt, credentials, image, record, worktree, sandbox
  (one frozen :class:`~.launch.LaunchPlan` for the launch itself).
* :mod:`.finish` -- whoever sees a run end first commits its work, imports it, records
  the result and removes the container; :func:`reconcile` does it for every run whose
  container ended (or vanished) while nobody watched.
* :mod:`.follow` -- streaming a run's log while it runs, or from its record afterwards.
* :mod:`.manage` -- stop, diff, merge, cleanup.
* :mod:`.interactive` -- terminal sessions (on the user's checkout, or as a run) and the
  sandboxed login.
* :mod:`.workspace` -- the run's worktree and gitdir: made, found again, asked for
  unfinished work, removed; :mod:`.importer` brings the agent's work back as commits.
* :mod:`.spec` -- the one builder of a sandbox spec; :mod:`.guard` and :mod:`.trust` --
  the checks and approvals before any sandbox starts; :mod:`.ownership` -- which runs and
  containers are this machine's; :mod:`.secrets`, :mod:`.paths` -- per-run host state.
* Facades for the command line, which reaches nothing below the runner itself:
  :mod:`.session` (repository, configuration, engine, verbosity), :mod:`.image`,
  :mod:`.project` (``init``, ``install``), :mod:`.credentials` and :mod:`.agent_list` (the
  registered agents as help lists them).

Heavy modules (docker, dulwich) are imported inside functions, so importing this package
stays cheap; types from below are imported for annotations only (``TYPE_CHECKING``).
"""

from __future__ import annotations
