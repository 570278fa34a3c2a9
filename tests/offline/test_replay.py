"""`ragtrace replay`: real SDK spans -> OTLP JSON/protobuf files -> ReadableSpans -> capture -> scores."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import json_format
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Status, StatusCode

from ragtrace.cli import main
from ragtrace.instrument import generation_span, retrieval_span
from ragtrace.offline.replay import ReplayError, replay_file, spans_of
from tests.offline.gold import JUDGE, average_precision

CASES: list[dict[str, Any]] = [
    {"query": "where is the gold?", "docs": ["gold in the vault", "tin can", "gold leaf"], "answer": "In the vault.",
     "truth": "gold in the vault"},
    {"query": "what is lead?", "docs": ["tin can", "iron gate", "gold ring"], "answer": "A metal.", "truth": None},
    {"query": "and silver?", "docs": ["tin can", "gold bar"], "answer": "Shiny.", "truth": "gold bar. silver spoon"},
]


def make_spans() -> list[ReadableSpan]:
    """One trace per case: a root request span, a retrieval and a generation under it."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "rag-app"}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("test")
    for case in CASES:
        with tracer.start_as_current_span("request") as root:
            if case["truth"]:
                root.set_attribute("ragtrace.ground_truth", case["truth"])
            root.add_event("cache.lookup", {"hit": False, "keys": ["a", "b"], "n": 2})
            if case["answer"] == "A metal.":
                root.set_status(Status(StatusCode.ERROR, "upstream timeout"))
            with retrieval_span(case["query"], data_source="kb", tracer=tracer) as retrieval:
                docs = [{"id": f"d{i}", "content": d, "score": 1 - i / 10} for i, d in enumerate(case["docs"])]
                retrieval.record(docs)
            with generation_span(model="m", query=case["query"], tracer=tracer) as generation:
                generation.record(case["answer"])
    provider.shutdown()
    return list(exporter.get_finished_spans())


@pytest.fixture(scope="module")
def spans() -> list[ReadableSpan]:
    return make_spans()


def write_json_lines(path: Path, spans: list[ReadableSpan], per_line: int = 2) -> Path:
    """The collector file exporter's shape: one ExportTraceServiceRequest per line (here a few spans each)."""
    lines = [
        json_format.MessageToJson(encode_spans(spans[i : i + per_line]), indent=None)
        for i in range(0, len(spans), per_line)
    ]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def to_hex_ids(line: str) -> str:
    """OTLP/JSON (what the collector writes) has hex ids, where protobuf's JSON mapping has base64."""
    document = json.loads(line)
    for resource_spans in document["resourceSpans"]:
        for scope_spans in resource_spans["scopeSpans"]:
            for span in scope_spans["spans"]:
                for key in ("traceId", "spanId", "parentSpanId"):
                    if key in span:
                        span[key] = base64.b64decode(span[key]).hex()
    return json.dumps(document)


def test_spans_survive_the_round_trip(spans: list[ReadableSpan]) -> None:
    decoded = list(spans_of(encode_spans(spans)))
    by_id = {s.context.span_id: s for s in decoded if s.context is not None}
    assert len(decoded) == len(spans)
    for original in spans:
        assert original.context is not None
        copy = by_id[original.context.span_id]
        assert copy.name == original.name and copy.kind == original.kind
        assert copy.context is not None and copy.context.trace_id == original.context.trace_id
        assert (copy.parent.span_id if copy.parent else None) == (original.parent.span_id if original.parent else None)
        assert (copy.start_time, copy.end_time) == (original.start_time, original.end_time)
        assert dict(copy.attributes or {}) == dict(original.attributes or {})
        assert copy.resource.attributes["service.name"] == "rag-app"
        assert [(e.name, dict(e.attributes or {}), e.timestamp) for e in copy.events] == [
            (e.name, dict(e.attributes or {}), e.timestamp) for e in original.events
        ]
        assert (copy.status.status_code, copy.status.description) == (
            original.status.status_code, original.status.description
        )
    assert sum(1 for s in decoded if s.status.description == "upstream timeout") == 1


def expected(case: dict[str, Any]) -> dict[str, Any]:
    useful = ["gold" in d for d in case["docs"]]
    return {"precision": round(average_precision(useful), 2)}


