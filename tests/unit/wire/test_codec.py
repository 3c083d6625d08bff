"""querator.wire: protojson and binary protobuf against docs/semantics.md §1.2 and §1.5, cross-checked with
Google's protobuf library (the classes generated from querator/proto/querator.proto, checked to be
current), and duh content negotiation."""

from __future__ import annotations

import ast
import base64
import importlib.resources
import subprocess
import sys
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from types import ModuleType, NoneType, UnionType
from typing import Any, Union, get_args, get_origin

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from querator.errors import ClientContentError
from querator.wire import (
    JSON,
    PROTOBUF,
    DecodeError,
    decode,
    decode_json,
    decode_protobuf,
    encode,
    encode_json,
    encode_protobuf,
    negotiate_accept,
)
from querator.wire import messages as m

PROTO_DIR = Path(__file__).resolve().parents[3] / "querator" / "proto"
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
GO_ZERO_TIME = datetime(1, 1, 1, tzinfo=UTC)

MESSAGE_CLASSES: list[type[m.Message]] = sorted(
    (
        cls
        for cls in vars(m).values()
        if isinstance(cls, type) and issubclass(cls, m.Message) and cls is not m.Message
    ),
    key=lambda cls: cls.__name__,
)
IDS = [cls.__name__ for cls in MESSAGE_CLASSES]


def utc(year: int, month: int, day: int, *clock: int) -> datetime:
    """``datetime(year, month, day, *clock)`` in UTC."""
    hour, minute, second, micro = (*clock, 0, 0, 0, 0)[:4]
    return datetime(year, month, day, hour, minute, second, micro, tzinfo=UTC)


def lower_camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


# --------------------------------------------------------------------------------------------------------
# Hypothesis strategies, derived from the field types of messages.py


# Long on purpose: one strategy per kind of field type.
def strategy_for_type(tp: Any) -> st.SearchStrategy[Any]:  # noqa: PLR0911
    origin = get_origin(tp)
    if origin is Union or origin is UnionType:
        inner = [a for a in get_args(tp) if a is not NoneType]
        assert len(inner) == 1, tp
        return st.none() | strategy_for_type(inner[0])
    if origin is list:
        (elem,) = get_args(tp)
        return st.lists(strategy_for_type(elem), max_size=3)
    if origin is dict:
        key, value = get_args(tp)
        return st.dictionaries(strategy_for_type(key), strategy_for_type(value), max_size=3)
    if tp is bool:
        return st.booleans()
    if tp is int:
        return st.integers(INT32_MIN, INT32_MAX)
    if tp is str:
        return st.text(max_size=20)
    if tp is bytes:
        return st.binary(max_size=40)
    if tp is datetime:
        return st.datetimes(
            min_value=datetime(1, 1, 1),
            max_value=datetime(9999, 12, 31, 23, 59, 59, 999999),
            timezones=st.just(UTC),
        )
    if isinstance(tp, type) and issubclass(tp, m.Message):
        return st.deferred(lambda: strategy_for(tp))
    raise TypeError(f"no strategy for {tp!r}")


def strategy_for(cls: type[m.Message]) -> st.SearchStrategy[m.Message]:
    fields = {f.name: strategy_for_type(f.type) for f in msgspec.structs.fields(cls)}
    return st.builds(cls, **fields)


# --------------------------------------------------------------------------------------------------------
# Google's implementation, compiled from querator/proto/querator.proto


@pytest.fixture(scope="session")
def pb2() -> ModuleType:
    from querator.wire._pb import querator_pb2

    return querator_pb2


def google_class(pb2: ModuleType, cls: type[m.Message]) -> Any:
    return getattr(pb2, cls.__name__)


def test_generated_module_is_current(tmp_path: Path, pb2: ModuleType) -> None:
    # querator/wire/_pb/querator_pb2.py is committed (docs/adr/0013): it must describe the .proto as it
    # is now. Compared as the descriptors the two modules embed, so that another protoc release (whose
    # output differs in its version line) does not fail the test.
    grpc_tools = pytest.importorskip("grpc_tools")
    include = importlib.resources.files(grpc_tools) / "_proto"
    subprocess.run(
        [sys.executable, "-m", "grpc_tools.protoc", f"-I{PROTO_DIR}", f"-I{include}",
         f"--python_out={tmp_path}", "querator.proto"],
        check=True, capture_output=True, text=True,
    )  # fmt: skip
    fresh = _embedded_descriptor((tmp_path / "querator_pb2.py").read_text())
    assert pb2.DESCRIPTOR.serialized_pb == fresh, (
        "querator/proto/querator.proto changed: run scripts/protoc.sh"
    )


