"""An item's payload: the call's arguments and its trace context, in the task's serializer.

    {"args": [...], "kwargs": {...}, "trace": {"traceparent": "00-..."}}

Empty members are left out, and an empty payload is a call without arguments. Any producer (another
language, ``querator produce``, a schedule made with the CLI) can enqueue a task by writing this with
``kind`` = the task's name and ``encoding`` = the serializer's content type.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from querator.worker._serializer import Serializer


class EnvelopeError(ValueError):
    """A payload that is not an envelope: the item cannot run, ever (it is dead-lettered at once)."""


def pack(serializer: Serializer, args: Sequence[Any], kwargs: dict[str, Any], trace: dict[str, str]) -> bytes:
    envelope: dict[str, Any] = {}
    if args:
        envelope["args"] = list(args)
    if kwargs:
        envelope["kwargs"] = kwargs
    if trace:
        envelope["trace"] = trace
    return serializer.dumps(envelope)


def unpack(serializer: Serializer, data: bytes) -> tuple[list[Any], dict[str, Any], dict[str, str]]:
    """The arguments, keyword arguments and trace context of a payload.

    Raises:
        EnvelopeError: the payload does not decode, or is not an envelope.
    """
    if not data:
        return [], {}, {}
    try:
        envelope = serializer.loads(data)
    except Exception as e:
        raise EnvelopeError(f"payload does not decode: {e}") from e
    if not isinstance(envelope, dict):
        raise EnvelopeError("payload is not an envelope: not a mapping")
    args, kwargs, trace = envelope.get("args", []), envelope.get("kwargs", {}), envelope.get("trace", {})
    if not isinstance(args, list) or not isinstance(kwargs, dict) or not isinstance(trace, dict):
        raise EnvelopeError("payload is not an envelope: args, kwargs or trace of the wrong type")
    return args, kwargs, {str(k): str(v) for k, v in trace.items()}
