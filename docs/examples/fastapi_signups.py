"""A FastAPI app that enqueues a querator task per signup (docs/frameworks.md).

QUERATOR_ENDPOINT=http://localhost:2319 uvicorn fastapi_signups:app --app-dir docs/examples
QUERATOR_ENDPOINT=http://localhost:2319 querator worker fastapi_signups:worker   # from docs/examples
"""

from fastapi import FastAPI

from querator.contrib.fastapi import QueratorClient, querator_lifespan
from querator.worker import Worker

worker = Worker()


@worker.task(queue="welcome-api", create_queue=True)
async def send_welcome(email: str) -> None:
    print(f"welcome, {email}")


app = FastAPI(lifespan=querator_lifespan(worker=worker))


@app.post("/signups")
async def signup(email: str) -> dict[str, str]:
    return {"job_id": await send_welcome.enqueue(email)}


@app.get("/backlog")
async def backlog(client: QueratorClient) -> dict[str, int]:
    stats = await client.stats("welcome-api")
    return {"waiting": sum(p.total - p.total_leased for q in stats.logical_queues for p in q.partitions)}
