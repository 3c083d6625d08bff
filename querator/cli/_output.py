"""How a client command's reply prints: indented protojson on stdout."""

from __future__ import annotations

import sys

import msgspec

from querator.wire import encode_json
from querator.wire import messages as m


def print_reply(msg: m.Message) -> None:
    data = encode_json(msg)
    if isinstance(msg, m.QueueLeaseResponse):
        # JSON omits zero values, partition 0 included; the next command needs it, so say it always.
        fields = msgspec.json.decode(data)
        fields["partition"] = msg.partition
        data = msgspec.json.encode(fields)
    sys.stdout.write(msgspec.json.format(data, indent=2).decode() + "\n")
    sys.stdout.flush()
