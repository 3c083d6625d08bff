"""Every ``querator serve`` setting really applies, from each source, in real server processes.

Two profiles of settings are each given as flags, as ``QUERATOR_*`` environment variables and as a YAML
file (named by ``--config`` or by ``QUERATOR_CONFIG``); each run checks what can be seen from outside:
the port it answers on, the files the storage creates (or not), the log lines on stderr, and the exact
produce-body limit (a body of exactly the limit passes, one byte more gets 400). Then the precedence
flags > environment > file, and bad values: exit status 2 and a one-line message naming the setting.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
import pytest
import yaml

from querator import wire
from querator.auth import generate_key, key_hash
from querator.client import Client
from querator.errors import InvalidOption
from querator.wire import messages as m

from .conftest import (
    ServerProcess,
    Servers,
    free_port,
    refuses_connections,
    start_refused,
    terminate,
)

TEXT_LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} (DEBUG|INFO|WARNING|ERROR) [\w.]+: ")


@dataclass(frozen=True)
class Profile:
    """Settings (by YAML key) other than address and data-dir, and what they must look like outside."""

    settings: dict[str, str]
    limit_message: str
    """The 400 message of a produce body one byte over max-produce-body."""

    @property
    def storage(self) -> str:
        return self.settings["storage"]

    @property
    def max_produce_body(self) -> int:
        return int(self.settings["max-produce-body"])


PROFILES = {
    "sqlite-json-info": Profile(
        {
            "storage": "sqlite",
            "log-format": "json",
            "log-level": "info",
            "max-produce-body": "2000",
            "max-requests-per-queue": "3",
            "sqlite-synchronous": "NORMAL",
        },
        "request body exceeds 2.0KB limit",
    ),
    "memory-text-warn": Profile(
        {
            "storage": "memory",
            "log-format": "text",
            "log-level": "warn",
            "max-produce-body": "4096",
            "max-requests-per-queue": "50",
            "sqlite-synchronous": "full",
        },
        "request body exceeds 4.0KiB limit",
    ),
}


def env_name(key: str) -> str:
    return "QUERATOR_" + key.upper().replace("-", "_")


def yaml_value(value: str) -> Any:
    return int(value) if value.isdigit() else value


def write_yaml(path: Path, settings: dict[str, str]) -> Path:
    path.write_text(yaml.safe_dump({k: yaml_value(v) for k, v in settings.items()}))
    return path


def produce_body(payload_size: int) -> bytes:
    """The JSON body ``Client.produce("limits", ["x" * payload_size])`` sends."""
    item = m.QueueProduceItem(utf8="x" * payload_size)
    return wire.encode_json(m.QueueProduceRequest(queue_name="limits", request_timeout="1m", items=[item]))


def payload_for_body(size: int) -> str:
    """A payload whose produce request body is exactly ``size`` bytes."""
    n = size - len(produce_body(1)) + 1
    assert len(produce_body(n)) == size
    return "x" * n


def check_produce_limit(server: ServerProcess, limit: int, message: str) -> None:
    with Client(server.url) as client:
        client.create_queue("limits")
        client.produce("limits", [payload_for_body(limit)])
        with pytest.raises(InvalidOption) as refused:
            client.produce("limits", [payload_for_body(limit + 1)])
        assert (refused.value.code, refused.value.message) == (400, message)
        stats = client.stats("limits")
        assert sum(p.total for lq in stats.logical_queues for p in lq.partitions) == 1


def json_log(stderr: str) -> list[dict[str, Any]]:
    """The stderr lines, each of which must be a JSON object with a level and a message."""
    entries = []
    for line in stderr.splitlines():
        entry = msgspec.json.decode(line)
        assert isinstance(entry, dict), line
        assert isinstance(entry.get("level"), str) and isinstance(entry.get("msg"), str), line
        entries.append(entry)
    return entries


def text_log(stderr: str) -> list[str]:
    """The stderr lines, each of which must be a text log line."""
    lines = stderr.splitlines()
    for line in lines:
        assert TEXT_LINE.match(line), line
    return lines


@pytest.mark.parametrize(
    ("source", "profile_name"),
    [
        ("flags", "sqlite-json-info"),
        ("flags", "memory-text-warn"),
        ("env", "sqlite-json-info"),
        ("env", "memory-text-warn"),
        ("config-flag", "sqlite-json-info"),
        ("config-env", "memory-text-warn"),
    ],
)
def test_settings_apply(servers: Servers, tmp_path: Path, source: str, profile_name: str) -> None:
    profile = PROFILES[profile_name]
    port = free_port()
    data_dir = tmp_path / "data"
    settings = {**profile.settings, "address": f"127.0.0.1:{port}", "data-dir": str(data_dir)}
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    args: list[str] = []
    env: dict[str, str] = {}
    if source == "flags":
        for key, value in settings.items():
            args += [f"--{key}", value]
    elif source == "env":
        env = {env_name(key): value for key, value in settings.items()}
    elif source == "config-flag":
        args = ["--config", str(write_yaml(tmp_path / "querator.yaml", settings))]
    else:
        env = {"QUERATOR_CONFIG": str(write_yaml(tmp_path / "querator.yaml", settings))}
    server = servers.start(*args, env=env, cwd=cwd, port=port, address_flag=False)

    check_produce_limit(server, profile.max_produce_body, profile.limit_message)
    assert terminate(server) == 0, server.describe()

    assert list(cwd.iterdir()) == []  # not even the default ./querator-data
    if profile.storage == "sqlite":
        assert (data_dir / "querator.db").is_file()
    else:
        assert not data_dir.exists()

    stderr = server.stderr()
    if profile.settings["log-format"] == "json":
        messages = [(e["level"], e["msg"]) for e in json_log(stderr)]
    else:
        messages = [(line.split()[2].lower(), line.split(": ", 1)[1]) for line in text_log(stderr)]
    listening = f"querator listening on 127.0.0.1:{port} (storage {profile.storage}"
    listening += f" in {data_dir}; api keys off)" if profile.storage == "sqlite" else "; api keys off)"
    listening += f"; console at 127.0.0.1:{port}/ui/"
    if profile.settings["log-level"] == "info":
        for expected in (listening, "shutting down", "stopped"):
            assert ("info", expected) in messages, stderr
    else:
        assert [level for level, _ in messages if level in ("debug", "info")] == [], stderr


def test_precedence_flags_over_environment_over_file(servers: Servers, tmp_path: Path) -> None:
    file_port, env_port, flag_port = free_port(), free_port(), free_port()
    data_dir = tmp_path / "data"
    good = write_yaml(
        tmp_path / "good.yaml",
        {
            "address": f"127.0.0.1:{file_port}",
            "storage": "memory",
            "data-dir": str(data_dir),
            "log-format": "json",
            "log-level": "error",
            "max-produce-body": "1000",
            "max-requests-per-queue": "7",
        },
    )
    bad = write_yaml(tmp_path / "bad.yaml", {"no-such-setting": "1"})
    env = {
        "QUERATOR_CONFIG": str(bad),
        "QUERATOR_ADDRESS": f"127.0.0.1:{env_port}",
        "QUERATOR_STORAGE": "sqlite",
        "QUERATOR_LOG_LEVEL": "warn",
        "QUERATOR_MAX_PRODUCE_BODY": "3000",
    }
    server = servers.start(
        *("--config", str(good), "--address", f"127.0.0.1:{flag_port}", "--log-level", "info"),
        *("--max-produce-body", "5000", "--log-format", "text"),
        env=env,
        port=flag_port,
        address_flag=False,
    )
    # --config beat QUERATOR_CONFIG (the bad file would have stopped the server); --address beat both.
    assert refuses_connections(file_port) and refuses_connections(env_port)
    # --max-produce-body (5000) beat QUERATOR_MAX_PRODUCE_BODY (3000) and the file (1000).
    check_produce_limit(server, 5000, "request body exceeds 5.0KB limit")
    assert terminate(server) == 0, server.describe()
    # QUERATOR_STORAGE (sqlite) beat the file (memory); data-dir came from the file alone.
    assert (data_dir / "querator.db").is_file()
    # --log-format text beat the file's json; --log-level info beat QUERATOR_LOG_LEVEL and the file.
    lines = text_log(server.stderr())
    assert any(f"INFO querator.server: querator listening on 127.0.0.1:{flag_port}" in x for x in lines)


@dataclass(frozen=True)
class Invalid:
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    yaml: str | None = None
    """Text of a config file passed with --config."""
    message: str = ""
    """How stderr must start."""


INVALID = {
    "storage-flag": Invalid(
        args=("--storage", "nope"),
        message="querator: storage is invalid; 'nope' is not one of (memory, sqlite, cassandra, postgres)",
    ),
    "postgres-url-flag": Invalid(
        args=("--storage", "postgres", "--postgres-url", "postgresql://[x"),
        message="querator: postgres-url is invalid; not a PostgreSQL connection URL: end of string reached "
        'when looking for matching "..." in IPv6 host address in URI: "..."',
    ),
    "postgres-schema-env": Invalid(
        env=(("QUERATOR_STORAGE", "postgres"), ("QUERATOR_POSTGRES_SCHEMA", "Bad-Name")),
        message="querator: postgres-schema is invalid; 'Bad-Name' is not a lower-case identifier",
    ),
    "postgres-connections-yaml": Invalid(
        yaml="storage: postgres\npostgres-connections: 0\n",
        message="querator: postgres-connections is invalid; '0' is not a whole number from 1 to 100",
    ),
    "address-flag": Invalid(
        args=("--address", "nope"), message="querator: address is invalid; 'nope' is not host:port"
    ),
    "log-level-flag": Invalid(args=("--log-level", "loud"), message="querator: log-level is invalid"),
    "sqlite-synchronous-flag": Invalid(
        args=("--sqlite-synchronous", "OFF"), message="querator: sqlite-synchronous is invalid"
    ),
    "max-requests-per-queue-flag": Invalid(
        args=("--max-requests-per-queue", "0"),
        message="querator: max-produce-body and max-requests-per-queue must be greater than zero",
    ),
    "storage-env": Invalid(
        env=(("QUERATOR_STORAGE", "nope"),), message="querator: storage is invalid; 'nope' is not one of"
    ),
    "max-produce-body-env": Invalid(
        env=(("QUERATOR_MAX_PRODUCE_BODY", "lots"),),
        message="querator: max-produce-body is invalid; 'lots' is not a whole number",
    ),
    "config-env-missing-file": Invalid(
        env=(("QUERATOR_CONFIG", "/nonexistent/querator.yaml"),),
        message="querator: config file is invalid; cannot read '/nonexistent/querator.yaml'",
    ),
    "yaml-unknown-key": Invalid(
        yaml="storage: memory\nbogus: 1\n",
        message="querator: config file is invalid; unknown setting 'bogus'",
    ),
    "yaml-log-format": Invalid(yaml="log-format: xml\n", message="querator: log-format is invalid; 'xml'"),
    "address-port-out-of-range": Invalid(
        args=("--address", "127.0.0.1:99999"), message="querator: address is invalid; '127.0.0.1:99999'"
    ),
    "yaml-fractional-size": Invalid(
        yaml="max-produce-body: 1.5\n", message="querator: max-produce-body is invalid; '1.5'"
    ),
    "yaml-boolean-size": Invalid(
        yaml="max-requests-per-queue: true\n", message="querator: max-requests-per-queue is invalid; 'True'"
    ),
}

# Values that pass validation and fail only when the server tries to use them.
STARTUP_FAILURES = [
    pytest.param(
        Invalid(args=("--address", "no-such-host.invalid:2319"), message="querator: address is invalid"),
        id="address-unresolvable-host",
    ),
    pytest.param(
        Invalid(
            args=("--address", "no-such-host.invalid:2319", "--processes", "2"),
            message="querator: address is invalid",
        ),
        id="address-unresolvable-host-two-processes",
    ),
    pytest.param(
        Invalid(
            env=(("QUERATOR_API_KEYS", " , "),), message="querator: api keys are invalid; the configured"
        ),
        id="api-keys-empty",
    ),
    pytest.param(
        Invalid(env=(("QUERATOR_API_KEYS", "abc"),), message="querator: api key hash is invalid"),
        id="api-keys-not-a-hash",
    ),
    pytest.param(
        Invalid(args=("--api-keys-file", "/nonexistent/keys"), message="querator: api-keys-file is invalid"),
        id="api-keys-file-missing",
    ),
    pytest.param(
        Invalid(
            args=("--tls-cert-file", "/nonexistent/c.pem", "--tls-key-file", "/nonexistent/k.pem"),
            message="querator: tls-cert-file is invalid; cannot load '/nonexistent/c.pem'",
        ),
        id="tls-cert-file-missing",
    ),
    pytest.param(
        Invalid(
            args=("--storage", "postgres", "--postgres-url", "postgresql://127.0.0.1:1/postgres"),
            message="querator: storage postgres is unavailable; postgres storage error; cannot connect to "
            "127.0.0.1:1/postgres schema querator: OperationalError: ",
        ),
        id="postgres-unreachable",
    ),
]


@pytest.mark.parametrize(
    "case",
    [pytest.param(case, id=name) for name, case in INVALID.items()] + STARTUP_FAILURES,
)
def test_invalid_value_exits_2_naming_the_setting(servers: Servers, tmp_path: Path, case: Invalid) -> None:
    args = list(case.args)
    if case.yaml is not None:
        config = tmp_path / "querator.yaml"
        config.write_text(case.yaml)
        args += ["--config", str(config)]
    if "--address" not in args:
        args += ["--address", f"127.0.0.1:{free_port()}"]
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    server = start_refused(servers, *args, env=dict(case.env), cwd=cwd)
    stderr = server.stderr()
    assert stderr.startswith(case.message), stderr
    assert server.stdout() == ""
    assert list(cwd.iterdir()) == []  # stopped before creating any storage


@pytest.mark.parametrize(
    "secret",
    [
        pytest.param(b"a" * 20 + b"\n" + b"b" * 20 + b"\n", id="inner-newline"),
        pytest.param(b"a" * 20 + b"\t\x00" + b"b" * 20, id="control-characters"),
        pytest.param("geheimnis-über-32-zeichen-lang-und-mehr".encode(), id="not-ascii"),
    ],
)
def test_a_cluster_secret_that_is_no_header_value_exits_2(
    servers: Servers, tmp_path: Path, secret: bytes
) -> None:
    # Forwards send the secret in a header: such a secret made every forwarded request a 500.
    path = tmp_path / "secret"
    path.write_bytes(secret)
    path.chmod(0o600)
    stderr = start_refused(
        servers,
        "--storage",
        "memory",
        "--cluster-secret-file",
        str(path),
        "--address",
        f"127.0.0.1:{free_port()}",
    ).stderr()
    assert stderr.startswith("querator: cluster secret is invalid; "), stderr


def test_key_and_secret_files_others_can_read_are_warned_about(servers: Servers, tmp_path: Path) -> None:
    keys, secret = tmp_path / "keys", tmp_path / "secret"
    keys.write_text(key_hash(generate_key()) + "\n")
    secret.write_text("s" * 40 + "\n")
    args = ("--storage", "memory", "--api-keys-file", str(keys), "--cluster-secret-file", str(secret))
    keys.chmod(0o644)
    secret.chmod(0o640)
    server = servers.start(*args)
    warnings = [line for line in server.stderr().splitlines() if " WARNING querator.server: " in line]
    assert any(
        f"api-keys-file '{keys}' can be read or changed by other users (mode 0644)" in w for w in warnings
    )
    assert any(
        f"cluster-secret-file '{secret}' can be read or changed by other users (mode 0640)" in w
        for w in warnings
    )
    assert terminate(server) == 0
    keys.chmod(0o600)
    secret.chmod(0o400)
    server = servers.start(*args)
    assert "other users" not in server.stderr(), server.stderr()
