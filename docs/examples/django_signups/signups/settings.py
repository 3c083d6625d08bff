"""A small Django project whose signups send a welcome through a querator task."""

import os
from pathlib import Path

SECRET_KEY = "an-example-only"
DEBUG = False
USE_TZ = True
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
INSTALLED_APPS = ["signups", "querator.contrib.django"]
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": os.environ.get("SIGNUPS_DB", str(Path(__file__).resolve().parent.parent / "db.sqlite3")),
    }
}
QUERATOR = {
    "ENDPOINT": os.environ.get("QUERATOR_ENDPOINT", "http://localhost:2319"),
    "WORKER": "signups.tasks:worker",
}
