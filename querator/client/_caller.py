"""``Caller``: the base of ``AsyncClient``'s groups of calls kept in modules of their own (queue
administration, storage, schedules, workflows, tenancy), which send through its ``call``."""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeVar

from querator.wire import messages as m

R = TypeVar("R", bound=m.Message)


class Caller:
    """Declares ``AsyncClient.call`` for the calls mixed into ``AsyncClient``."""

    if TYPE_CHECKING:

        async def call(
            self,
            path: str,
            msg: m.Message,
            reply_type: type[R],
            *,
            seconds: float | None = None,
            idempotent: bool = False,
        ) -> R: ...

    async def _reply_call(
        self, path: str, msg: m.Message, seconds: float | None = None, idempotent: bool = False
    ) -> None:
        """``call`` of a route whose reply carries nothing but success."""
        await self.call(path, msg, m.Reply, seconds=seconds, idempotent=idempotent)
