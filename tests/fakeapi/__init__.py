"""A fake Anthropic Messages API for tests (see :mod:`tests.fakeapi.server`)."""
