"""The durable protocol's words (claim outcomes, a turn's endings, statuses, entry kinds and states)
are spelled once, in querator/wire/workflows.py: the journal's rules, the service and the client's
runtime compare with its constants, never with a literal of their own."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from querator.wire import workflows as w

ROOT = Path(__file__).resolve().parents[3]

WORDS = {
    *w.STATUSES,
    *w.KINDS,
    *w.STATES,
    w.CLAIMED,
    w.BUSY,
    w.FINISHED,
    *(then for then in w.THENS if then),
}
"""Every non-empty word of the protocol."""

SPEAKERS = sorted(
    [
        *(ROOT / "querator/durable").glob("*.py"),
        ROOT / "querator/storage/journal.py",
        ROOT / "querator/service/_workflows.py",
        ROOT / "querator/service/_validation.py",
        ROOT / "querator/client/_workflows.py",
    ]
)
WORD_FIELDS = {"then", "outcome", "status", "kind", "state"}


def _spelled_words(tree: ast.AST) -> list[tuple[int, str]]:
    """Literals of protocol words where the protocol is spoken: compared, given as one of its fields,
    or gathered into a set or a mapping."""
    found: list[ast.expr] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            found += [node.left, *node.comparators]
            found += [
                e for c in node.comparators if isinstance(c, ast.Tuple | ast.List | ast.Set) for e in c.elts
            ]
        elif isinstance(node, ast.keyword) and node.arg in WORD_FIELDS:
            found.append(node.value)
        elif isinstance(node, ast.Set):
            found += node.elts
        elif isinstance(node, ast.Dict):
            found += [k for k in node.keys if k is not None]
    return [
        (e.lineno, e.value)
        for e in found
        if isinstance(e, ast.Constant) and isinstance(e.value, str) and e.value in WORDS
    ]


@pytest.mark.parametrize("path", SPEAKERS, ids=[str(p.relative_to(ROOT)) for p in SPEAKERS])
def test_a_speaker_spells_no_protocol_word_itself(path: Path) -> None:
    assert _spelled_words(ast.parse(path.read_text())) == []


def test_the_check_finds_a_spelled_word() -> None:
    tree = ast.parse('if claim.outcome == "busy": ctx.append(then="suspend")\nTHENS = {"fail"}')
    assert sorted(_spelled_words(tree)) == [(1, "busy"), (1, "suspend"), (2, "fail")]


def test_every_ending_ends_in_a_status() -> None:
    assert set(w.ENDINGS.values()) <= set(w.STATUSES)
