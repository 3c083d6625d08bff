from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import transaction

from querator.contrib.django import enqueue_on_commit
from signups.models import Signup
from signups.tasks import send_welcome


class Command(BaseCommand):
    help = "Sign an address up; its welcome is enqueued once the signup is committed."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("email")
        parser.add_argument("--fail", action="store_true", help="fail after the enqueue: nothing is sent")

    def handle(self, *args: object, **options: object) -> None:
        with transaction.atomic():
            signup = Signup.objects.create(email=options["email"])
            enqueue_on_commit(send_welcome, signup.id)
            if options["fail"]:
                raise CommandError("the signup failed and was rolled back")
        self.stdout.write(f"signed up {signup.email}")
