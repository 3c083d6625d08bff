"""Querator in a Django project (docs/frameworks.md).

::

    # settings.py
    INSTALLED_APPS = [..., "querator.contrib.django"]
    QUERATOR = {"ENDPOINT": "http://querator:2319", "API_KEY": "...", "WORKER": "shop.tasks:worker"}

    # a view
    with transaction.atomic():
        order = Order.objects.create(...)
        enqueue_on_commit(send_receipt, order.id)       # produced once the transaction commits

    python manage.py querator_worker --concurrency 16   # runs the WORKER's tasks

Modules: ``_settings`` (the ``QUERATOR`` setting, checked at start), ``_commit`` (``enqueue_on_commit``),
``apps`` (the app, which points the worker at ``ENDPOINT``) and ``management.commands.querator_worker``
(the command; sync tasks close the thread's stale database connections around each run). ``apps`` and
``management`` are named as Django finds them.
"""

from __future__ import annotations

from querator.contrib.django._commit import enqueue_on_commit
from querator.contrib.django._settings import QueratorSettings, querator_settings

__all__ = ["QueratorSettings", "enqueue_on_commit", "querator_settings"]
