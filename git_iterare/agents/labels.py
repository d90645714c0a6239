"""Wording shared by everything that shows what an agent reported.

A module of its own, importing nothing, so ``git iterare list`` can label costs without
loading the agents' types (:mod:`.values`) or any agent.
"""

#: The label of every figure and text that only the agent's own log vouches for.
REPORTED = "(reported by the agent)"
