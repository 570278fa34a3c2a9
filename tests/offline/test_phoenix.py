"""Labels from Arize Phoenix: a real Phoenix receives an app's scored traces over OTLP/HTTP, people's labels are
written on the spans through Phoenix's REST API (`POST /v1/span_annotations`, as its UI does), and
`ragtrace align --phoenix URL --annotation NAME=SCORER` reads them back with the spans' samples."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import ragtrace
from ragtrace.cli import main
from ragtrace.demo.app import BM25Retriever, DemoApp, load_corpus, load_questions, stale_snapshot
from ragtrace.offline.phoenix import human_label, readable_spans
from tests.servers.phoenix import Phoenix

NAME = "retrieval ok"
LABEL = "ragtrace.context_precision.label"


def scored_retrievals(phoenix: Phoenix) -> tuple[dict[str, ReadableSpan], int]:
    """The demo app, ragtrace installed in front of its OTLP/HTTP exporter to Phoenix, half its requests on a
    stale index; the retrieval spans as exported, by span id (an in-memory copy beside the OTLP one), and how
    many spans were exported in all."""
    copy = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "align-phoenix"}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=f"{phoenix.url}/v1/traces")))
    provider.add_span_processor(SimpleSpanProcessor(copy))
    ragtrace.install(provider, judge="local", sample_rate=1.0, drift=False)
    corpus = load_corpus()
    app = DemoApp(provider.get_tracer("align-phoenix"), BM25Retriever(corpus))
    for number, question in enumerate(load_questions()[:10]):
        if number == 5:
            app.retriever = BM25Retriever(stale_snapshot(corpus))
        app.answer(question)
    assert provider.force_flush(timeout_millis=120_000)
    provider.shutdown()
    exported = copy.get_finished_spans()
    retrievals = {f"{s.context.span_id:016x}": s for s in exported
                  if s.context is not None and (s.attributes or {}).get("gen_ai.operation.name") == "retrieval"}
    return retrievals, len(exported)


def annotate(phoenix: Phoenix, span_id: str, label: str, kind: str = "HUMAN", identifier: str = "") -> dict[str, Any]:
    return {"span_id": span_id, "name": NAME, "annotator_kind": kind, "result": {"label": label},
            "identifier": identifier}


def test_align_reads_people_s_annotations_and_the_spans_samples_from_phoenix(
    phoenix: Phoenix, capsys: pytest.CaptureFixture[str]
) -> None:
    spans, exported = scored_retrievals(phoenix)
    recorded = {span_id: (s.attributes or {})[LABEL] for span_id, s in spans.items()}
    assert len(recorded) == 10 and set(recorded.values()) == {"pass", "fail"}, recorded
    ids = sorted(spans)
    # People agree with the recorded label on six spans and not on two; a ninth span's two people disagree
    # (no label); an LLM evaluator's annotation on the tenth is not a person's.
    people = {span_id: recorded[span_id] for span_id in ids[:6]}
    people.update({span_id: "fail" if recorded[span_id] == "pass" else "pass" for span_id in ids[6:8]})
    notes = [annotate(phoenix, s, label) for s, label in people.items()]
    notes += [annotate(phoenix, ids[8], "pass", identifier="ann"), annotate(phoenix, ids[8], "fail", identifier="bo")]
    notes.append(annotate(phoenix, ids[9], "pass", kind="LLM"))
    phoenix.post("/v1/span_annotations", {"data": notes})
    deadline = time.monotonic() + 60  # Phoenix inserts annotations and spans from a queue: wait for all of them
    while True:
        found = phoenix.get("/v1/projects/default/span_annotations", span_ids=ids, limit="100")["data"]
        listed = phoenix.get("/v1/projects/default/spans", limit="1000")["data"]
        if (len(found) == len(notes) and len(listed) == exported) or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert len(listed) == exported, "Phoenix has every exported span"

    code = main(["align", "--phoenix", phoenix.url, "--annotation", f"{NAME}=context_precision", "--judge", "local",
                 "--json", "--quiet"])
    stdout, stderr = capsys.readouterr()
    assert code == 0, stderr
    report = json.loads(stdout)
    assert report["items"] == 8 and report["labelled"] == {"context_precision": 8}
    assert report["skipped"] == {f"{NAME}: annotators split evenly": 1,
                                 f"{NAME}: no annotation by the annotator kinds asked for": 1}
    judged = {j["judge"]: j for j in report["judges"]}
    on_spans = judged["recorded"]["agreements"]["context_precision"]
    assert on_spans["units"] == 8 and on_spans["accuracy"] == 6 / 8
    yes = sum(1 for label in people.values() if label == "pass")
    assert on_spans["human_yes"] == yes
    assert judged["recorded"]["model"] == (spans[ids[0]].attributes or {})["ragtrace.judge.model"]
    # The samples read back from Phoenix are the ones scored live: the same judge gives the same verdicts.
    again = judged["local"]["agreements"]["context_precision"]
    assert again["confusion"] == on_spans["confusion"] and again["auc"] == on_spans["auc"], stdout
    assert {(d["item"], d["human"]) for d in on_spans["disagreements"]} == {
        (s, people[s] == "pass") for s in ids[6:8]}


def test_human_label_is_the_majority_of_people() -> None:
    def note(label: Any = None, score: Any = None, kind: str = "HUMAN") -> dict[str, Any]:
        return {"annotator_kind": kind, "result": {"label": label, "score": score}}

    people = frozenset({"HUMAN"})
    assert human_label([note("pass"), note("good"), note("fail")], people) == (True, None)
    assert human_label([note(score=0.2)], people) == (False, None)
    assert human_label([note("pass"), note("no")], people)[0] is None
    assert human_label([note("pass", kind="LLM")], people)[0] is None
    assert human_label([note("pass", kind="LLM")], frozenset()) == (True, None)
    assert human_label([note("meh")], people) == (None, "annotation neither a yes/no label nor a score in [0, 1]")


def test_a_root_span_as_phoenix_writes_it_is_read() -> None:
    """Phoenix writes a root span's parent as null: the span is kept (its attributes hold the ground truth)."""
    root = {"trace_id": "0af7651916cd43dd8448eb211c80319c", "span_id": "b7ad6b7169203331", "parent_span_id": None,
            "name": "rag.request", "start_time_unix_nano": 1, "end_time_unix_nano": 2, "status": {"code": 0,
            "message": None}, "attributes": [{"key": "ragtrace.ground_truth", "value": {"string_value": "42",
                                                                                         "int_value": None}}]}
    (span,) = readable_spans([root])
    assert span.parent is None and (span.attributes or {})["ragtrace.ground_truth"] == "42"
