"""The count bounds of every request's repeated fields, which the HTTP layer has the decoder check before
it builds a request (``querator.wire.Bound``): each is the limit the request's checks keep, refused in
their words, with "more than <limit>" for a count the decoder stopped short of."""

from __future__ import annotations

from typing import Final

from querator.service._validation import (
    MAX_APPEND_ENTRIES,
    MAX_COMPLETE_BATCH,
    MAX_DELETE_IDS,
    MAX_IMPORT_BATCH,
    MAX_PARTITIONS,
    MAX_PRODUCE_BATCH,
    TOO_MANY_ENTRIES,
    TOO_MANY_FAILURES,
    partitions_error,
    too_many,
)
from querator.storage.failures import MAX_FAILURES
from querator.tenancy import MAX_PERMISSIONS, TOO_MANY_PERMISSIONS
from querator.wire import Bound, Bounds
from querator.wire import messages as m


def _batch(field: str, setting: str, limit: int, inner: Bounds | None = None) -> Bound:
    return Bound(limit, too_many(field, setting, limit, f"more than {limit}").message, inner or {})


_IDS: Final = _batch("ids", "max_complete_batch_size", MAX_COMPLETE_BATCH)
_TOKENS: Final = _batch("lease tokens", "max_complete_batch_size", MAX_COMPLETE_BATCH)
_PERMISSIONS: Final = {"permissions": Bound(MAX_PERMISSIONS, TOO_MANY_PERMISSIONS)}
_PARTITIONS: Final = {"partitions": Bound(MAX_PARTITIONS, partitions_error().message)}

REQUEST_BOUNDS: Final[dict[type[m.Message], Bounds]] = {
    m.QueueProduceRequest: {"items": _batch("items", "max_produce_batch_size", MAX_PRODUCE_BATCH)},
    m.QueueCompleteRequest: {"ids": _IDS, "lease_tokens": _TOKENS},
    m.QueueRenewRequest: {"ids": _IDS, "lease_tokens": _TOKENS},
    m.QueueRetryRequest: {"items": _batch("items", "max_complete_batch_size", MAX_COMPLETE_BATCH)},
    m.StorageItemsImportRequest: {
        "items": _batch(
            "items",
            "max_import_batch_size",
            MAX_IMPORT_BATCH,
            {"failures": Bound(MAX_FAILURES, TOO_MANY_FAILURES)},
        )
    },
    m.StorageItemsDeleteRequest: {"ids": _batch("ids", "max_delete_ids", MAX_DELETE_IDS)},
    m.WorkflowsAppendRequest: {"entries": Bound(MAX_APPEND_ENTRIES, TOO_MANY_ENTRIES)},
    m.QueueInfo: _PARTITIONS,
    m.RoleCreateRequest: _PERMISSIONS,
    m.RoleUpdateRequest: _PERMISSIONS,
}
"""Every request message with a repeated field, and the bound of each such field."""
