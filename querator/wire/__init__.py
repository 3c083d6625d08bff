"""The v1 wire format: the message classes (``messages``), their protojson and binary protobuf encodings,
and the duh content negotiation of docs/semantics.md §1.2. The service sees only the msgspec Structs of
``messages``; JSON is derived from their fields, binary protobuf goes through the classes protoc
generated from querator/proto/querator.proto, the one source of field numbers (docs/adr/0013).

    from querator.wire import PROTOBUF, decode, encode, messages as m

    request = decode(body, content_type, m.QueueLeaseRequest)  # ClientContentError (455) if it fails
    reply_body, reply_type = encode(reply, accept)

Modules: ``messages`` (public: one msgspec Struct per protobuf message), ``_fields`` (the field model
both codecs derive from a class), ``_json`` (the msgspec fast path), ``_protojson`` (Go protojson's
lenient rules and the error messages), ``_timestamps`` (RFC 3339 as Go reads it), ``_protobuf`` (binary
bodies, through the generated ``_pb`` package), ``_negotiation`` (Content-Type and Accept) and
``_errors``, and ``_bounds`` (the count bounds of repeated fields, checked before decoding).

JSON (``decode_json``/``encode_json``)
    Decoding first tries msgspec's typed decoder (C speed), which takes the canonical protojson shape:
    ``json_name`` keys, int32 as JSON integers, bytes as padded standard base64. A cheap check then covers
    what msgspec does not: int32 range, and timestamps -- msgspec's RFC 3339 parser takes inputs Go rejects
    (no offset, a space or lower-case ``t``), so when a message carries timestamps their strings are
    re-read (a second msgspec pass over a struct holding only them) and parsed by Go's rules. Anything
    msgspec refuses goes to the lenient path, which reproduces Go protojson's acceptance rules: keys may be
    the ``json_name`` (``queue_name``) or the lowerCamelCase proto field name (``queueName``); int32 takes
    a JSON number or a decimal string (Go's integer rules: ``1e2`` yes, ``1.0`` no); bytes take standard
    or URL-safe base64, padding optional, CR/LF ignored; ``null`` means unset for every field; timestamps
    must be RFC 3339 with ``Z`` or a numeric offset and at most nine fractional digits (kept to the
    microsecond, truncated). Unknown keys, a field given in both spellings, a non-object
    top level and invalid JSON are errors. Not reproduced: Go also rejects a key repeated verbatim
    (msgspec keeps the last), and msgspec rejects lone surrogate escapes (``\\uD800``).
    Decoded datetimes are always aware UTC.

    Encoding is msgspec's: zero values omitted, ``json_name`` keys, padded standard base64, int32 as
    numbers. Datetimes must be aware UTC to come out as Go writes them (``...Z``); msgspec prints 0 or 6
    fractional digits where Go prints 0/3/6/9, which parse the same. Ints are written as given: keep them
    in int32 range.

Binary protobuf (``decode_protobuf``/``encode_protobuf``)
    Google's upb runtime parses and writes the bodies; each Struct is converted from and to the generated
    message of the same name, paired field by field on ``json_name``. The wire rules are protobuf's:
    int32 as varints (negative values ten bytes long; on encode, values beyond int32 are truncated to it
    as Go's conversion does), invalid UTF-8 in a string is an error (as in Go's proto3), unknown fields
    (groups included) and known numbers with another wire type are skipped, repeated occurrences of a
    singular field merge, the last scalar wins, and encoding omits zero values but always writes a
    datetime that is not None (even Go's zero time). ``datetime | None`` is google.protobuf.Timestamp:
    decoded as aware UTC, sub-microsecond nanos truncated and out-of-range nanos normalised as Go's
    time.Unix does; a naive datetime is encoded as UTC. A body upb refuses, or a Timestamp beyond
    ``datetime``'s range, raises ``DecodeError`` with upb's reason ("Wire format was corrupt", "String
    field had bad UTF-8").

Negotiation (``decode``/``encode``/``negotiate_accept``)
    A header is cut at the first ``;`` or ``,``, trimmed and lower-cased: empty/None, ``*/*``,
    ``application/*``, ``application/json`` select JSON; ``application/protobuf`` selects binary; anything
    else raises ``ClientContentError`` (455). As duh does, the Content-Type message quotes the header
    exactly as given, and the Accept message quotes it cut at the first ``;``/``,`` but neither trimmed
    nor lower-cased. A body that does not decode raises ``ClientContentError`` with the decoder's text.

Bounds (``Bound``, the ``bounds`` of ``decode``)
    A route names the most elements each repeated field of its request (and of their elements) may hold;
    ``decode`` refuses a body over one with the bound's ``InvalidOption`` before it builds any element:
    a small body of empty elements would otherwise become millions of messages. Protobuf bodies are
    walked key by key; JSON bodies pass through msgspec into structs of ``limit`` raw slots, which stop
    at the next element and check every occurrence of a repeated key.
"""

from querator.wire import messages
from querator.wire._bounds import Bound, Bounds
from querator.wire._errors import DecodeError
from querator.wire._json import decode_json, encode_json
from querator.wire._negotiation import JSON, PROTOBUF, decode, encode, negotiate_accept
from querator.wire._protobuf import decode_protobuf, encode_protobuf

__all__ = [
    "JSON",
    "PROTOBUF",
    "Bound",
    "Bounds",
    "DecodeError",
    "decode",
    "decode_json",
    "decode_protobuf",
    "encode",
    "encode_json",
    "encode_protobuf",
    "messages",
    "negotiate_accept",
]
