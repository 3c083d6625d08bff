"""How task arguments become bytes and back: JSON by default, any ``Serializer`` instead.

Decoding is typed: each argument is converted to its parameter's annotation (``typed``), so msgspec
Structs, dataclasses, datetimes and pydantic models arrive as themselves, not as the dicts and strings
JSON carries.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import Any, Protocol, get_type_hints

import msgspec


class Serializer(Protocol):
    """Turns values into bytes and back. ``content_type`` is stored as each item's ``encoding``."""

    content_type: str

    def dumps(self, value: Any) -> bytes: ...

    def loads(self, data: bytes) -> Any: ...


def _pydantic_dump(value: Any) -> Any:
    """msgspec's hook for what it cannot encode itself: pydantic models (found by their method, so pydantic
    need not be installed)."""
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        return dump(mode="json")
    raise TypeError(f"cannot serialize a {type(value).__name__} as JSON")


class JsonSerializer:
    """JSON through msgspec: builtins, msgspec Structs, dataclasses, datetimes, UUIDs, enums, and pydantic
    models (``model_dump``)."""

    content_type = "application/json"

    def __init__(self) -> None:
        self._encoder = msgspec.json.Encoder(enc_hook=_pydantic_dump)
        self._decoder = msgspec.json.Decoder()

    def dumps(self, value: Any) -> bytes:
        return self._encoder.encode(value)

    def loads(self, data: bytes) -> Any:
        return self._decoder.decode(data)


def _pydantic_load(kind: type, value: Any) -> Any:
    """msgspec's hook for types it does not know: pydantic models, by their ``model_validate`` (wherever
    they are: an argument, or inside a list or a Struct)."""
    validate = getattr(kind, "model_validate", None)
    if callable(validate):
        return validate(value)
    if kind is object:  # ``dict[str, object]``: anything goes, as it came
        return value
    raise NotImplementedError(f"cannot convert to {kind!r}")


def typed(value: Any, annotation: Any) -> Any:
    """``value`` as ``annotation``, converted by msgspec (pydantic models by their own validation);
    unannotated values as they are.

    Raises:
        msgspec.ValidationError: the value does not fit (pydantic's errors too, wrapped).
    """
    if annotation is inspect.Parameter.empty or annotation is Any:
        return value
    return msgspec.convert(value, annotation, strict=False, dec_hook=_pydantic_load)


class Signature:
    """A task function's parameters, to convert decoded arguments to their annotations, and its return
    annotation (``returns``), to convert a decoded result.

    ``skip``: leading parameters the caller passes itself (a durable workflow's ``Context``).
    """

    def __init__(self, fn: Callable[..., Any], skip: int = 0) -> None:
        signature = inspect.signature(fn)
        self._signature = signature.replace(parameters=list(signature.parameters.values())[skip:])
        try:
            hints = get_type_hints(fn)
        except Exception:  # an annotation that does not resolve: leave that function's values untyped
            hints = {}
        self._hints = {name: hints.get(name, inspect.Parameter.empty) for name in self._signature.parameters}
        self.returns = hints.get("return", inspect.Parameter.empty)

    def check(self, args: Sequence[Any], kwargs: dict[str, Any]) -> None:
        """Raises ``TypeError`` when ``args`` and ``kwargs`` do not fit the parameters (a misspelt or
        missing argument): at enqueue, so that the caller learns it, not the dead-letter queue."""
        self._signature.bind(*args, **kwargs)

    def convert(self, args: list[Any], kwargs: dict[str, Any]) -> inspect.BoundArguments:
        """The call of ``args`` and ``kwargs``, each converted to its parameter's annotation.

        Raises:
            TypeError: they do not fit the signature.
            msgspec.ValidationError: a value does not fit its annotation.
        """
        bound = self._signature.bind(*args, **kwargs)
        for name, value in bound.arguments.items():
            kind = self._signature.parameters[name].kind
            hint = self._hints[name]
            if kind is inspect.Parameter.VAR_POSITIONAL:
                bound.arguments[name] = tuple(typed(v, hint) for v in value)
            elif kind is inspect.Parameter.VAR_KEYWORD:
                bound.arguments[name] = {k: typed(v, hint) for k, v in value.items()}
            else:
                bound.arguments[name] = typed(value, hint)
        return bound