def _embedded_descriptor(source: str) -> bytes:
    """The serialized FileDescriptorProto a generated module passes to ``AddSerializedFile``, read
    without importing the module (its descriptors would clash with the committed one's)."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "AddSerializedFile":
            (arg,) = node.args
            assert isinstance(arg, ast.Constant) and isinstance(arg.value, bytes)
            return arg.value
    raise AssertionError("no AddSerializedFile call in the generated module")


def test_proto_dir_is_data_not_a_package() -> None:
    assert (PROTO_DIR / "querator.proto").is_file()
    assert not (PROTO_DIR / "__init__.py").exists()


def test_proto_file_matches_messages(pb2: ModuleType) -> None:
    from google.protobuf.descriptor import FieldDescriptor as FD

    file = pb2.DESCRIPTOR
    assert file.package == "querator"
    assert set(file.message_types_by_name) == {cls.__name__ for cls in MESSAGE_CLASSES}
    scalar = {int: FD.TYPE_INT32, bool: FD.TYPE_BOOL, str: FD.TYPE_STRING, bytes: FD.TYPE_BYTES}
    for cls in MESSAGE_CLASSES:
        desc = file.message_types_by_name[cls.__name__]
        infos = msgspec.structs.fields(cls)
        by_key = {f.json_name: f for f in desc.fields}
        assert set(by_key) == {info.encode_name for info in infos}, cls.__name__
        for info in infos:
            field = by_key[info.encode_name]
            where = f"{cls.__name__}.{info.name}"
            assert field.name == lower_camel(info.name), where
            tp = info.type
            origin = get_origin(tp)
            repeated = getattr(field, "is_repeated", None)
            if repeated is None:  # protobuf < 5.29
                repeated = field.label == FD.LABEL_REPEATED
            if origin is dict:
                assert field.message_type.GetOptions().map_entry, where
                key, value = (
                    field.message_type.fields_by_name["key"],
                    field.message_type.fields_by_name["value"],
                )
                assert (key.type, value.type) == (FD.TYPE_STRING, FD.TYPE_STRING), where
                continue
            assert repeated == (origin is list), where
            if origin is list:
                (tp,) = get_args(tp)
            elif origin is Union or origin is UnionType:
                (tp,) = (a for a in get_args(tp) if a is not NoneType)
            if tp is datetime:
                assert field.message_type.full_name == "google.protobuf.Timestamp", where
            elif tp in scalar:
                assert field.type == scalar[tp], where
            else:
                assert field.type == FD.TYPE_MESSAGE and field.message_type.name == tp.__name__, where


def test_logical_queues_has_no_json_name(pb2: ModuleType) -> None:
    field = pb2.QueueStatsResponse.DESCRIPTOR.fields_by_name["logicalQueues"]
    assert field.json_name == "logicalQueues"
    lines = (PROTO_DIR / "querator.proto").read_text().splitlines()
    (line,) = [line for line in lines if "logicalQueues =" in line]
    assert line.strip() == "repeated QueueLogicalStats logicalQueues = 2;"


# --------------------------------------------------------------------------------------------------------
# Round trips of every message with generated values

ROUND_TRIP = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.mark.parametrize("cls", MESSAGE_CLASSES, ids=IDS)
@ROUND_TRIP
@given(data=st.data())
def test_protobuf_round_trip(cls: type[m.Message], data: st.DataObject) -> None:
    msg = data.draw(strategy_for(cls))
    assert decode_protobuf(encode_protobuf(msg), cls) == msg


@pytest.mark.parametrize("cls", MESSAGE_CLASSES, ids=IDS)
@ROUND_TRIP
@given(data=st.data())
def test_json_round_trip(cls: type[m.Message], data: st.DataObject) -> None:
    msg = data.draw(strategy_for(cls))
    assert decode_json(encode_json(msg), cls) == msg


@pytest.mark.parametrize("cls", MESSAGE_CLASSES, ids=IDS)
@ROUND_TRIP
@given(data=st.data())
def test_google_agrees_on_generated_messages(
    pb2: ModuleType, cls: type[m.Message], data: st.DataObject
) -> None:
    from google.protobuf import json_format

    msg = data.draw(strategy_for(cls))
    theirs = google_class(pb2, cls).FromString(encode_protobuf(msg))
    assert decode_protobuf(theirs.SerializeToString(), cls) == msg
    for preserving in (False, True):
        text = json_format.MessageToJson(theirs, preserving_proto_field_name=preserving)
        assert decode_json(text.encode(), cls) == msg
    assert json_format.Parse(encode_json(msg), google_class(pb2, cls)()) == theirs


# --------------------------------------------------------------------------------------------------------
# The JSON and protobuf paths decode the same messages


# Long on purpose: one value per kind of field type.
def populated_value(tp: Any, name: str) -> Any:  # noqa: PLR0911
    """A value of type ``tp`` other than the field's zero value, so that every field goes on the wire."""
    origin = get_origin(tp)
    if origin is Union or origin is UnionType:
        (inner,) = (a for a in get_args(tp) if a is not NoneType)
        return populated_value(inner, name)
    if origin is list:
        (elem,) = get_args(tp)
        return [populated_value(elem, name), elem()]  # and a zero element
    if origin is dict:
        return {name: "v\u00e9", "": ""}
    if tp is bool:
        return True
    if tp is int:
        return INT32_MIN + len(name)  # negative: the ten-byte varint
    if tp is str:
        return f"{name}-\u00e9\u6587"
    if tp is bytes:
        return b"\x00\xff" + name.encode()
    if tp is datetime:
        return utc(2030, 1, 2, 3, 4, 5, 678901)
    assert isinstance(tp, type) and issubclass(tp, m.Message), tp
    return populated(tp)


def populated(cls: type[m.Message]) -> m.Message:
    return cls(**{f.name: populated_value(f.type, f.name) for f in msgspec.structs.fields(cls)})


@pytest.mark.parametrize("cls", MESSAGE_CLASSES, ids=IDS)
def test_json_and_protobuf_decode_the_same_message(cls: type[m.Message]) -> None:
    msg = populated(cls)
    for f in msgspec.structs.fields(cls):  # every field set, none left to its default
        assert getattr(msg, f.name) != f.default, f.name
    from_json = decode(encode_json(msg), JSON, cls)
    from_protobuf = decode(encode_protobuf(msg), PROTOBUF, cls)
    assert from_json == from_protobuf == msg


@pytest.mark.parametrize("cls", MESSAGE_CLASSES, ids=IDS)
@ROUND_TRIP
@given(data=st.data())
def test_json_and_protobuf_agree_on_generated_messages(cls: type[m.Message], data: st.DataObject) -> None:
    msg = data.draw(strategy_for(cls))
    assert decode(encode_json(msg), JSON, cls) == decode(encode_protobuf(msg), PROTOBUF, cls) == msg


# --------------------------------------------------------------------------------------------------------
# Cross-checks with Google's library on hand-written values

PRODUCE = m.QueueProduceRequest(
    queue_name="queue-1",
    request_timeout="1m",
    items=[
        m.QueueProduceItem(
            encoding="json",
            kind="webhook-v2",
            reference="account-0001",
            enqueue_at=utc(2030, 1, 2, 3, 4, 5, 678901),
            bytes=b"\x00\xffpayload",
        ),
        m.QueueProduceItem(utf8="héllo"),
        m.QueueProduceItem(enqueue_at=GO_ZERO_TIME),
    ],
)

