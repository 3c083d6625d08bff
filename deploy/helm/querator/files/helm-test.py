"""The ``helm test`` check of a Querator release: through the client Service, create a queue, produce
an item, lease it, complete it, and delete the queue.

Runs in the Querator image (``python -c``), so it uses the package's own blocking client. It reads the
endpoint and the API key from ``QUERATOR_ENDPOINT`` and ``QUERATOR_API_KEY``, as the CLI does. The
chart's tests run this same file against real nodes (tests/helm/test_cluster_wiring.py).
"""

import os
import secrets
import sys

from querator.client import Client

endpoint = os.environ["QUERATOR_ENDPOINT"]
# A fresh queue per run: a failed run never leaves items behind for the next one to trip over.
queue = "helm-test-" + secrets.token_hex(4)
payload = "hello from helm test " + queue

with Client(endpoint, api_key=os.environ.get("QUERATOR_API_KEY") or None) as client:
    client.create_queue(queue, lease_timeout="1m", expire_timeout="10m")
    try:
        client.produce(queue, [payload], request_timeout="30s")
        leased = client.lease(queue, batch_size=1, client_id=queue, request_timeout="30s")
        got = [item.bytes.decode() for item in leased.items]
        if got != [payload]:
            sys.exit(f"leased {got!r}, expected [{payload!r}]")
        client.complete(queue, leased.partition, [item.id for item in leased.items], request_timeout="30s")
    finally:
        client.delete_queue(queue)
print(f"ok: created, produced, leased and completed through {endpoint}")
