"""The ``allowed-hosts`` setting of ``querator serve``: each source, and bad values refused naming it."""

from __future__ import annotations

from pathlib import Path

import pytest

from querator.config import ConfigError, load


def test_sources(tmp_path: Path) -> None:
    assert load(None, {}, {}).allowed_hosts == ""
    assert load(None, {"QUERATOR_ALLOWED_HOSTS": "a.example"}, {}).allowed_hosts == "a.example"
    assert load(None, {}, {"allowed_hosts": ".example, *"}).allowed_hosts == ".example, *"
    path = tmp_path / "querator.yaml"
    path.write_text("allowed-hosts: queue.example.com\n")
    assert load(str(path), {}, {}).allowed_hosts == "queue.example.com"


@pytest.mark.parametrize("value", ["http://a.example", "a.example:80", "a b", "*.example", "a..example"])
def test_bad_values_are_refused(value: str) -> None:
    with pytest.raises(ConfigError) as refused:
        load(None, {}, {"allowed_hosts": value})
    assert str(refused.value).startswith(f"allowed-hosts is invalid; '{value}' is not a host name")
