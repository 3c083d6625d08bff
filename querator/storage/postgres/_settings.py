"""How to reach PostgreSQL: ``PostgresSettings`` and the driver's connection arguments made from them."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import psycopg.conninfo


@dataclass(frozen=True)
class PostgresSettings:
    """How to reach PostgreSQL and where to keep Querator's tables.

    Args:
        url: A libpq connection URL or keyword string (``postgresql://user@host:5432/db``).
        schema: The schema holding the tables, created when missing ("" keeps the server's
            ``search_path``, normally ``public``). Tests give each test a schema of its own.
        username: Overrides the URL's user when set.
        password: Overrides the URL's password when set (also read by libpq from ``PGPASSWORD`` or
            ``~/.pgpass``).
        tls_ca_file: A PEM file of CAs: connect with TLS and verify the server's certificate and host
            name against them (``sslmode=verify-full``).
        connections: The pool's size: partitions run on this many connections at once.
        connect_timeout_s: Seconds before a connection attempt counts as failed.
    """

    url: str = "postgresql://127.0.0.1:5432/postgres"
    schema: str = ""
    username: str = ""
    password: str = ""
    tls_ca_file: str = ""
    connections: int = 4
    connect_timeout_s: int = 5

    def connect_kwargs(self) -> dict[str, Any]:
        """The driver's ``connect`` arguments (the conversion stays here, at the edge).

        Raises:
            ValueError: the URL is malformed.
        """
        try:
            kwargs: dict[str, Any] = psycopg.conninfo.conninfo_to_dict(self.url)
        except psycopg.ProgrammingError as e:
            # Neither the URL nor libpq's quotes of it: it may hold a password.
            detail = re.sub(r'"[^"]*"', '"..."', str(e).strip().splitlines()[0])
            raise ValueError(f"not a PostgreSQL connection URL: {detail}") from None
        kwargs.setdefault("connect_timeout", self.connect_timeout_s)
        kwargs["application_name"] = "querator"
        if self.username:
            kwargs["user"] = self.username
        if self.password:
            kwargs["password"] = self.password
        if self.tls_ca_file:
            kwargs["sslmode"] = "verify-full"
            kwargs["sslrootcert"] = self.tls_ca_file
        if self.schema:
            kwargs["options"] = f"-c search_path={self.schema}"
        return kwargs

    def describe(self) -> str:
        """The URL without its password, for logs and errors."""
        try:
            parts = psycopg.conninfo.conninfo_to_dict(self.url)
        except psycopg.ProgrammingError:
            return "an invalid URL"
        parts.pop("password", None)
        host, port, db = parts.get("host", "localhost"), parts.get("port", "5432"), parts.get("dbname", "")
        return f"{host}:{port}/{db}" + (f" schema {self.schema}" if self.schema else "")
