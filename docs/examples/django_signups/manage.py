"""The Django example's manage.py (docs/frameworks.md): ``python manage.py migrate --run-syncdb``,
``python manage.py signup a@example.com``, ``python manage.py querator_worker``."""

import os
import sys

if __name__ == "__main__":
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "signups.settings")
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)
