"""The project's size rule, held by a test: no class over 250 lines and no function over 60 in ragtrace/
(a longer one is split by concern, not cut)."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).parents[1] / "ragtrace"
MAX_CLASS_LINES = 250
MAX_FUNCTION_LINES = 60


def too_long(source: str, where: str) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(source, where)):
        if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            limit = MAX_CLASS_LINES if isinstance(node, ast.ClassDef) else MAX_FUNCTION_LINES
            lines = (node.end_lineno or node.lineno) - node.lineno + 1
            if lines > limit:
                found.append(f"{where}:{node.lineno} {node.name}: {lines} lines (at most {limit})")
    return found


def test_no_class_over_250_lines_and_no_function_over_60() -> None:
    found = [
        problem
        for path in sorted(PACKAGE.rglob("*.py"))
        for problem in too_long(path.read_text(), str(path.relative_to(PACKAGE.parent)))
    ]
    assert not found, "\n".join(found)


def test_the_rule_counts_a_function_from_def_to_its_last_line_methods_included() -> None:
    body = "\n".join(f"    x{i} = {i}" for i in range(60))
    assert too_long(f"def short():\n{body[: body.rfind(chr(10))]}\n", "m.py") == []
    assert too_long(f"def long():\n{body}\n", "m.py") == ["m.py:1 long: 61 lines (at most 60)"]
    nested = "class C:\n    def f(self):\n" + "\n".join(f"        y{i} = {i}" for i in range(60)) + "\n"
    assert too_long(nested, "m.py") == ["m.py:2 f: 61 lines (at most 60)"]
