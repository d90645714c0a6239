"""Wording shared by everything that shows what an agent reported.

A module of its own, importing nothing, so ``git iterare list`` can label costs without
loading the agents' types (:mod:`.values`) or any agent.
"""

#: The label of every figure and text that only the agent's own log vouches for.
REPORTED = "(reported by the agent)"


def disputed(reports: int) -> str:
    """The label of figures from a log that held ``reports`` closing reports (more than
    one): the first report's are shown, and another one may be forged."""
    return (f"(reported by the agent, disputed: its log holds {reports} result reports; "
            "the first is shown)")
