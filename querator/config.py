"""Configuration of ``querator serve``: one frozen dataclass, filled from defaults, then a YAML file,
then ``QUERATOR_*`` environment variables, then command-line flags (each later source wins).

Every setting has a flag, an environment variable (the flag's name upper-cased, dashes as underscores,
prefixed ``QUERATOR_``) and a YAML key (the flag's name). Defaults and validation live here only.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import yaml

STORAGE_KINDS = ("memory", "sqlite")
LOG_LEVELS = ("debug", "info", "warn", "warning", "error")
LOG_FORMATS = ("text", "json")
SQLITE_SYNC = ("FULL", "NORMAL")


class ConfigError(ValueError):
    """A setting has a value the server cannot use; the message names the setting."""


@dataclass(frozen=True)
class ServerConfig:
    """Everything ``querator serve`` needs. Sizes are bytes."""

    address: str = field(default="localhost:2319", metadata={"help": "host:port to listen on"})
    storage: str = field(default="sqlite", metadata={"help": "storage backend: memory or sqlite"})
    data_dir: str = field(default="querator-data", metadata={"help": "directory of the sqlite store"})
    sqlite_synchronous: str = field(
        default="FULL",
        metadata={
            "help": "sqlite fsync policy: FULL (a 200 survives power loss) or NORMAL (survives a crash)"
        },
    )
    log_level: str = field(default="info", metadata={"help": "debug, info, warn or error"})
    log_format: str = field(default="text", metadata={"help": "text or json"})
    max_produce_body: int = field(default=5_000_000, metadata={"help": "largest queue.produce body"})
    max_requests_per_queue: int = field(
        default=100, metadata={"help": "requests waiting on one queue before it answers 'overloaded'"}
    )
    admin_address: str = field(
        default="",
        metadata={"help": "host:port serving /health, /ready and /metrics apart from the API (off: '')"},
    )
    api_keys: str = field(
        default="",
        metadata={"help": "comma-separated SHA-256 hashes of the API keys (see 'querator apikey')"},
    )
    api_keys_file: str = field(
        default="", metadata={"help": "file of API key hashes, one per line ('#' starts a comment)"}
    )

    def validated(self) -> ServerConfig:
        """This config, normalised; raises ConfigError naming the first bad setting."""
        _check_address("address", self.address)
        if self.storage not in STORAGE_KINDS:
            raise ConfigError(
                f"storage is invalid; '{self.storage}' is not one of ({', '.join(STORAGE_KINDS)})"
            )
        level = self.log_level.lower()
        if level not in LOG_LEVELS:
            raise ConfigError(
                f"log-level is invalid; '{self.log_level}' is not one of (debug, info, warn, error)"
            )
        if self.log_format not in LOG_FORMATS:
            raise ConfigError(f"log-format is invalid; '{self.log_format}' is not one of (text, json)")
        sync = self.sqlite_synchronous.upper()
        if sync not in SQLITE_SYNC:
            raise ConfigError(
                f"sqlite-synchronous is invalid; '{self.sqlite_synchronous}' is not FULL or NORMAL"
            )
        if self.admin_address:
            _check_address("admin-address", self.admin_address)
        if self.max_produce_body <= 0 or self.max_requests_per_queue <= 0:
            raise ConfigError("max-produce-body and max-requests-per-queue must be greater than zero")
        return replace(self, log_level=level, sqlite_synchronous=sync)


def split_address(address: str) -> tuple[str, int]:
    """``host:port`` as (host, port); an empty host means localhost."""
    host, _, port = address.rpartition(":")
    return host or "localhost", int(port)


def _check_address(name: str, address: str) -> None:
    port = address.rpartition(":")[2]
    if ":" not in address or not port.isdigit() or int(port) > 65535:
        raise ConfigError(f"{name} is invalid; '{address}' is not host:port with a port up to 65535")


def option_name(name: str) -> str:
    """The flag and YAML spelling of a field: ``data_dir`` -> ``data-dir``."""
    return name.replace("_", "-")


def load(config_file: str | None, env: Mapping[str, str], flags: Mapping[str, Any]) -> ServerConfig:
    """Builds the config from a YAML file, the environment and flags (None values in flags are unset)."""
    values: dict[str, Any] = {}
    config_file = flags.get("config") or env.get("QUERATOR_CONFIG") or config_file
    if config_file:
        values.update(_from_file(Path(config_file)))
    for f in fields(ServerConfig):
        key = "QUERATOR_" + f.name.upper()
        if key in env:
            values[f.name] = env[key]
        if flags.get(f.name) is not None:
            values[f.name] = flags[f.name]
    typed: dict[str, Any] = {}
    for f in fields(ServerConfig):
        if f.name in values:
            typed[f.name] = _cast(f.name, values[f.name], f.type)
    return ServerConfig(**typed).validated()


def _from_file(path: Path) -> dict[str, Any]:
    try:
        data = yaml.safe_load(path.read_text())
    except OSError as e:
        raise ConfigError(f"config file is invalid; cannot read '{path}': {e.strerror}") from None
    except yaml.YAMLError as e:
        raise ConfigError(f"config file is invalid; '{path}': {e}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"config file is invalid; '{path}' must hold a mapping of settings")
    known = {option_name(f.name): f.name for f in fields(ServerConfig)}
    values = {}
    for key, value in data.items():
        if key not in known:
            raise ConfigError(f"config file is invalid; unknown setting '{key}' in '{path}'")
        values[known[key]] = value
    return values


def _cast(name: str, value: Any, kind: Any) -> Any:
    if kind in (int, "int"):
        # YAML gives ints, the environment and flags give strings; anything else (1.5, true) is refused
        # rather than truncated.
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, str) and value.strip().lstrip("+-").isdigit():
            return int(value)
        raise ConfigError(f"{option_name(name)} is invalid; '{value}' is not a whole number")
    return str(value)


def environment() -> Mapping[str, str]:
    """The process environment (a seam so tests pass their own)."""
    return os.environ
