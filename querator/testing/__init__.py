"""A real Querator node inside the test's own process, whose time can skip ahead (docs/testing.md).

Users' tests of their tasks and workflows need a node. ``Node`` is one: the same service, HTTP routes and
memory store as ``querator serve --storage memory``, on a loopback port of the running event loop, so a
test needs no process, no port to choose and no clean-up. ``Node.skip`` moves the node's time forward:
delayed items, retries, durable sleeps and lease expiries that fall due run now, as they would once that
much time had passed, so a test of a two-day ``sleep`` takes milliseconds.

    async with Node() as node:
        async with node.running(worker):          # points the worker (or a Durable app) at the node
            await send_email.enqueue("a@example.com", delay=timedelta(days=2))
            await node.skip(timedelta(days=2))

The node's time is the wall clock plus every skip; workflow timers compare with the node's time, which
the durable runtime reads from the node (not from this machine), so they skip with it. A worker's own
waits (its back-off between lease attempts, a step's ``timeout``) stay on the wall clock.

Modules: ``_node`` (``Node``), ``_clock`` (``SkippingClock``) and ``fixtures`` (a pytest plugin: the
``querator_node`` fixture).
"""

from __future__ import annotations

from querator.testing._clock import SkippingClock
from querator.testing._node import Node

__all__ = ["Node", "SkippingClock"]
