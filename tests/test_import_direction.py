"""Imports run one way: each package of ragtrace imports only the packages below it (read from the source,
function-level imports included), the scoring core imports no OpenTelemetry and no I/O, and `offline/` and
`gateway/` share the OTLP decoder (`ragtrace.otlp`) without importing each other."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).parents[1] / "ragtrace"
PRIVATE = {"_checks", "_logs", "_sdk", "_state", "_text", "_untraced", "_version"}  # helpers any layer may use

# What each package may import of ragtrace besides itself and PRIVATE. The top-level modules (`testing`,
# `instrument`, `__init__`), `cli` and `demo` sit above everything and are not listed.
MAY_IMPORT: dict[str, set[str]] = {
    "scoring": set(),
    "otlp": set(),
    "capture": {"scoring"},
    "judges": {"scoring"},
    # The judge canary reads a labels file as `align` and `eval` read datasets; offline never imports live.
    "live": {"scoring", "capture", "judges", "otlp", "offline"},
    "offline": {"scoring", "capture", "judges", "otlp"},
    "gateway": {"scoring", "capture", "judges", "otlp", "live"},
}
# Modules that read or write the world: the scoring core is pure computation over a sample and verdicts.
IO_MODULES = {"socket", "http", "urllib", "subprocess", "sqlite3", "asyncio", "io", "os", "pathlib", "shutil",
              "requests", "httpx", "grpc", "litellm", "opentelemetry"}


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            if node.module == "ragtrace":
                names.update(f"ragtrace.{alias.name}" for alias in node.names)
    return names


def _ragtrace_packages(path: Path) -> set[str]:
    return {name.split(".")[1] for name in _imports(path) if name.startswith("ragtrace.")}


@pytest.mark.parametrize("package", sorted(MAY_IMPORT))
def test_a_package_imports_only_what_is_below_it(package: str) -> None:
    allowed = {package} | PRIVATE | MAY_IMPORT[package]
    wrong = {
        f"{path.relative_to(PACKAGE.parent)} imports ragtrace.{name}"
        for path in (PACKAGE / package).rglob("*.py")
        for name in _ragtrace_packages(path) - allowed
    }
    assert not wrong, sorted(wrong)


def test_the_scoring_core_does_no_io_and_knows_no_opentelemetry() -> None:
    wrong = {
        f"{path.name} imports {name}"
        for path in (PACKAGE / "scoring").rglob("*.py")
        for name in _imports(path)
        if name.split(".")[0] in IO_MODULES
    }
    assert not wrong, sorted(wrong)


def test_nothing_in_the_package_imports_the_cli_or_the_public_testing_face() -> None:
    wrong = {
        f"{path.relative_to(PACKAGE.parent)} imports {name}"
        for path in PACKAGE.rglob("*.py")
        if path.parent.name != "cli" and path.name not in ("__main__.py",)
        for name in _ragtrace_packages(path) & {"cli", "testing"}
    }
    assert not wrong, sorted(wrong)


def test_the_checks_can_fail(tmp_path: Path) -> None:
    offending = tmp_path / "m.py"
    offending.write_text("def f():\n    from ragtrace.offline.replay import spans_of\n    import socket\n")
    assert _ragtrace_packages(offending) == {"offline"} and "socket" in _imports(offending)
