"""A switch setting (``--no-ui``): a flag without a value, ``true``/``false`` in the environment, a
boolean in YAML; anything else is refused with the setting's name."""

from __future__ import annotations

from pathlib import Path

import pytest

from querator.cli import build_parser
from querator.config import ConfigError, load


def test_the_console_is_on_by_default() -> None:
    assert load(None, {}, {}).no_ui is False


def test_the_flag_takes_no_value() -> None:
    args = build_parser().parse_args(["serve", "--no-ui"])
    assert load(None, {}, vars(args)).no_ui is True
    assert load(None, {}, vars(build_parser().parse_args(["serve"]))).no_ui is False


@pytest.mark.parametrize(
    ("text", "value"), [("true", True), ("1", True), ("yes", True), ("false", False), ("0", False)]
)
def test_the_environment_spells_it(text: str, value: bool) -> None:
    assert load(None, {"QUERATOR_NO_UI": text}, {}).no_ui is value


def test_yaml_gives_a_boolean(tmp_path: Path) -> None:
    path = tmp_path / "q.yaml"
    path.write_text("no-ui: true\n")
    assert load(str(path), {}, {}).no_ui is True


@pytest.mark.parametrize("text", ["maybe", "", "2"])
def test_anything_else_is_refused(text: str) -> None:
    with pytest.raises(ConfigError) as e:
        load(None, {"QUERATOR_NO_UI": text}, {})
    assert str(e.value) == f"no-ui is invalid; '{text}' is not on or off"
