"""The GET routes: liveness and readiness probes, metrics, and the OpenAPI document."""

from __future__ import annotations

import asyncio
import functools
import importlib.resources
import logging
from typing import Any

import msgspec
from aiohttp import web

from querator import __version__
from querator.clock import to_datetime
from querator.http._auth import READY_DETAILS
from querator.http._replies import unknown
from querator.service import Service

log = logging.getLogger("querator.http")

SERVICE = web.AppKey("service", Service)
"""The service an application serves (``_routes`` sets it): what these routes ask."""
HEALTH_TIMEOUT = 0.5
"""Seconds /health waits for its storage probe: well inside any liveness probe's timeout."""
OPENAPI_PATH = "/openapi.yaml"
OPENAPI_CONTENT_TYPE = "application/yaml"


async def health(request: web.Request) -> web.StreamResponse:
    """Liveness, in the draft health+json format the reference uses, with its storage probe.

    Liveness means the process and its event loop answer, so a failing or slow storage is reported
    (overall ``warn``, the check ``fail``) but still answered 200 within ``HEALTH_TIMEOUT``: restarting
    a node cannot fix its database, and would turn a storage outage into a restart storm. ``/ready`` is
    what takes a node out of traffic.
    """
    if request.method != "GET":
        return await unknown(request)
    service = request.app[SERVICE]
    check: dict[str, Any] = {"componentType": "datastore", "status": "pass"}
    try:
        await asyncio.wait_for(service.store.list_queues("", 1, "_system"), HEALTH_TIMEOUT)
    except Exception as e:
        log.warning("health check: storage check failed: %s", e or type(e).__name__)
        check.update(status="fail", output="storage check failed")
    check["time"] = _rfc3339_seconds(service.clock.now())
    status = "pass" if check["status"] == "pass" else "warn"
    body = {"status": status, "version": __version__, "checks": {"queues:storage": [check]}}
    return web.Response(
        body=msgspec.json.encode(body), status=200, headers={"Content-Type": "application/health+json"}
    )


async def ready(request: web.Request) -> web.StreamResponse:
    """Readiness: 200 when this node should get traffic, 503 with the reason otherwise."""
    if request.method != "GET":
        return await unknown(request)
    reason = await request.app[SERVICE].ready()
    body: dict[str, str] = {"status": "fail" if reason else "pass"}
    if reason and request.get(READY_DETAILS, True):
        body["output"] = reason
    return web.Response(
        body=msgspec.json.encode(body),
        status=503 if reason else 200,
        headers={"Content-Type": "application/health+json"},
    )


async def metrics(request: web.Request) -> web.StreamResponse:
    if request.method != "GET":
        return await unknown(request)
    body, content_type = await request.app[SERVICE].render_metrics(request.headers.get("Accept", ""))
    return web.Response(body=body, headers={"Content-Type": content_type})


@functools.cache
def openapi_document() -> bytes:
    """``querator/openapi.yaml``, the OpenAPI 3.1 description of every route above (package data)."""
    return importlib.resources.files("querator").joinpath("openapi.yaml").read_bytes()


async def openapi(request: web.Request) -> web.StreamResponse:
    if request.method != "GET":
        return await unknown(request)
    return web.Response(body=openapi_document(), headers={"Content-Type": OPENAPI_CONTENT_TYPE})


def _rfc3339_seconds(micros: int) -> str:
    return to_datetime(micros).strftime("%Y-%m-%dT%H:%M:%SZ")
