"""The Host names a keyless node answers (querator.http._hosts, DNS rebinding): docs/configuration.md,
"Host names"."""

from __future__ import annotations

import pytest

from querator.http import AllowedHosts

ALLOWED = AllowedHosts(["queue.example.com", ".corp.example", ""])


@pytest.mark.parametrize(
    "host",
    [
        None,  # HTTP/1.0: no Host header, nothing for a page to rebind
        "127.0.0.1",
        "127.0.0.1:2319",
        "10.1.2.3:80",
        "[::1]:2319",
        "[2001:db8::1]",
        "::1",
        "localhost",
        "LOCALHOST:2319",
        "localhost.",
        "app.localhost:8080",
        "querator:2319",  # a name without a dot: a container's or a Service's short name
        "queue.example.com:443",
        "Queue.Example.COM.",
        "corp.example",
        "node-1.querator.corp.example:2319",
    ],
)
def test_allowed(host: str | None) -> None:
    assert ALLOWED.allows(host)


@pytest.mark.parametrize(
    "host",
    [
        "evil.example",
        "evil.example:2319",
        "queue.example.com.evil.example",
        "other.example.com",
        "evilcorp.example",  # not under .corp.example
        "localhost.evil.example",
        "127.0.0.1.evil.example",
        "[not-an-ip]:80",
    ],
)
def test_refused(host: str) -> None:
    assert not ALLOWED.allows(host)


def test_a_star_allows_any_name() -> None:
    assert AllowedHosts(["*"]).allows("evil.example")


def test_answers_stay_right_past_the_remembered_ones() -> None:
    hosts = AllowedHosts([])
    for n in range(1000):
        assert not hosts.allows(f"n{n}.evil.example")
    assert hosts.allows("localhost") and not hosts.allows("n1.evil.example")
