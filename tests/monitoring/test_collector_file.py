"""The Collector's file exporter, as `collector/otelcol-file.yaml` ships it: what it writes is what `ragtrace
explain` and `ragtrace replay` read (issue 30, item 2). A real Collector of the ragtrace distribution receives
an app's trace over OTLP/gRPC and writes it; the replayed scores equal `evaluate()` on the same sample."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

import ragtrace
from ragtrace.cli.main import main
from tests.live.fakes import rag_trace
from tests.monitoring.test_deployment import _shipped, deployed
from tests.servers.collector import Binaries, Server, free_port, servers, wait_for
from tests.servers.processes import wait_listening

QUERY, DOCS, ANSWER = "what is good?", ("good doc: what is good is kind", "noise about weather"), "kind is good"


def test_explain_and_replay_read_what_the_collector_file_exporter_wrote(
    collector_binaries: Binaries, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    grpc, http = free_port(), free_port()
    out = tmp_path / "traces.jsonl"
    config = deployed(_shipped("otelcol-file.yaml"), {
        "receivers|otlp|protocols|grpc|endpoint": f"127.0.0.1:{grpc}",
        "receivers|otlp|protocols|http|endpoint": f"127.0.0.1:{http}",
        "exporters|file|path": str(out),
    }, tmp_path / "otelcol-file.yaml")
    with servers() as started:
        collector = Server("otelcol", [str(collector_binaries.otelcol), f"--config={config}"], tmp_path)
        started.append(collector)
        wait_listening(grpc, collector.process, timeout=60)
        provider = TracerProvider(resource=Resource.create({"service.name": "rag-app"}))
        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=f"http://127.0.0.1:{grpc}",
                                                                         insecure=True)))
        rag_trace(provider.get_tracer("rag-app"), query=QUERY, docs=DOCS, answer=ANSWER, plain=1)
        assert provider.force_flush(30_000)
        provider.shutdown()
        wait_for("the file exporter's line", lambda: (out.exists() and out.read_text().strip()) or None, timeout=30)
        collector.stop()  # the file is whole once the Collector has stopped

    assert main(["explain", str(out)]) == 0
    explained = capsys.readouterr().out
    assert "retrieval" in explained and QUERY in explained, explained

    assert main(["replay", str(out), "--judge", "local", "--json", "--quiet"]) == 0
    replayed = json.loads(capsys.readouterr().out)["scorers"]
    expected = ragtrace.evaluate([{"query": QUERY, "contexts": list(DOCS), "response": ANSWER}], judge="local")
    for scorer in ("context_precision", "context_relevance"):
        assert replayed[scorer]["count"] == 1, replayed
        assert replayed[scorer]["mean"] == pytest.approx(expected.summaries[scorer].mean), (scorer, replayed)
