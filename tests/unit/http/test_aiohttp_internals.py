"""The parts of aiohttp that are not its public API and that the node's fast reply (``http.Reply``,
docs/adr/0027-api-replies-written-in-one-write.md), its protocol (``http._protocol``) and the direct
dispatch (``http.dispatch_directly``, docs/adr/0026-v1-routes-dispatched-by-exact-path.md) rely on.

aiohttp may rename any of them in a minor release: pyproject.toml pins the minor versions this test
passed with (docs/dependencies.md), and a new aiohttp is admitted by running it first."""

from __future__ import annotations

import inspect
import re
import tomllib
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest
from aiohttp import abc, base_protocol, helpers, http_writer, web, web_response
from packaging.requirements import Requirement

from querator.http._replies import Reply

ROOT = Path(__file__).resolve().parents[3]

TESTED_AIOHTTP = ">=3.14,<3.15"
"""The aiohttp versions this file passed with: pyproject.toml allows these and no others."""


def _class_default(owner: type, name: str) -> None:
    """``name`` is a plain value ``owner`` declares at class level (Reply relies on its default)."""
    assert name in vars(owner), f"{owner.__qualname__}.{name} is gone"
    assert not isinstance(vars(owner)[name], property | Callable), f"{owner.__qualname__}.{name} changed kind"


def _set_by_init(owner: type, name: str) -> None:
    """``name`` is an instance attribute ``owner.__init__`` sets (Reply sets it instead of calling it)."""
    assert re.search(rf"\bself\.{name}\b\s*(:[^=]+)?=", inspect.getsource(vars(owner)["__init__"])), (
        f"{owner.__qualname__}.__init__ no longer sets {name}"
    )


def _reads(owner: type, method: str, name: str) -> Callable[[type, str], None]:
    """A check that ``owner.method`` still reads ``name`` (what Reply keeps in it reaches aiohttp)."""

    def check(_: type, __: str) -> None:
        found = inspect.getattr_static(owner, method)
        code: Any = found.fget if isinstance(found, property) else found
        assert name in inspect.getsource(code), f"{owner.__qualname__}.{method} no longer reads {name}"

    return check


def _property(owner: type, name: str) -> None:
    assert isinstance(inspect.getattr_static(owner, name, None), property), (
        f"{owner.__qualname__}.{name} is not a property"
    )


def _coroutine(owner: type, name: str) -> None:
    assert inspect.iscoroutinefunction(getattr(owner, name, None)), (
        f"{owner.__qualname__}.{name} is not a coroutine"
    )


def _function(owner: Any, name: str) -> None:
    assert callable(getattr(owner, name, None)), f"{owner!r}.{name} is gone"


SR = web.StreamResponse
RH = web.RequestHandler

# (owner, name, check): every private name, and every public name outside aiohttp's documented API,
# that querator/http uses, with the kind it must keep.
INTERNALS: list[tuple[Any, str, Callable[[Any, str], None]]] = [
    # Reply does not call StreamResponse.__init__ and sets what it would.
    (SR, "_state", _set_by_init),
    (SR, "_status", _reads(SR, "_set_status", "self._status =")),
    (SR, "_reason", _reads(SR, "_set_status", "self._reason =")),
    (SR, "_headers", _set_by_init),
    # Read by the public properties and methods aiohttp and the node call on a reply.
    (SR, "_keep_alive", _class_default),
    (SR, "_eof_sent", _class_default),
    (SR, "_body_length", _class_default),
    (SR, "_payload_writer", _class_default),
    (SR, "status", _reads(SR, "status", "self._status")),
    (SR, "reason", _reads(SR, "reason", "self._reason")),
    (SR, "keep_alive", _reads(SR, "keep_alive", "self._keep_alive")),
    (SR, "force_close", _reads(SR, "force_close", "self._keep_alive = False")),
    (SR, "body_length", _reads(SR, "body_length", "self._body_length")),
    (SR, "prepared", _reads(SR, "prepared", "self._eof_sent")),
    (SR, "write_eof", _reads(SR, "write_eof", "if self._eof_sent:")),
    (SR, "__len__", _reads(SR, "__len__", "self._state")),
    (
        helpers.HeadersMixin,
        "content_type",
        _reads(helpers.HeadersMixin, "content_type", "_headers"),
    ),
    # aiohttp prepares the handler's reply, then ends it: Reply.prepare writes everything.
    (RH, "finish_response", _reads(RH, "finish_response", "resp.prepare")),
    (RH, "finish_response", _reads(RH, "finish_response", "resp.write_eof()")),
    # What Reply.prepare uses of the request's writer and protocol.
    (abc.AbstractStreamWriter, "output_size", _class_default),
    (http_writer.StreamWriter, "drain", _coroutine),
    (base_protocol.BaseProtocol, "writing_paused", _property),
    (helpers, "rfc822_formatted_time", _function),
    # http._protocol's subclass of the connection's protocol.
    (RH, "__slots__", getattr),
    (RH, "handle_error", _function),
    # http.dispatch_directly replaces what a new connection's protocol calls.
    (web.Server, "request_handler", _set_by_init),
    (RH, "__init__", _reads(RH, "__init__", "manager.request_handler")),
]


@pytest.mark.parametrize(
    ("owner", "name", "check"),
    INTERNALS,
    ids=[f"{getattr(o, '__qualname__', getattr(o, '__name__', o))}.{n}" for o, n, _ in INTERNALS],
)
def test_an_internal_the_node_relies_on_is_unchanged(
    owner: Any, name: str, check: Callable[..., None]
) -> None:
    check(owner, name)


def test_every_aiohttp_attribute_reply_uses_is_listed() -> None:
    """A ``self._x`` in Reply that aiohttp's response module also uses must be in INTERNALS."""
    used = set(re.findall(r"self\.(_\w+)", inspect.getsource(Reply)))
    aiohttp_source = inspect.getsource(web_response) + inspect.getsource(helpers.HeadersMixin)
    theirs = {name for name in used if re.search(rf"self\.{name}\b", aiohttp_source)}
    listed = {name for owner, name, _ in INTERNALS if owner is SR}
    assert theirs, "Reply uses none of aiohttp's attributes: the pattern is wrong"
    assert theirs <= listed, theirs - listed


def test_handle_error_keeps_the_signature_the_protocol_overrides() -> None:
    assert list(inspect.signature(RH.handle_error).parameters) == [
        "self",
        "request",
        "status",
        "exc",
        "message",
    ]


def test_the_protocol_options_the_node_sets_are_accepted() -> None:
    parameters = inspect.signature(RH.__init__).parameters
    assert {"auto_decompress", "access_log"} <= set(parameters)


def test_pyproject_pins_the_tested_aiohttp() -> None:
    """pyproject.toml admits exactly the versions this file passed with, and the installed one is
    among them."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    pins = [Requirement(d) for d in project["dependencies"] if Requirement(d).name == "aiohttp"]
    assert [str(p.specifier) for p in pins] == [str(Requirement(f"aiohttp{TESTED_AIOHTTP}").specifier)]
    assert pins[0].specifier.contains(metadata.version("aiohttp"))
