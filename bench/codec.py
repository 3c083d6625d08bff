"""What a request body costs to decode and a reply to encode, without the server (docs/benchmarks-log.md,
"Binary protobuf through generated code").

    python bench/codec.py                       # protobuf and JSON, best of 7 repeats
    python bench/codec.py --repeat 15 --number 500

Two bodies of 100 items with 1 KiB random payloads, as ``bench/bench.py`` sends them: a produce request
(each item with a dedup id) and the lease reply for it (ids, attempts, lease deadlines). Each is decoded
and encoded as binary protobuf and as JSON through ``querator.wire``; a row gives the best of
``--repeat`` timings of ``--number`` calls, in microseconds of CPU time per call.
"""

from __future__ import annotations

import argparse
import os
import time
import timeit
from collections.abc import Callable
from datetime import UTC, datetime

from querator.wire import decode_json, decode_protobuf, encode_json, encode_protobuf
from querator.wire import messages as m

PAYLOAD = os.urandom(1024)
ITEMS = 100
DEADLINE = datetime(2026, 11, 26, 12, 0, 0, 123456, tzinfo=UTC)

PRODUCE = m.QueueProduceRequest(
    queue_name="bench",
    request_timeout="1m",
    items=[m.QueueProduceItem(bytes=PAYLOAD, dedup_id=f"id-{i}") for i in range(ITEMS)],
)
LEASE = m.QueueLeaseResponse(
    queue_name="bench",
    partition=3,
    items=[
        m.QueueLeaseItem(
            id=f"2VMrAkW3U0bEAd3CnV52GPc{i:04d}", attempts=1, lease_deadline=DEADLINE, bytes=PAYLOAD
        )
        for i in range(ITEMS)
    ],
)

CODECS: dict[str, tuple[Callable[[m.Message], bytes], Callable[[bytes, type[m.Message]], m.Message]]] = {
    "protobuf": (encode_protobuf, decode_protobuf),
    "json": (encode_json, decode_json),
}


def best_us(call: Callable[[], object], number: int, repeat: int) -> float:
    # CPU time of this process: on a shared machine, time spent descheduled is not the codec's.
    timings = timeit.repeat(call, number=number, repeat=repeat, timer=time.process_time)
    return min(timings) / number * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--number", type=int, default=1000)
    args = parser.parse_args()
    print("| body | codec | decode us | encode us |")
    print("|---|---|---|---|")
    for label, msg in (("produce request, 100 x 1 KiB", PRODUCE), ("lease reply, 100 x 1 KiB", LEASE)):
        for codec, (encode, decode) in CODECS.items():
            body = encode(msg)
            assert decode(body, type(msg)) == msg
            decode_us = best_us(lambda: decode(body, type(msg)), args.number, args.repeat)  # noqa: B023
            encode_us = best_us(lambda: encode(msg), args.number, args.repeat)  # noqa: B023
            print(f"| {label} | {codec} | {decode_us:,.1f} | {encode_us:,.1f} |")


if __name__ == "__main__":
    main()
