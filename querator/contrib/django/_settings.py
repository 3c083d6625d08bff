"""The ``QUERATOR`` setting: where the node is, and which worker the project's tasks are on."""

from __future__ import annotations

from dataclasses import dataclass

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from querator.worker import Worker, load_worker

KEYS = frozenset({"ENDPOINT", "API_KEY", "WORKER"})


@dataclass(frozen=True)
class QueratorSettings:
    endpoint: str | None
    """The node (default: the worker's own, which is ``QUERATOR_ENDPOINT`` or localhost)."""
    api_key: str | None
    worker: str | None
    """``module:attribute`` of the project's ``Worker`` (or ``Durable`` app)."""

    def load_worker(self) -> Worker:
        """The project's worker, connected to ``endpoint`` when the setting names one.

        Raises:
            ImproperlyConfigured: no ``WORKER``, or it cannot be loaded.
        """
        if not self.worker:
            raise ImproperlyConfigured("QUERATOR['WORKER'] is not set: name the Worker as 'module:attribute'")
        try:
            worker = load_worker(self.worker)
        except (ValueError, ImportError, AttributeError) as e:
            raise ImproperlyConfigured(f"QUERATOR['WORKER']: {e}") from e
        if self.endpoint:
            worker.connect(self.endpoint, api_key=self.api_key)
        return worker


def querator_settings() -> QueratorSettings:
    """The project's ``QUERATOR`` setting (a dict; every key optional).

    Raises:
        ImproperlyConfigured: not a dict, an unknown key (a misspelling would be ignored otherwise), or a
            value that is not a string.
    """
    raw = getattr(settings, "QUERATOR", {})
    if not isinstance(raw, dict):
        raise ImproperlyConfigured("QUERATOR must be a dict")
    unknown = sorted(set(raw) - KEYS)
    if unknown:
        raise ImproperlyConfigured(f"QUERATOR has unknown keys {unknown}; known: {sorted(KEYS)}")
    for key, value in raw.items():
        if value is not None and not isinstance(value, str):
            raise ImproperlyConfigured(f"QUERATOR['{key}'] must be a string")
    return QueratorSettings(raw.get("ENDPOINT"), raw.get("API_KEY"), raw.get("WORKER"))
