"""Git as users expect it: repository discovery (:mod:`.repo`), merges (:mod:`.merge`),
the review of changed files that would execute on the host (:mod:`.hostexec`), and running
git safely over trees the agent wrote (:mod:`.safegit`, :mod:`.checkout`, :mod:`.filters`).

Modules here know nothing about runs, the sandbox or agents.
"""
