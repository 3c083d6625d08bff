"""Querator inside web frameworks: ``querator.contrib.django`` and ``querator.contrib.fastapi``
(docs/frameworks.md). They use the client and the worker only, as any program of a user would.
"""
