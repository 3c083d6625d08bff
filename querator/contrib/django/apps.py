"""The Django app of ``querator.contrib.django``: checks ``QUERATOR`` and connects the project's worker."""

from __future__ import annotations

from django.apps import AppConfig

from querator.contrib.django._settings import querator_settings


class QueratorConfig(AppConfig):
    name = "querator.contrib.django"
    label = "querator"
    verbose_name = "Querator"

    def ready(self) -> None:
        """Checks the setting at start (a typo fails the project's start, not a task later), and points
        the project's worker at ``ENDPOINT`` before any view enqueues."""
        found = querator_settings()
        if found.worker:
            found.load_worker()
