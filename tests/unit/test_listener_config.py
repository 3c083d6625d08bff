"""The connection-limit settings of ``querator serve`` (max-connections, header-, body-, idle- and
write-timeout):
defaults, each source, and bad values refused naming the setting."""

from __future__ import annotations

from pathlib import Path

import pytest

from querator.config import ConfigError, ListenerConfig, ServerConfig, load


def test_defaults() -> None:
    assert load(None, {}, {}).listener_config() == ListenerConfig(
        max_connections=1000, header_timeout=10.0, body_timeout=60.0, idle_timeout=120.0, write_timeout=60.0
    )
    # The dataclass's own defaults are the same, for code that builds one directly.
    assert ListenerConfig() == ServerConfig().listener_config()


EXPECTED = ListenerConfig(
    max_connections=5, header_timeout=0.25, body_timeout=90.0, idle_timeout=3.0, write_timeout=2.0
)


def test_flags() -> None:
    flags = {
        "max_connections": "5",
        "header_timeout": "250ms",
        "body_timeout": "1m30s",
        "idle_timeout": "3s",
        "write_timeout": "2s",
    }
    assert load(None, {}, flags).listener_config() == EXPECTED


def test_environment() -> None:
    env = {
        "QUERATOR_MAX_CONNECTIONS": "5",
        "QUERATOR_HEADER_TIMEOUT": "250ms",
        "QUERATOR_BODY_TIMEOUT": "1m30s",
        "QUERATOR_IDLE_TIMEOUT": "3s",
        "QUERATOR_WRITE_TIMEOUT": "2s",
    }
    assert load(None, env, {}).listener_config() == EXPECTED


def test_yaml(tmp_path: Path) -> None:
    path = tmp_path / "querator.yaml"
    path.write_text(
        "max-connections: 5\nheader-timeout: 250ms\nbody-timeout: 1m30s\nidle-timeout: 3s\n"
        "write-timeout: 2s\n"
    )
    assert load(str(path), {}, {}).listener_config() == EXPECTED


def test_flags_win_over_environment() -> None:
    config = load(None, {"QUERATOR_IDLE_TIMEOUT": "1s"}, {"idle_timeout": "2s"})
    assert config.listener_config().idle_timeout == 2.0


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        ({"max_connections": "0"}, "max-connections is invalid; '0' is not greater than zero"),
        ({"max_connections": "many"}, "max-connections is invalid; 'many' is not a whole number"),
        ({"header_timeout": "0s"}, "header-timeout is invalid; '0s' is not greater than zero"),
        ({"body_timeout": "-1s"}, "body-timeout is invalid; '-1s' is not greater than zero"),
        ({"idle_timeout": "soon"}, 'idle-timeout is invalid; time: invalid duration "soon"'),
        ({"write_timeout": "0s"}, "write-timeout is invalid; '0s' is not greater than zero"),
        ({"workflow_retention": "-1h"}, "workflow-retention is invalid; '-1h' is not greater than zero"),
    ],
)
def test_invalid(flags: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError) as refused:
        load(None, {}, flags)
    assert str(refused.value) == message


def test_workflow_retention() -> None:
    assert load(None, {}, {}).workflow_retention == "168h"
    assert load(None, {"QUERATOR_WORKFLOW_RETENTION": "24h"}, {}).workflow_retention == "24h"