def test_replay_json_extracts_the_samples_and_scores_them(
    tmp_path: Path, spans: list[ReadableSpan], capsys: pytest.CaptureFixture[str]
) -> None:
    export = write_json_lines(tmp_path / "traces.json", spans)
    replayed = replay_file(export)
    assert replayed.spans == len(spans) == 9 and replayed.traces == 3
    assert [s.sample.query for s in replayed.samples] == [c["query"] for c in CASES]
    for sample, case in zip(replayed.samples, CASES, strict=True):
        assert sample.sample.context_texts == case["docs"]
        assert [d.id for d in sample.sample.contexts] == [f"d{i}" for i in range(len(case["docs"]))]
        assert sample.sample.response == case["answer"] and sample.sample.ground_truth == case["truth"]
        assert sample.convention == "genai" and sample.generation_span_id is not None

    out = tmp_path / "out.jsonl"
    code = main(["replay", str(export), "--judge", JUDGE, "--out", str(out), "--json", "--quiet",
                 "--html", str(tmp_path / "replay.html")])
    stdout, _ = capsys.readouterr()
    assert code == 0
    summary = json.loads(stdout)
    assert summary["command"] == "replay" and summary["items"] == 3
    records = [json.loads(line) for line in out.read_text().splitlines()]
    by_query = {r["query"]: r for r in records}
    for case in CASES:
        record = by_query[case["query"]]
        assert record["scores"]["context_precision"] == expected(case)["precision"]
        assert record["id"] == f"{record['trace_id']}/{record['span_id']}" and record["start_time_unix_nano"] > 0
    assert by_query["what is lead?"]["results"]["context_recall"]["skipped"] == "no_ground_truth"
    assert by_query["and silver?"]["scores"]["context_recall"] == 0.5
    html = (tmp_path / "replay.html").read_text()
    assert 'data-chart="timeline"' in html and 'data-chart="histogram-context_precision"' in html


def test_hex_ids_as_the_collector_writes_them(tmp_path: Path, spans: list[ReadableSpan]) -> None:
    base = write_json_lines(tmp_path / "b64.json", spans)
    hex_file = tmp_path / "hex.json"
    hex_file.write_text("\n".join(to_hex_ids(line) for line in base.read_text().splitlines()) + "\n")
    first_span = json.loads(hex_file.read_text().splitlines()[0])["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
    assert len(first_span["traceId"]) == 32 and len(first_span["spanId"]) == 16
    one, other = replay_file(base), replay_file(hex_file)
    assert [(s.key, s.sample) for s in one.samples] == [(s.key, s.sample) for s in other.samples]


def test_pretty_printed_requests_replay_like_one_per_line(tmp_path: Path, spans: list[ReadableSpan]) -> None:
    """A saved OTLP/HTTP body or the spec's example files spread one request over many lines."""
    base = write_json_lines(tmp_path / "lines.json", spans)
    pretty = tmp_path / "pretty.json"
    pretty.write_text(
        "".join(json.dumps(json.loads(to_hex_ids(line)), indent=2) + "\n" for line in base.read_text().splitlines()),
        encoding="utf-8",
    )
    assert pretty.read_text().count("\n") > 100
    one, other = replay_file(base), replay_file(pretty)
    assert [(s.key, s.sample) for s in other.samples] == [(s.key, s.sample) for s in one.samples]
    assert other.spans == one.spans == len(spans)


def test_a_broken_pretty_printed_request_is_reported_at_its_line(tmp_path: Path) -> None:
    path = tmp_path / "traces.json"
    path.write_text('{"resourceSpans": []}\n{\n  "resourceSpans": [\n    {"scopeSpans": []\n  ]\n}\n')
    with pytest.raises(ReplayError, match=r"traces.json:5: not valid JSON \(Expecting ',' delimiter at column 3\)"):
        replay_file(path)


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


@pytest.mark.parametrize("framing", ["single", "varint", "big_endian"])
def test_replay_protobuf_files(tmp_path: Path, spans: list[ReadableSpan], framing: str) -> None:
    messages = [encode_spans(spans[:4]).SerializeToString(), encode_spans(spans[4:]).SerializeToString()]
    if framing == "single":
        data = encode_spans(spans).SerializeToString()
    elif framing == "varint":
        data = b"".join(_varint(len(m)) + m for m in messages)
    else:
        data = b"".join(len(m).to_bytes(4, "big") + m for m in messages)
    path = tmp_path / "traces.pb"
    path.write_bytes(data)
    for fmt in ("proto", "auto"):
        replayed = replay_file(path, format=fmt)
        assert [s.sample.query for s in replayed.samples] == [c["query"] for c in CASES]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('{"resourceSpans": []}\n{nope\n', "traces.json:2: not valid JSON"),
        ('{"resourceSpans": [{"scopeSpans": [{"spans": [{"startTimeUnixNano": "yesterday"}]}]}]}\n',
         "traces.json:1: not an OTLP ExportTraceServiceRequest"),
        ("\n", "traces.json: file is empty: no spans"),
        # Not a trace export: what the file holds is named, and what to run instead when there is something.
        ('{"query": "q", "contexts": ["a"], "response": "r"}\n',
         "traces.json:1: a JSON object with keys 'query', 'contexts', 'response' and no 'resourceSpans': not an "
         "OTLP trace export; it looks like a dataset of samples: score it with `ragtrace eval FILE`"),
        ('{"level": "info", "msg": "hello"}\n',
         "traces.json:1: a JSON object with keys 'level', 'msg' and no 'resourceSpans': not an OTLP trace export\n"),
        ('{"resourceMetrics": []}\n', "traces.json:1: an OTLP metrics export (keys 'resourceMetrics'), not traces"),
        ('{"resourceLogs": []}\n', "traces.json:1: an OTLP logs export"),
        ("[1, 2]\n", "traces.json:1: a JSON list, not an OTLP ExportTraceServiceRequest object"),
        ('{"resourceSpans": []}\n{}\n', "traces.json: 2 OTLP export request(s), none with a span"),
    ],
)
def test_bad_export_files_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str, message: str
) -> None:
    path = tmp_path / "traces.json"
    path.write_text(content)
    assert main(["replay", str(path), "--judge", JUDGE, "--quiet"]) == 2
    assert f"ragtrace replay: error: {tmp_path / message}" in capsys.readouterr().err