LEASE = m.QueueLeaseResponse(
    queue_name="queue-1",
    partition=3,
    items=[
        m.QueueLeaseItem(
            id="2VMrAkW3U0bEAd3CnV52GPcW1j5",
            attempts=2,
            lease_deadline=utc(2024, 5, 6, 7, 8, 9, 123000),
            bytes=b"abc",
            kind="k",
        ),
        m.QueueLeaseItem(id="2VMrAkW3U0bEAd3CnV52GPcW1j6", lease_deadline=utc(1970, 1, 1)),
    ],
)

STATS = m.QueueStatsResponse(
    queue_name="queue-1",
    logical_queues=[
        m.QueueLogicalStats(
            produce_waiting=1,
            lease_waiting=2,
            complete_waiting=3,
            in_flight=4,
            partitions=[
                m.QueuePartitionStats(partition=0, total=10, total_leased=2, average_age="1m0s", scheduled=1),
                m.QueuePartitionStats(partition=1, failures=-1),
            ],
        )
    ],
)

STORAGE = m.StorageItemsListResponse(
    items=[
        m.StorageItem(
            id="2VMrAkW3U0bEAd3CnV52GPcW1j5",
            source_id="src",
            is_leased=True,
            lease_deadline=utc(2024, 1, 1, 12),
            expire_deadline=utc(2024, 1, 2, 12),
            created_at=utc(2023, 12, 31, 23, 59, 59, 999999),
            attempts=1,
            max_attempts=10,
            reference="ref",
            encoding="raw",
            kind="k",
            payload=b"\x01\x02",
        ),
        m.StorageItem(id="x", dead_deadline=utc(1969, 7, 20, 20, 17, 40, 1)),
    ]
)

ERROR_REPLY = m.Reply(
    code=455,
    code_text="Client Content Error",
    message="Content-Type header 'text/plain' is invalid format or unrecognized content type",
    details={"a": "1", "": "empty key", "b": ""},
)

SAMPLES = [PRODUCE, LEASE, STATS, STORAGE, ERROR_REPLY, m.OK_REPLY]


def build_google(pb2: ModuleType, msg: m.Message) -> Any:
    """The Google message with the same values, built field by field through its own API."""
    from google.protobuf.timestamp_pb2 import Timestamp

    out = google_class(pb2, type(msg))()
    for info in msgspec.structs.fields(type(msg)):
        value = getattr(msg, info.name)
        name = lower_camel(info.name)
        if isinstance(value, list):
            for item in value:
                if isinstance(item, m.Message):
                    getattr(out, name).append(build_google(pb2, item))
                else:
                    getattr(out, name).append(item)
        elif isinstance(value, dict):
            getattr(out, name).update(value)
        elif isinstance(value, datetime):
            stamp = Timestamp()
            delta = value - datetime(1970, 1, 1, tzinfo=UTC)
            stamp.seconds = delta.days * 86400 + delta.seconds
            stamp.nanos = delta.microseconds * 1000
            getattr(out, name).CopyFrom(stamp)
        elif value is not None:
            setattr(out, name, value)
    return out


@pytest.mark.parametrize("msg", SAMPLES, ids=lambda msg: type(msg).__name__)
def test_google_bytes_decode(pb2: ModuleType, msg: m.Message) -> None:
    theirs = build_google(pb2, msg)
    assert decode_protobuf(theirs.SerializeToString(), type(msg)) == msg
    assert decode_protobuf(theirs.SerializeToString(deterministic=True), type(msg)) == msg


@pytest.mark.parametrize("msg", SAMPLES, ids=lambda msg: type(msg).__name__)
def test_our_bytes_parse_with_google(pb2: ModuleType, msg: m.Message) -> None:
    theirs = google_class(pb2, type(msg)).FromString(encode_protobuf(msg))
    assert theirs == build_google(pb2, msg)


@pytest.mark.parametrize("msg", SAMPLES, ids=lambda msg: type(msg).__name__)
def test_google_json_decodes(pb2: ModuleType, msg: m.Message) -> None:
    from google.protobuf import json_format

    theirs = build_google(pb2, msg)
    snake = json_format.MessageToJson(theirs, preserving_proto_field_name=False)  # json_name keys
    camel = json_format.MessageToJson(theirs, preserving_proto_field_name=True)  # proto (camel) names
    assert decode_json(snake.encode(), type(msg)) == msg
    assert decode_json(camel.encode(), type(msg)) == msg
    assert json_format.Parse(encode_json(msg), google_class(pb2, type(msg))()) == theirs
    # Our output uses the same keys as Google's default output.
    ours = msgspec.json.decode(encode_json(msg))
    assert _keys(ours) == _keys(json_format.MessageToDict(theirs))


def _keys(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _keys(item) for key, item in value.items() if key != "details"}
    if isinstance(value, list):
        return [_keys(item) for item in value]
    return None


def test_camel_keys_from_google_really_are_camel(pb2: ModuleType) -> None:
    from google.protobuf import json_format

    camel = json_format.MessageToJson(build_google(pb2, PRODUCE), preserving_proto_field_name=True)
    assert '"queueName"' in camel and '"enqueueAt"' in camel and '"queue_name"' not in camel


def test_go_zero_time_and_epoch(pb2: ModuleType) -> None:
    zero = encode_protobuf(m.QueueRetryItem(retry_at=GO_ZERO_TIME))
    theirs = pb2.QueueRetryItem.FromString(zero)
    assert theirs.HasField("retryAt")
    assert (theirs.retryAt.seconds, theirs.retryAt.nanos) == (-62135596800, 0)
    # The epoch is an empty Timestamp, still present (not None).
    assert encode_protobuf(m.QueueRetryItem(retry_at=utc(1970, 1, 1))) == b"\x12\x00"
    assert decode_protobuf(b"\x12\x00", m.QueueRetryItem).retry_at == utc(1970, 1, 1)
    assert encode_protobuf(m.QueueRetryItem()) == b""
    assert encode_json(m.QueueRetryItem(retry_at=GO_ZERO_TIME)) == b'{"retry_at":"0001-01-01T00:00:00Z"}'


