from querator.worker import Worker
from signups.models import Signup

worker = Worker(concurrency=4)  # QUERATOR["ENDPOINT"] connects it


@worker.task(queue="welcome", create_queue=True)
def send_welcome(signup_id: int) -> None:
    # A sync task uses the ORM directly: querator_worker closes the thread's stale connections around it.
    Signup.objects.filter(id=signup_id).update(welcomed=True)
