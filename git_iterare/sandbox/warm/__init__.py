"""Start-sooner work of the Docker backend: spare network sidecars (:mod:`.spare`).

Reached only through :mod:`git_iterare.runner.warmup`, the one door of start-sooner work;
the plain launch never needs it.
"""