# --------------------------------------------------------------------------------------------------------
# JSON decoding rules (protojson)


def test_json_snake_and_camel_keys() -> None:
    expected = m.QueueLeaseRequest(queue_name="q", batch_size=10, client_id="c", request_timeout="1m")
    snake = b'{"queue_name":"q","batch_size":10,"client_id":"c","request_timeout":"1m"}'
    camel = b'{"queueName":"q","batchSize":10,"clientId":"c","requestTimeout":"1m"}'
    mixed = b'{"queueName":"q","batch_size":10,"clientId":"c","request_timeout":"1m"}'
    for body in (snake, camel, mixed):
        assert decode_json(body, m.QueueLeaseRequest) == expected
    nested = b'{"queueName":"q","items":[{"enqueueAt":"2024-01-01T12:00:00Z","bytes":"QQ=="}]}'
    assert decode_json(nested, m.QueueProduceRequest) == m.QueueProduceRequest(
        queue_name="q", items=[m.QueueProduceItem(enqueue_at=utc(2024, 1, 1, 12), bytes=b"A")]
    )


def test_json_same_field_in_both_spellings_is_rejected() -> None:
    with pytest.raises(DecodeError, match="duplicate"):
        decode_json(b'{"queue_name":"a","queueName":"b"}', m.QueueStatsRequest)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (b"10", 10),
        (b'"10"', 10),
        (b'"-2147483648"', INT32_MIN),
        (b"2147483647", INT32_MAX),
        (b"-0", 0),
        (b'"-0"', 0),
        (b"1e2", 100),
        (b'"1e2"', 100),
        (b"1.5e1", 15),
        (b"100e-2", 1),
        (b"0e5", 0),
    ],
)
def test_json_int32_accepted(value: bytes, expected: int) -> None:
    body = b'{"batch_size":' + value + b"}"
    assert decode_json(body, m.QueueLeaseRequest).batch_size == expected


@pytest.mark.parametrize(
    "value",
    [b"1.0", b"1.5", b"0.5", b'"1.0"', b'" 1"', b'"1 "', b'"+1"', b'"01"', b'"0x10"', b'""', b'"abc"',
     b"2147483648", b"-2147483649", b'"2147483648"', b"1e10", b"true", b"[]", b"{}", b"12345678901234567890"],
)  # fmt: skip
def test_json_int32_rejected(value: bytes) -> None:
    with pytest.raises(DecodeError):
        decode_json(b'{"batch_size":' + value + b"}", m.QueueLeaseRequest)


@pytest.mark.parametrize(
    "text",
    ["+/8=", "+/8", "-_8=", "-_8", "+/\r\n8", "+/8=\r\n\r\n", "+/\n8=\n\n\n", "-_\r\n8"],
)
def test_json_bytes_standard_and_url_safe_base64(text: str) -> None:
    # Go picks padded or unpadded decoding from the length *with* CR/LF, then skips CR/LF.
    body = msgspec.json.encode({"bytes": text})
    assert decode_json(body, m.QueueProduceItem).bytes == b"\xfb\xff"


@pytest.mark.parametrize(
    "text", ["+_8=", "-/8", "+/8==", "+/=8", "Q", "Q===", "QQ=", "QQ=\n=", "é", "+/\n8", "+/8=\r\n", "+/8 "]
)
def test_json_bytes_bad_base64_rejected(text: str) -> None:
    with pytest.raises(DecodeError, match="base64"):
        decode_json(msgspec.json.encode({"bytes": text}), m.QueueProduceItem)


@given(st.binary(max_size=50))
def test_json_bytes_any_base64_variant(payload: bytes) -> None:
    std = base64.b64encode(payload).decode()
    url = base64.urlsafe_b64encode(payload).decode()
    for text in (std, std.rstrip("="), url, url.rstrip("=")):
        assert decode_json(msgspec.json.encode({"payload": text}), m.StorageItem).payload == payload


def test_json_null_means_unset() -> None:
    body = b'{"queue_name":null,"partition":null,"items":null}'
    assert decode_json(body, m.QueueRetryRequest) == m.QueueRetryRequest()
    item = decode_json(b'{"id":null,"retry_at":null,"dead":null}', m.QueueRetryItem)
    assert item == m.QueueRetryItem()
    reply = decode_json(b'{"code":null,"details":null}', m.Reply)
    assert reply == m.Reply()
    assert decode_json(b'{"items":[{"enqueueAt":null,"bytes":null}]}', m.QueueProduceRequest) == (
        m.QueueProduceRequest(items=[m.QueueProduceItem()])
    )


@pytest.mark.parametrize(
    "body",
    [b'{"ids":[null]}', b'{"ids":["a",null]}', b'{"ids":"a"}', b'{"ids":[1]}'],
)
def test_json_bad_repeated_values_rejected(body: bytes) -> None:
    with pytest.raises(DecodeError):
        decode_json(body, m.QueueCompleteRequest)


