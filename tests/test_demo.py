"""The README's main job: the demo app under live scoring with the local judge, exported over real OTLP."""

from __future__ import annotations

import io
from typing import Literal

import pytest

from ragtrace.demo.run import run_demo
from tests.servers.otlp import OtlpReceiver


@pytest.mark.parametrize("worker", ["thread", "process"])
def test_demo_scores_live_traces_and_exports_them(
    otlp_receiver: OtlpReceiver, monkeypatch: pytest.MonkeyPatch, worker: Literal["thread", "process"]
) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", otlp_receiver.grpc_endpoint)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
    out = io.StringIO()
    assert run_demo(requests=3, out=out, worker=worker) == 0
    text = out.getvalue()
    assert "3 traces scored" in text, text
    rows = [line for line in text.splitlines()[1:] if "  " in line and not line.startswith(("3 traces", "spans"))]
    assert len(rows) == 3, text
    spans = otlp_receiver.wait_for_spans(9)  # root, retrieval and generation per request
    retrievals = [s for s in spans if s.attributes.get("gen_ai.operation.name") == "retrieval"]
    assert len(retrievals) == 3
    for span in retrievals:
        assert span.attributes["ragtrace.eval.status"] == "scored"
        assert 0.0 <= span.attributes["ragtrace.context_precision.score"] <= 1.0
        assert span.attributes["ragtrace.context_relevance.label"] in ("pass", "fail")
        events = span.event("gen_ai.evaluation.result")
        # The first questions are golden ones (ground truth on the root span): all three scorers ran.
        assert sorted(e["gen_ai.evaluation.name"] for e in events) == [
            "context_precision", "context_recall", "context_relevance",
        ]
