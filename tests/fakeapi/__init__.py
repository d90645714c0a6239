"""Fake model APIs for tests: Anthropic Messages (:mod:`tests.fakeapi.server`, whose
scaffolding the others share), Gemini (:mod:`tests.fakeapi.gemini`) and OpenAI Responses
(:mod:`tests.fakeapi.openai_server`)."""