@pytest.mark.parametrize(
    ("cls", "body"),
    [
        (m.QueueStatsRequest, b'{"queue_name":"q","foo":1}'),
        (m.QueueStatsRequest, b'{"QueueName":"q"}'),
        (m.QueueClearRequest, b'{"queue_name":"q","retry":true}'),
        (m.QueueProduceRequest, b'{"items":[{"foo":"bar"}]}'),
        (m.QueueProduceRequest, b'{"queueName":"q","items":[{"payload":"x"}]}'),
        (m.QueueStatsResponse, b'{"logical_queues":[]}'),
        (m.Reply, b'{"codeText":"x","code_txt":"y"}'),
    ],
)
def test_json_unknown_field_rejected(cls: type[m.Message], body: bytes) -> None:
    with pytest.raises(DecodeError, match="unknown field"):
        decode_json(body, cls)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2024-01-01T12:00:00Z", utc(2024, 1, 1, 12)),
        ("2024-01-01T12:00:00.5Z", utc(2024, 1, 1, 12, 0, 0, 500000)),
        ("2024-01-01T12:00:00.123456789Z", utc(2024, 1, 1, 12, 0, 0, 123456)),  # truncated to microseconds
        ("2024-01-01T12:00:00.999999999Z", utc(2024, 1, 1, 12, 0, 0, 999999)),
        ("2024-01-01T12:00:00+01:00", utc(2024, 1, 1, 11)),
        ("2024-01-01T12:00:00-00:00", utc(2024, 1, 1, 12)),
        ("2024-01-01T00:30:00.25-23:59", utc(2024, 1, 2, 0, 29, 0, 250000)),
        ("0001-01-01T00:00:00Z", GO_ZERO_TIME),
        ("9999-12-31T23:59:59.999999999Z", utc(9999, 12, 31, 23, 59, 59, 999999)),
        ("2024-02-29T00:00:00Z", utc(2024, 2, 29)),
        # Go's general layout parser (time.Parse's fallback) also takes these.
        ("2024-01-01T1:02:03Z", utc(2024, 1, 1, 1, 2, 3)),
        ("2024-01-01T12:00:00,5Z", utc(2024, 1, 1, 12, 0, 0, 500000)),
    ],
)
def test_json_timestamps_accepted(text: str, expected: datetime) -> None:
    for key in ("retry_at", "retryAt"):  # the msgspec fast path and the lenient path
        item = decode_json(msgspec.json.encode({key: text}), m.QueueRetryItem)
        assert item.retry_at == expected
        assert item.retry_at is not None and item.retry_at.utcoffset() == timedelta(0)


@pytest.mark.parametrize(
    "text",
    [
        "2024-01-01 12:00:00.0000",  # the openapi example
        "2024-01-01T12:00:00",  # no offset
        "2024-01-01 12:00:00Z",
        "2024-01-01t12:00:00Z",
        "2024-01-01T12:00:00z",
        "2024-01-01T12:00:00.1234567891Z",  # ten fractional digits
        "2024-01-01T12:00:00.Z",
        "2024-01-01T12:00:00+0100",
        "2024-01-01T12:00:00+01",
        "2024-01-01T12:00:00+24:00",
        "2024-01-01T12:00:00+01:60",
        "2024-01-01T12:00Z",
        "2024-01-01",
        "2024-01-01T24:00:00Z",
        "2024-01-01T12:00:60Z",
        "2023-02-29T00:00:00Z",
        "0000-12-31T23:59:59Z",
        "0001-01-01T00:30:00+01:00",  # before 0001-01-01 in UTC
        "9999-12-31T23:59:59-00:01",  # after 9999-12-31 in UTC
        "20240101T120000Z",
        "2024-01-01T12:00:00Z ",
        "",
    ],
)
def test_json_bad_timestamp_rejected(text: str) -> None:
    for key in ("retry_at", "retryAt"):
        with pytest.raises(DecodeError, match="timestamp"):
            decode_json(msgspec.json.encode({key: text}), m.QueueRetryItem)


@pytest.mark.parametrize("value", [b"1704110400", b"{}", b"[]", b"true"])
def test_json_timestamp_must_be_a_string(value: bytes) -> None:
    with pytest.raises(DecodeError):
        decode_json(b'{"retry_at":' + value + b"}", m.QueueRetryItem)


def test_json_fast_path_timestamps_are_checked_per_item() -> None:
    good = '{"enqueue_at":"2030-01-01T00:00:00Z","bytes":"QQ=="}'
    bad = '{"enqueue_at":"2030-01-01T00:00:00","bytes":"QQ=="}'
    body = ('{"queue_name":"q","items":[' + ",".join([good] * 5 + [bad] + [good]) + "]}").encode()
    with pytest.raises(DecodeError, match=r"timestamp .* at `\$\.items\[5\]\.enqueue_at`"):
        decode_json(body, m.QueueProduceRequest)
    body = ('{"queue_name":"q","items":[' + ",".join([good] * 7) + "]}").encode()
    msg = decode_json(body, m.QueueProduceRequest)
    assert [item.enqueue_at for item in msg.items] == [utc(2030, 1, 1)] * 7


def test_json_fast_path_int32_range_checked() -> None:
    with pytest.raises(DecodeError, match="int32"):
        decode_json(b'{"items":[{"attempts":2147483648}]}', m.StorageItemsImportRequest)
    with pytest.raises(DecodeError, match="int32"):
        decode_json(b'{"logicalQueues":[{"partitions":[{"total":-2147483649}]}]}', m.QueueStatsResponse)


@pytest.mark.parametrize("body", [b"", b"[]", b'"x"', b"null", b"1", b"{", b'{"queue_name":"q"} x', b"\xff"])
def test_json_not_an_object(body: bytes) -> None:
    with pytest.raises(DecodeError):
        decode_json(body, m.QueueStatsRequest)


@pytest.mark.parametrize(
    ("cls", "body"),
    [
        (m.QueueProduceRequest, b'{"items":' + b"[" * 100_000 + b"]" * 100_000 + b"}"),
        (m.QueueStatsRequest, b"[" * 100_000 + b"]" * 100_000),
        (m.QueueLeaseRequest, b'{"batch_size":' + b"9" * 5000 + b"}"),
        (m.QueueLeaseRequest, b'{"batch_size":"1e' + b"9" * 5000 + b'"}'),
        (m.QueueLeaseRequest, b'{"batch_size":"' + b"9" * 5000 + b'e-4990"}'),
        (m.QueueLeaseRequest, b'{"batch_size":1e99999999999999999999}'),
    ],
)
def test_json_hostile_input_is_a_decode_error(cls: type[m.Message], body: bytes) -> None:
    with pytest.raises(DecodeError) as info:
        decode_json(body, cls)
    assert len(str(info.value)) < 200


def test_json_int32_odd_but_valid_spellings() -> None:
    assert decode_json(b'{"batch_size":"1e0000000000000000002"}', m.QueueLeaseRequest).batch_size == 100
    body = b'{"batch_size":"1' + b"0" * 5000 + b'e-5000"}'
    assert decode_json(body, m.QueueLeaseRequest).batch_size == 1


