"""The floor of a request on this stack: aiohttp on uvloop answering produce, lease and complete with no
queue behind them, for bench/load.py to drive the same way it drives a node.

Each handler reads the body, decodes it with the wire codec the server uses (JSON or protobuf by its
Content-Type), and encodes the reply the server would give: a 200 ``Reply`` (produce's with its ids), a
lease of ``batch_size`` 1 KiB items, or a complete's 200. What a node spends beyond this per request is
the queue's own work. It tunes the garbage collector as a node does (``querator.server``), so that
neither is measured with a cost the other does not pay.

    python bench/floor.py --port 2400
"""

from __future__ import annotations

import argparse
import gc
import os
from datetime import UTC, datetime

import uvloop
from aiohttp import web

from querator.server import GC_THRESHOLD
from querator.wire import decode, encode
from querator.wire import messages as m

PAYLOAD = os.urandom(1024)
ID = "2a8Hb7uRwOsDHcQKsH2YyIxuZTG"
"""An item id as the node makes them (a KSUID), so replies are the node's size."""


async def produce(request: web.Request) -> web.Response:
    req = decode(await request.read(), request.content_type, m.QueueProduceRequest)
    reply = m.QueueProduceResponse(code=200, ids=[ID] * len(req.items))
    return _reply(request, reply)


async def lease(request: web.Request) -> web.Response:
    req = decode(await request.read(), request.content_type, m.QueueLeaseRequest)
    deadline = datetime.now(UTC)
    items = [
        m.QueueLeaseItem(id=ID, attempts=1, lease_deadline=deadline, bytes=PAYLOAD)
        for _ in range(req.batch_size)
    ]
    return _reply(request, m.QueueLeaseResponse(queue_name=req.queue_name, items=items))


async def complete(request: web.Request) -> web.Response:
    decode(await request.read(), request.content_type, m.QueueCompleteRequest)
    return _reply(request, m.OK_REPLY)


async def health(request: web.Request) -> web.Response:
    """What the harness polls until the app is up."""
    return web.json_response({"status": "pass"})


def _reply(request: web.Request, msg: m.Message) -> web.Response:
    body, content_type = encode(msg, request.headers.get("Accept"))
    return web.Response(body=body, content_type=content_type)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    app = web.Application()
    app.router.add_post("/v1/queue.produce", produce)
    app.router.add_post("/v1/queue.lease", lease)
    app.router.add_post("/v1/queue.complete", complete)
    app.router.add_get("/health", health)
    gc.freeze()
    gc.set_threshold(GC_THRESHOLD)
    web.run_app(app, host="127.0.0.1", port=args.port, print=None, loop=uvloop.new_event_loop())


if __name__ == "__main__":
    main()
