"""ProcessRole: what the supervisor tells one of its processes, through the environment.

Never on the command line, where any user of the machine can read it: the cluster secret travels here.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

import msgspec

from querator.config import ServerConfig

ENV = "QUERATOR_PROCESS_ROLE"
"""The variable holding a process's role (and the node's settings) as JSON."""


@dataclass(frozen=True)
class ProcessRole:
    """Process ``index`` of a node of ``len(addresses)`` processes."""

    index: int
    addresses: tuple[str, ...]
    """Every process's ``host:port``, by index, where the others forward to it: private on 127.0.0.1, or
    for a cluster node the address it advertises as a member (docs/processes.md)."""
    private_fd: int
    """The listening socket of this process's private address, opened by the supervisor."""
    parent_fd: int
    """The read end of a pipe from the supervisor: end of file means the supervisor is gone."""
    secret: bytes
    """The secret forwards between the processes are signed with (b"": forwards are not signed)."""
    shared_db: str
    """With memory storage: the sqlite file of what the processes share (queue settings...)."""

    @property
    def count(self) -> int:
        return len(self.addresses)


class _Envelope(msgspec.Struct):
    config: dict[str, Any]
    index: int
    addresses: list[str]
    private_fd: int
    parent_fd: int
    secret: str
    shared_db: str


def role_env(config: ServerConfig, role: ProcessRole) -> dict[str, str]:
    """The environment variable carrying ``role`` and ``config`` to the process."""
    envelope = _Envelope(
        asdict(config),
        role.index,
        list(role.addresses),
        role.private_fd,
        role.parent_fd,
        role.secret.decode("ascii"),
        role.shared_db,
    )
    return {ENV: msgspec.json.encode(envelope).decode()}


def role_from_env(env: Mapping[str, str] | None = None) -> tuple[ServerConfig, ProcessRole] | None:
    """The settings and role a supervisor gave this process; None for a process nobody supervises."""
    text = (os.environ if env is None else env).get(ENV)
    if text is None:
        return None
    e = msgspec.json.decode(text, type=_Envelope)
    role = ProcessRole(
        e.index, tuple(e.addresses), e.private_fd, e.parent_fd, e.secret.encode("ascii"), e.shared_db
    )
    return ServerConfig(**e.config), role