def test_json_invalid_utf8_rejected() -> None:
    with pytest.raises(DecodeError):
        decode_json(b'{"queue_name":"\xff"}', m.QueueStatsRequest)
    with pytest.raises(DecodeError):
        decode_json(b'{"queueName":"\xed\xa0\x80"}', m.QueueStatsRequest)


@pytest.mark.parametrize(
    "body",
    [b'{"queue_name":1}', b'{"scheduled":"true"}', b'{"scheduled":1}', b'{"queue_name":["q"]}'],
)
def test_json_wrong_types_rejected(body: bytes) -> None:
    with pytest.raises(DecodeError):
        decode_json(body, m.QueueClearRequest)


def test_json_map_values_must_be_strings() -> None:
    assert decode_json(b'{"details":{"a":"1"}}', m.Reply).details == {"a": "1"}
    with pytest.raises(DecodeError):
        decode_json(b'{"details":{"a":1}}', m.Reply)
    with pytest.raises(DecodeError):
        decode_json(b'{"details":{"a":null}}', m.Reply)


def test_json_reply_shape() -> None:
    body = (
        b'{"code":400,"code_text":"Bad Request",'
        b'"message":"queue name is invalid; queue name cannot be empty"}'
    )
    reply = decode_json(body, m.Reply)
    assert reply == m.Reply(
        code=400, code_text="Bad Request", message="queue name is invalid; queue name cannot be empty"
    )
    assert encode_json(reply) == body
    assert decode_json(b'{"code":"400","codeText":"Bad Request"}', m.Reply) == m.Reply(
        code=400, code_text="Bad Request"
    )


# --------------------------------------------------------------------------------------------------------
# JSON encoding


def test_json_ok_reply() -> None:
    assert encode_json(m.OK_REPLY) == b'{"code":200}'
    assert encode_json(m.Reply(code=200)) == b'{"code":200}'


def test_json_zero_values_omitted() -> None:
    assert encode_json(m.QueueLeaseResponse(queue_name="q")) == b'{"queue_name":"q"}'
    assert encode_json(m.QueueLeaseResponse(queue_name="q", partition=0, items=[])) == b'{"queue_name":"q"}'
    assert encode_json(m.QueueLeaseItem(id="x", attempts=0, bytes=b"")) == b'{"id":"x"}'
    assert encode_json(m.QueueClearRequest(queue=False, scheduled=False)) == b"{}"
    assert encode_json(m.Reply(code=500, details={})) == b'{"code":500}'
    assert encode_json(m.QueueProduceRequest(items=[m.QueueProduceItem()])) == b'{"items":[{}]}'


def test_json_logical_queues_key() -> None:
    stats = m.QueueStatsResponse(
        queue_name="q",
        logical_queues=[m.QueueLogicalStats(in_flight=1, partitions=[m.QueuePartitionStats()])],
    )
    body = encode_json(stats)
    assert body == b'{"queue_name":"q","logicalQueues":[{"in_flight":1,"partitions":[{}]}]}'
    assert decode_json(body, m.QueueStatsResponse) == stats
    assert decode_json(
        b'{"queueName":"q","logicalQueues":[{"inFlight":1,"partitions":[{}]}]}', type(stats)
    ) == (stats)


def test_json_encoding_of_values() -> None:
    item = m.QueueLeaseItem(
        id="x", attempts=-3, lease_deadline=utc(2024, 1, 1, 12, 0, 0, 5), bytes=b"\xfb\xff"
    )
    assert encode_json(item) == (
        b'{"id":"x","attempts":-3,"lease_deadline":"2024-01-01T12:00:00.000005Z","bytes":"+/8="}'
    )


# --------------------------------------------------------------------------------------------------------
# Binary protobuf details


def test_protobuf_negative_int32_is_ten_bytes() -> None:
    body = encode_protobuf(m.QueueLeaseRequest(batch_size=-1))
    assert body == b"\x10" + b"\xff" * 9 + b"\x01"
    assert decode_protobuf(body, m.QueueLeaseRequest).batch_size == -1
    assert decode_protobuf(
        encode_protobuf(m.QueueLeaseRequest(batch_size=INT32_MIN)), m.QueueLeaseRequest
    ) == (m.QueueLeaseRequest(batch_size=INT32_MIN))


def _varint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


@pytest.mark.parametrize(
    ("wire", "expected"),
    [(5, 5), (2**31, INT32_MIN), (2**32 + 7, 7), (2**32 - 1, -1), (2**64 - 2, -2), (2**63, 0)],
)
def test_protobuf_int32_truncated_like_go(wire: int, expected: int) -> None:
    assert decode_protobuf(b"\x10" + _varint(wire), m.QueueLeaseRequest).batch_size == expected


@pytest.mark.parametrize(
    ("value", "expected"), [(2**31, INT32_MIN), (2**32 + 7, 7), (INT32_MIN - 1, INT32_MAX), (2**40, 0)]
)
def test_protobuf_int32_encoded_like_go_converts(value: int, expected: int) -> None:
    # An int beyond int32 (the engine's counters are Python ints) keeps its low 32 bits, as Go's int32().
    body = encode_protobuf(m.QueueLeaseRequest(batch_size=value))
    assert decode_protobuf(body, m.QueueLeaseRequest).batch_size == expected


def test_protobuf_bool_any_nonzero_varint() -> None:
    assert decode_protobuf(b"\x18\x02", m.QueueClearRequest).scheduled is True
    assert decode_protobuf(b"\x18\x00", m.QueueClearRequest).scheduled is False
    assert encode_protobuf(m.QueueClearRequest(scheduled=True)) == b"\x18\x01"


def test_protobuf_unknown_fields_skipped() -> None:
    known = encode_protobuf(m.QueueStatsRequest(queue_name="q"))
    unknown = (
        b"\x10" + _varint(2**63)  # field 2 varint
        + b"\x19" + b"\x00" * 8  # field 3 fixed64
        + b"\x22\x03abc"  # field 4 length-delimited
        + b"\x2d" + b"\x00" * 4  # field 5 fixed32
        + _varint(1000 << 3 | 2) + b"\x01z"  # a big field number
        + b"\x08\x05"  # field 1 with the wrong wire type (varint): unknown, as in Go
    )  # fmt: skip
    assert decode_protobuf(unknown + known + unknown, m.QueueStatsRequest) == m.QueueStatsRequest(
        queue_name="q"
    )


