"""`explain` and `replay` read the exports a newcomer has (issue 30, item 2): the SDK's ConsoleSpanExporter
output, and the OTLP/JSON lines of ragtrace's own file exporter (the Collector's file format)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SimpleSpanProcessor, SpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from ragtrace import OtlpJsonFileSpanExporter
from ragtrace.cli import main
from ragtrace.instrument import generation_span, retrieval_span
from ragtrace.offline.replay import read_spans, replay_file


def _app(exporter: SpanExporter) -> list[str]:
    """Two RAG requests through ragtrace's helpers; their trace ids."""
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("app")
    ids = []
    for question, doc in (("Which port does the gateway use?", "The gateway listens on port 4317."),
                          ("Who wrote it?", "It was written by the platform team.")):
        with tracer.start_as_current_span("request") as root:
            with retrieval_span(question, tracer=tracer) as retrieval:
                retrieval.record([doc, "Unrelated text about lunch."])
            with generation_span(query=question, tracer=tracer) as generation:
                generation.record(doc)
        ids.append(f"{root.get_span_context().trace_id:032x}")
    provider.shutdown()
    return ids


def _console(path: Path) -> list[str]:
    with path.open("w") as out:
        return _app(ConsoleSpanExporter(out=out))


def _file_exporter(path: Path) -> list[str]:
    return _app(OtlpJsonFileSpanExporter(path))


@pytest.mark.parametrize("write", [_console, _file_exporter], ids=["console", "file_exporter"])
def test_explain_and_replay_read_it(
    write: Callable[[Path], list[str]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "traces.txt"
    trace_ids = write(path)
    replayed = replay_file(path)
    assert (replayed.traces, replayed.spans, len(replayed.samples)) == (2, 6, 2)
    assert {s.sample.query for s in replayed.samples} == {"Which port does the gateway use?", "Who wrote it?"}
    assert all(s.sample.response for s in replayed.samples)
    assert main(["explain", str(path)]) == 0
    out = capsys.readouterr().out
    assert "2 trace(s), 2 with samples, 0 without" in out
    assert all(trace_id in out for trace_id in trace_ids)
    assert main(["replay", str(path), "--quiet", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["items"] == 2


def test_the_file_exporter_writes_otlp_json_lines(tmp_path: Path) -> None:
    path = tmp_path / "traces.jsonl"
    trace_ids = _file_exporter(path)
    lines = path.read_text().splitlines()
    assert len(lines) == 6  # one request per export call: SimpleSpanProcessor exports span by span
    first = json.loads(lines[0])
    span = first["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
    assert span["traceId"] in trace_ids and len(span["spanId"]) == 16  # hex, as OTLP/JSON wants
    assert isinstance(span["kind"], int)


def test_the_console_reader_keeps_what_the_sdk_printed(tmp_path: Path) -> None:
    path = tmp_path / "console.txt"
    provider = TracerProvider()
    with path.open("w") as out:
        provider.add_span_processor(SimpleSpanProcessor(ConsoleSpanExporter(out=out)))
        tracer = provider.get_tracer("app")
        with tracer.start_as_current_span("root") as root, tracer.start_as_current_span(
            "child", kind=SpanKind.CLIENT, attributes={"n": 3, "tags": ["a", "b"]}
        ) as child:
            child.add_event("hit", {"k": "v"})
            child.set_status(StatusCode.ERROR, "broken")
        provider.shutdown()
    spans = {s.name: s for s in read_spans(path)}
    original: ReadableSpan = child  # type: ignore[assignment]
    read = spans["child"]
    assert read.context is not None and read.parent is not None
    assert read.context.trace_id == root.get_span_context().trace_id
    assert read.parent.span_id == root.get_span_context().span_id
    assert read.kind is SpanKind.CLIENT and read.status.status_code is StatusCode.ERROR
    assert read.status.description == "broken"
    assert dict(read.attributes or {}) == {"n": 3, "tags": ("a", "b")}
    assert read.events[0].name == "hit" and dict(read.events[0].attributes or {}) == {"k": "v"}
    assert original.start_time is not None and read.start_time is not None
    assert abs(read.start_time - original.start_time) < 1000  # the console prints microseconds
    assert spans["root"].parent is None


@settings(max_examples=60, deadline=None)
@given(st.dictionaries(st.sampled_from(["name", "context", "kind", "parent_id", "start_time", "status", "events",
                                        "links", "attributes", "resource"]),
                       st.none() | st.integers() | st.text(max_size=5) | st.lists(st.integers(), max_size=2)
                       | st.dictionaries(st.text(max_size=8), st.text(max_size=8) | st.integers(), max_size=3)))
def test_a_broken_console_span_is_a_clear_error(document: dict[str, object]) -> None:
    """A printed span with missing or mangled fields is refused with the file and line, never a crash."""
    import tempfile

    from ragtrace.offline.replay import ReplayError

    document.setdefault("name", "x")
    document["context"] = document.get("context") if isinstance(document.get("context"), dict) else {}
    document["context"].setdefault("trace_id", "0x" + "1" * 32)  # type: ignore[union-attr]
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "c.txt"
        path.write_text(json.dumps(document, indent=4) + "\n")
        try:
            read_spans(path)
        except ReplayError as exc:
            assert str(path) in str(exc)
