"""Run records kept in the repository (see gititerare-records(5)).

Layers, lowest first: :mod:`ids` (names and ref names), :mod:`record` (the value and its
JSON), :mod:`cas` (compare-and-swap ref updates with dulwich), :mod:`store` (the
:class:`~git_iterare.runs.store.RunStore` API), :mod:`notes`, :mod:`index` (fast listing),
:mod:`sync` (push/fetch), :mod:`legacy` (import from iterare), :mod:`render` (output).
"""