@pytest.mark.parametrize(
    "body",
    [
        b"\x0c",  # group end
        b"\x0e\x00",  # wire type 6
        b"\x0f\x00",  # wire type 7
        b"\x00\x00",  # field number 0
        _varint(2**29 << 3) + b"\x00",  # field number above 2^29-1
        b"\x0a",  # missing length
        b"\x0a\x05abc",  # length beyond the end
        b"\x0a\x80",  # truncated length varint
        b"\x10",  # missing varint
        b"\x10\xff",  # truncated varint
        b"\x10" + b"\xff" * 10 + b"\x01",  # eleven-byte varint
        b"\x19\x00\x00",  # truncated fixed64
        b"\x1d\x00",  # truncated fixed32
        b"\x0a\x01\xff",  # invalid UTF-8
        b"\x0a\x03\xed\xa0\x80",  # an encoded surrogate
    ],
)
def test_protobuf_malformed_rejected(body: bytes) -> None:
    with pytest.raises(DecodeError):
        decode_protobuf(body, m.QueueLeaseRequest)


def test_protobuf_what_upb_accepts() -> None:
    # Two bodies the hand-written decoder refused and Google's upb runtime takes (docs/adr/0013). An
    # empty group in an unknown field is skipped, as Go skips it too; a ten-byte varint whose last byte
    # is above 1 keeps its low 64 bits, where Go reports an overflow.
    assert decode_protobuf(b"\x0b\x0c", m.QueueLeaseRequest) == m.QueueLeaseRequest()
    overflow = b"\x10" + b"\xff" * 9 + b"\x02"
    assert decode_protobuf(overflow, m.QueueLeaseRequest) == m.QueueLeaseRequest(batch_size=-1)


def test_protobuf_nested_bounds_are_respected() -> None:
    # An item whose declared length cuts its last field short must fail, not read the parent's bytes.
    item = encode_protobuf(m.QueueProduceItem(kind="abcdef"))
    body = b"\x1a" + _varint(len(item) - 2) + item + b"\x0a\x01q"
    with pytest.raises(DecodeError):
        decode_protobuf(body, m.QueueProduceRequest)
    stamp = b"\x08" + _varint(1893456000)
    body = b"\x22" + _varint(len(stamp) + 2) + b"\x0a\x00" + b"\x22" + _varint(len(stamp) - 1) + stamp
    with pytest.raises(DecodeError):
        decode_protobuf(body, m.QueueProduceItem)


def test_protobuf_invalid_utf8_in_nested_and_repeated_strings() -> None:
    with pytest.raises(DecodeError, match="UTF-8"):
        decode_protobuf(b"\x22\x01\xff", m.QueueCompleteRequest)  # repeated ids
    with pytest.raises(DecodeError, match="UTF-8"):
        decode_protobuf(b"\x22\x05\x0a\x01\xff\x12\x00", m.Reply)  # a map key


def test_protobuf_timestamp_fields() -> None:
    # Negative nanos and seconds are normalised as Go's time.Unix does; fields merge across occurrences.
    ts = b"\x08" + _varint(10) + b"\x10" + _varint(-1 & (2**64 - 1))
    item = decode_protobuf(b"\x12" + _varint(len(ts)) + ts, m.QueueRetryItem)
    assert item.retry_at == utc(1970, 1, 1, 0, 0, 9, 999999)
    first = b"\x08" + _varint(60)
    second = b"\x10" + _varint(5000)
    body = b"\x12" + _varint(len(first)) + first + b"\x12" + _varint(len(second)) + second
    assert decode_protobuf(body, m.QueueRetryItem).retry_at == utc(1970, 1, 1, 0, 1, 0, 5)
    # Out of datetime's range.
    big = b"\x08" + _varint(253402300800)
    with pytest.raises(DecodeError, match="out of range"):
        decode_protobuf(b"\x12" + _varint(len(big)) + big, m.QueueRetryItem)
    # Unknown fields inside the Timestamp are skipped.
    odd = b"\x08" + _varint(1) + b"\x1a\x01x"
    assert decode_protobuf(b"\x12" + _varint(len(odd)) + odd, m.QueueRetryItem).retry_at == utc(
        1970, 1, 1, 0, 0, 1
    )


def test_protobuf_timestamp_precision_and_timezones() -> None:
    stamp = utc(2024, 1, 1, 12, 0, 0, 123456)
    item = decode_protobuf(encode_protobuf(m.QueueRetryItem(retry_at=stamp)), m.QueueRetryItem)
    assert item.retry_at == stamp and item.retry_at is not None and item.retry_at.tzinfo is UTC
    plus_one = datetime(2024, 1, 1, 13, 0, 0, 123456, tzinfo=timezone(timedelta(hours=1)))
    assert encode_protobuf(m.QueueRetryItem(retry_at=plus_one)) == encode_protobuf(
        m.QueueRetryItem(retry_at=stamp)
    )
    nanos = b"\x08" + _varint(1) + b"\x10" + _varint(999)
    assert decode_protobuf(b"\x12" + _varint(len(nanos)) + nanos, m.QueueRetryItem).retry_at == utc(
        1970, 1, 1, 0, 0, 1
    )


def test_protobuf_repeated_and_map_encoding() -> None:
    body = encode_protobuf(m.QueueCompleteRequest(ids=["a", "", "b"]))
    assert body == b"\x22\x01a\x22\x00\x22\x01b"
    assert decode_protobuf(body, m.QueueCompleteRequest).ids == ["a", "", "b"]
    body = encode_protobuf(m.Reply(details={"k": ""}))
    assert body == b"\x22\x05\x0a\x01k\x12\x00"
    # Map entries with missing key or value, and a repeated key (last one wins).
    assert decode_protobuf(
        b"\x22\x00\x22\x03\x12\x01v\x22\x03\x0a\x01k\x22\x06\x0a\x01k\x12\x01w", m.Reply
    ).details == {
        "": "v",
        "k": "w",
    }