def test_traces_without_retrievals_are_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    with provider.get_tracer("t").start_as_current_span("just http"):
        pass
    path = write_json_lines(tmp_path / "plain.json", list(exporter.get_finished_spans()))
    assert main(["replay", str(path), "--judge", JUDGE, "--quiet"]) == 2
    assert "no retrieval samples found in 1 spans" in capsys.readouterr().err


def test_spans_with_ids_of_the_wrong_length_are_left_out(spans: list[ReadableSpan]) -> None:
    """A 17-byte trace id or 9-byte span/parent id cannot be exported (the encoder's fixed-width ints
    overflow and fail the whole batch): those spans are left out, the others convert."""
    request = encode_spans(spans)
    items = request.resource_spans[0].scope_spans[0].spans
    items[0].trace_id = b"\x01" * 17
    items[1].span_id = b"\x02" * 9
    child = next(i for i in range(2, len(items)) if items[i].parent_span_id)
    items[child].parent_span_id = b"\x03" * 9
    decoded = list(spans_of(request))
    assert len(decoded) == len(spans) - 3
    assert all(s.context is not None and s.context.trace_id < 1 << 128 for s in decoded)


def test_json_ids_that_are_not_ids_reject_their_span_only() -> None:
    from ragtrace.offline.replay import parse_json_line

    good = {"traceId": "0af7651916cd43dd8448eb211c80319c", "spanId": "b7ad6b7169203331", "name": "ok"}
    bad = [
        {"traceId": "z" * 32, "spanId": "b7ad6b7169203331", "name": "non-hex"},
        {"traceId": "0af7651916cd43dd8448eb211c80319c", "spanId": 12345, "name": "number"},
        {"traceId": "0af7651916cd43dd8448eb211c80319c", "spanId": "b7ad6b7169203331", "parentSpanId": "abc",
         "name": "short-parent"},
    ]
    line = json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": [good, *bad]}]}]})
    request = parse_json_line(line)
    assert len(request.resource_spans[0].scope_spans[0].spans) == 4, "every span is kept for the count"
    assert [s.name for s in spans_of(request)] == ["ok"]
