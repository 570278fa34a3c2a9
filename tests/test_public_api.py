"""The names the README uses are importable from the top-level package."""

import importlib

import ragtrace


def test_readme_entry_points_resolve() -> None:
    for name in ragtrace.__all__:
        assert getattr(ragtrace, name) is not None, name
    assert ragtrace.install is ragtrace.live.install  # type: ignore[attr-defined]
    align_module = importlib.import_module("ragtrace.offline.align")
    assert ragtrace.align is align_module.align and ragtrace.aalign is align_module.aalign


def test_unknown_attribute_is_an_attribute_error() -> None:
    try:
        ragtrace.no_such_thing  # type: ignore[attr-defined]  # noqa: B018
    except AttributeError as exc:
        assert "no_such_thing" in str(exc)
    else:
        raise AssertionError("expected AttributeError")
