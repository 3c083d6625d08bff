"""The HTTP transport: the v1 routes on aiohttp, kept thin -- decode, call the Service, encode.

Transport rules (docs/semantics.md §1): every RPC is a POST; bodies are JSON or binary protobuf by
Content-Type and Accept; each route has a body limit that is enforced before the body is read whole;
any other method is a 400, an unknown path a 501. Errors are mapped to replies in exactly one place
(``_replies.error_reply``).

Modules: ``_routes`` (``create_app``, ``create_admin_app``: the route table; ``dispatch_directly``:
the v1 routes served without aiohttp's router), ``_handler`` (one route's handler: checks, decoding,
the service call, its errors), ``_auth`` (the authentication middleware and signed forwards;
``unauthenticated``, which tells the connection limits a request refused without a valid key), ``_body``
(body limits, reading a body), ``_replies`` (``Reply``, which writes a reply; encoding replies and
errors, the view older JSON clients get), ``_probes`` (``/health``, ``/ready``, ``/metrics``,
``/openapi.yaml``), ``_hosts`` (``check_hosts``: the Host names a keyless node answers) and
``_protocol`` (``protocol_factory``: each connection's protocol).
"""

from querator.http._auth import unauthenticated
from querator.http._body import (
    DEFAULT_BODY,
    IMPORT_BODY,
    MAX_PRODUCE_BODY,
    NAME_BODY,
    SMALL_BODY,
    UPDATE_BODY,
    human_size,
)
from querator.http._hosts import AllowedHosts, check_hosts
from querator.http._probes import OPENAPI_CONTENT_TYPE, OPENAPI_PATH, openapi_document
from querator.http._protocol import protocol_factory
from querator.http._replies import Reply
from querator.http._routes import (
    ADMIN_OPEN_PATHS,
    OPEN_PATHS,
    create_admin_app,
    create_app,
    dispatch_directly,
)

__all__ = [
    "ADMIN_OPEN_PATHS",
    "DEFAULT_BODY",
    "IMPORT_BODY",
    "MAX_PRODUCE_BODY",
    "NAME_BODY",
    "OPENAPI_CONTENT_TYPE",
    "OPENAPI_PATH",
    "OPEN_PATHS",
    "SMALL_BODY",
    "UPDATE_BODY",
    "AllowedHosts",
    "Reply",
    "check_hosts",
    "create_admin_app",
    "create_app",
    "dispatch_directly",
    "human_size",
    "openapi_document",
    "protocol_factory",
    "unauthenticated",
]