def test_protobuf_scalar_last_one_wins_and_lists_accumulate() -> None:
    body = b"\x0a\x01a\x0a\x01b" + b"\x1a\x02\x0a\x00" + b"\x1a\x00"
    assert decode_protobuf(body, m.QueueProduceRequest) == m.QueueProduceRequest(
        queue_name="b", items=[m.QueueProduceItem(), m.QueueProduceItem()]
    )


def test_protobuf_field_order_and_empty_message() -> None:
    assert encode_protobuf(m.QueueLeaseRequest()) == b""
    assert decode_protobuf(b"", m.QueueLeaseRequest) == m.QueueLeaseRequest()
    body = encode_protobuf(m.QueueLeaseRequest(request_timeout="1m", queue_name="q", batch_size=1))
    assert body == b"\x0a\x01q\x10\x01\x22\x021m"


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=64))
def test_protobuf_fuzz_only_decode_errors(body: bytes) -> None:
    for cls in (m.QueueProduceRequest, m.StorageItemsImportRequest, m.Reply, m.QueueStatsResponse):
        try:
            decode_protobuf(body, cls)
        except DecodeError:
            pass


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_protobuf_every_prefix_decodes_or_raises_decode_error(data: st.DataObject) -> None:
    msg = data.draw(strategy_for(m.QueueProduceRequest))
    body = encode_protobuf(msg)
    for cut in range(len(body)):
        try:
            decode_protobuf(body[:cut], m.QueueProduceRequest)
        except DecodeError:
            pass


def test_decode_protobuf_accepts_bytes_like() -> None:
    body = encode_protobuf(PRODUCE)
    assert decode_protobuf(memoryview(body), m.QueueProduceRequest) == PRODUCE  # type: ignore[arg-type]
    assert decode_protobuf(bytearray(body), m.QueueProduceRequest) == PRODUCE  # type: ignore[arg-type]


# --------------------------------------------------------------------------------------------------------
# Content negotiation (duh)


@pytest.mark.parametrize(
    "header",
    [None, "", "*/*", "application/*", "application/json", "Application/JSON", " application/json ",
     "application/json; charset=utf-8", "application/json,application/protobuf", "*/*;q=0.8", ";", ",x"],
)  # fmt: skip
def test_negotiate_json(header: str | None) -> None:
    assert negotiate_accept(header) == JSON == "application/json"


@pytest.mark.parametrize(
    "header",
    ["application/protobuf", "APPLICATION/PROTOBUF", "\tapplication/protobuf; proto=querator",
     "application/protobuf, application/json"],
)  # fmt: skip
def test_negotiate_protobuf(header: str) -> None:
    assert negotiate_accept(header) == PROTOBUF == "application/protobuf"


@pytest.mark.parametrize(
    ("header", "shown"),
    [
        ("text/plain", "text/plain"),
        ("application/x-protobuf", "application/x-protobuf"),
        ("text/html; q=0.9", "text/html"),
        (" Text/HTML , application/json", " Text/HTML "),
        ("application/xml,application/json", "application/xml"),
        ("application/json/x", "application/json/x"),
    ],
)
def test_negotiate_accept_rejected(header: str, shown: str) -> None:
    expected = (
        f"Accept header '{shown}' is invalid format or unrecognized content type, "
        "only [application/json,application/protobuf] are supported by this method"
    )
    with pytest.raises(ClientContentError) as info:
        negotiate_accept(header)
    assert info.value.message == expected == str(info.value)
    assert info.value.code == 455
    with pytest.raises(ClientContentError) as info:
        encode(m.OK_REPLY, header)
    assert info.value.message == expected


def test_encode_by_accept() -> None:
    assert encode(LEASE, None) == (encode_json(LEASE), "application/json")
    assert encode(LEASE, "*/*") == (encode_json(LEASE), "application/json")
    assert encode(LEASE, "application/protobuf") == (encode_protobuf(LEASE), "application/protobuf")
    assert encode(m.OK_REPLY, "") == (b'{"code":200}', "application/json")


def test_decode_by_content_type() -> None:
    assert decode(encode_json(PRODUCE), None, m.QueueProduceRequest) == PRODUCE
    assert decode(encode_json(PRODUCE), "application/*", m.QueueProduceRequest) == PRODUCE
    assert decode(encode_json(PRODUCE), "Application/Json; charset=utf-8", m.QueueProduceRequest) == PRODUCE
    assert decode(encode_protobuf(PRODUCE), "application/protobuf", m.QueueProduceRequest) == PRODUCE
    # The official Go client sends binary protobuf; an empty binary body is an empty message.
    assert decode(b"", "application/protobuf", m.QueueStatsRequest) == m.QueueStatsRequest()


@pytest.mark.parametrize(
    "header", ["text/plain", "text/plain; charset=utf-8", " application/xml ", "protobuf"]
)
def test_decode_bad_content_type(header: str) -> None:
    with pytest.raises(ClientContentError) as info:
        decode(b"{}", header, m.QueueStatsRequest)
    assert (
        info.value.message == f"Content-Type header '{header}' is invalid format or unrecognized content type"
    )
    assert info.value.code == 455


@pytest.mark.parametrize(
    ("body", "content_type"),
    [
        (b"", "application/json"),
        (b'{"queue_name":"q","nope":1}', "application/json"),
        (b'{"queue_name":"q"', None),
        (b"\x0a\x05q", "application/protobuf"),
        (b"\x0a\x01\xff", "application/protobuf"),
    ],
)
def test_decode_bad_body(body: bytes, content_type: str | None) -> None:
    with pytest.raises(ClientContentError) as info:
        decode(body, content_type, m.QueueStatsRequest)
    assert info.value.code == 455
    assert info.value.message


def test_decode_error_is_a_value_error() -> None:
    assert issubclass(DecodeError, ValueError)
    with pytest.raises(ValueError, match="unknown field `nope`"):
        decode_json(b'{"nope":1}', m.QueueStatsRequest)
