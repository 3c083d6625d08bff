"""The service: Querator's one Python API over a storage backend, on one node or in a cluster.

``Service`` takes and returns wire messages (``querator.wire.messages``): the HTTP layer decodes, calls it
and encodes, and an embedding program calls it directly with the same results. Inside:

- ``_validation``: every request's checks, in the reference's order and words, made before anything
  waits or is forwarded;
- ``_conversion``: wire messages to and from what the engine and storage hold;
- ``_local_queue``: this node's engine of a queue, with the methods of ``cluster.RemoteQueue``;
- ``_queue_admin``: queue administration (create, update, delete, info, list, and telling the other
  members of a change), mixed into ``Service``;
- ``_bounds``: the count bounds of the requests' repeated fields, checked as a body is decoded;
- ``_service``: ``Service`` itself -- routing each request to one of those.
"""

from querator.service._bounds import REQUEST_BOUNDS
from querator.service._service import Service
from querator.service._validation import MAX_NAME, deadline_us

__all__ = ["MAX_NAME", "REQUEST_BOUNDS", "Service", "deadline_us"]
