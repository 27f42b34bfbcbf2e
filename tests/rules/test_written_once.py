"""The watermark's advance and the late rule are written once, in streaming/rules/windows.py; every other module
calls them. A source scan fails when their expressions appear anywhere else.

The scan reads the syntax tree of every Python module of the project (not its text), so comments, docstrings and
line breaks neither hide an expression nor raise a false alarm, and it looks for the shape of each rule's
arithmetic, whatever the names around it:

- the advance: a delay subtracted (``x - ...delay...``): ``newest event - delay``, per pipeline or per server;
- never back: ``max(a, b)`` of a watermark and another value (an argument that is a name or attribute called
  ``...watermark...`` or ``...in_force...``);
- the late rule: a watermark scaled to microseconds (``...watermark... * 1000`` or ``* US_PER_MS``), the bound an
  event is compared with. The online view's own rule (an event *at or below* its server's watermark is late for
  it) is a different rule, with its vectorised form proven equal to it by tests/rules/online/test_fold.py.

A new copy in another module fails here; a new rule that really is different is named in ``ALLOWED`` with why.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = ("streaming", "dashboard", "clients", "bench", "scripts")
RULE = "streaming/rules/windows.py"
ONLINE_LATE = ("streaming/rules/online/player.py", "streaming/rules/online/fold.py")


def _names(node: ast.AST) -> str:
    return ast.unparse(node).lower()


def subtracts_a_delay(node: ast.AST) -> bool:
    return isinstance(node, ast.BinOp) and isinstance(node.op, ast.Sub) and "delay" in _names(node.right)


def _a_watermark(node: ast.AST) -> bool:
    """A watermark itself (a name or attribute called so), not an expression over one."""
    name = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else ""
    return "watermark" in name.lower() or "in_force" in name.lower()


def never_back(node: ast.AST) -> bool:
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "max"
            and len(node.args) == 2 and any(_a_watermark(a) for a in node.args))


def _to_us(node: ast.AST) -> bool:
    return (isinstance(node, ast.Constant) and node.value == 1000) or (
        isinstance(node, ast.Name) and node.id == "US_PER_MS")


def scales_a_watermark(node: ast.AST) -> bool:
    if not (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult)):
        return False
    return ("watermark" in _names(node.left) and _to_us(node.right)) or (
        "watermark" in _names(node.right) and _to_us(node.left))


ALLOWED: dict[Callable[[ast.AST], bool], tuple[str, ...]] = {
    subtracts_a_delay: (RULE,),
    never_back: (RULE,),
    scales_a_watermark: (RULE, *ONLINE_LATE),  # the online view's late rule: at or below, a rule of its own
}


def modules() -> Iterator[tuple[str, ast.AST]]:
    for folder in FOLDERS:
        for path in sorted((ROOT / folder).rglob("*.py")):
            if ".venv" not in path.parts:
                yield str(path.relative_to(ROOT)), ast.parse(path.read_text(), str(path))


def found(check: Callable[[ast.AST], bool]) -> list[str]:
    return [f"{name}:{node.lineno} {ast.unparse(node)}" for name, tree in modules()
            if name not in ALLOWED[check] for node in ast.walk(tree) if check(node)]


def test_the_watermarks_advance_is_written_once() -> None:
    assert found(subtracts_a_delay) == []
    assert found(never_back) == []


def test_the_late_rule_is_written_once() -> None:
    assert found(scales_a_watermark) == []


def test_the_scan_finds_what_it_looks_for() -> None:
    """Each check recognises the expressions it is about, written any way, and not their neighbours."""
    def hits(check: Callable[[ast.AST], bool], source: str) -> bool:
        return any(check(n) for n in ast.walk(ast.parse(source)))

    assert hits(subtracts_a_delay, "w = event_ms(newest) - self.delay_ms")
    assert hits(subtracts_a_delay, "w = max(wm, (top -\n  params.delay_ms))")
    assert not hits(subtracts_a_delay, "w = wm + delay_ms")
    assert hits(never_back, "w = max(s.watermark_ms, s.next_watermark_ms)")
    assert hits(never_back, "w = max(in_force, candidate)")
    assert not hits(never_back, "n = max(counts)")
    assert not hits(never_back, "age = max(0, now_ms - s.next_watermark_ms)")  # an age, not a watermark
    assert hits(scales_a_watermark, "late = ev < watermark_ms * 1000")
    assert hits(scales_a_watermark, "pc.less(a, US_PER_MS * entry.watermark_ms)")
    assert not hits(scales_a_watermark, "us = batch_ts_ms * 1000")
    # every rule module is scanned: the allowed ones exist, so a move would be seen
    assert all((ROOT / p).exists() for names in ALLOWED.values() for p in names)
