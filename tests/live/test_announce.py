"""ragtrace says once at setup what it will do, and at shutdown why it scored nothing (issue 30, items 1, 6)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import ragtrace
from ragtrace.live.announce import nothing_scored_line

APP = textwrap.dedent(
    """
    import io
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter
    from opentelemetry.sdk.trace.id_generator import RandomIdGenerator
    import ragtrace
    from ragtrace.live.sampling import TRACE_ID_MASK

    class Unsampled(RandomIdGenerator):
        # Trace ids no rate below 1 samples: the two traces are 'not sampled' by rule, not by chance.
        def generate_trace_id(self):
            return super().generate_trace_id() | TRACE_ID_MASK

    provider = TracerProvider(id_generator=Unsampled())
    provider.add_span_processor(BatchSpanProcessor(ConsoleSpanExporter(out=io.StringIO())))
    ragtrace.install(provider, judge="local", worker="thread", drift=False)
    tracer = provider.get_tracer("app")
    for question in ("first?", "second?"):
        with tracer.start_as_current_span("request"):
            pass
    provider.shutdown()
    """
)


def test_a_two_trace_app_at_the_default_rate_is_told_why_nothing_was_scored(tmp_path: Path) -> None:
    """Item 1: install(provider, judge="local") on a 2-trace app scored nothing, and nothing said so. The app
    configures no logging: what ragtrace says reaches stderr all the same."""
    app = tmp_path / "app.py"
    app.write_text(APP)
    done = subprocess.run([sys.executable, str(app)], capture_output=True, text=True, timeout=120,
                          cwd=Path(__file__).resolve().parents[2])
    assert done.returncode == 0, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.startswith("ragtrace:")]
    assert len(lines) == 2, done.stderr
    setup, shutdown = lines
    for said in ("scoring 10% of traces (sample_rate=0.1)", "judge local/", "prompt local-v", "worker=thread",
                 "placement=exporter", "exported to ConsoleSpanExporter"):
        assert said in setup, setup
    assert "scored nothing: 2 not sampled" in shutdown and "sample_rate=1.0 scores every trace" in shutdown
    assert "{'not_sampled': 2}" in shutdown


def test_an_app_logging_at_the_default_warning_level_still_hears_that_nothing_was_scored(tmp_path: Path) -> None:
    """`logging.basicConfig()` leaves the root at WARNING: the setup line (INFO) is quiet there, the shutdown
    line says a problem to fix and is a warning."""
    app = tmp_path / "app.py"
    app.write_text("import logging\nlogging.basicConfig()\n" + APP)
    done = subprocess.run([sys.executable, str(app)], capture_output=True, text=True, timeout=120,
                          cwd=Path(__file__).resolve().parents[2])
    assert done.returncode == 0, done.stderr
    said = [line for line in done.stderr.splitlines() if "ragtrace:" in line]
    assert len(said) == 1 and said[0].startswith("WARNING:ragtrace:ragtrace: scored nothing: 2 not sampled"), said


def test_setup_is_said_once_on_the_ragtrace_logger(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level("INFO", logger="ragtrace")
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(InMemorySpanExporter()))
    ragtrace.install(provider, judge="local", worker="thread", sample_rate=1.0, drift=False, placement="processor")
    said = [r.getMessage() for r in caplog.records if r.getMessage().startswith("ragtrace: scoring")]
    assert len(said) == 1 and "placement=processor" in said[0] and "InMemorySpanExporter" in said[0], said
    with provider.get_tracer("t").start_as_current_span("no rag here"):
        pass
    provider.shutdown()
    why = [r.getMessage() for r in caplog.records if "scored nothing" in r.getMessage()]
    assert why == ["ragtrace: scored nothing: 1 no retrieval span ragtrace reads (`ragtrace explain FILE` on an "
                   "export says span by span why) (decisions {'not_rag': 1})"], why


def test_nothing_is_said_at_shutdown_when_something_was_scored() -> None:
    assert nothing_scored_line({"scored": 1, "not_sampled": 9}, 0.1) is None


@pytest.mark.parametrize(("rate", "share"), [
    (0.1, "sample_rate=0.1: about 1 trace in 10 is scored;"),
    (0.0, "sample_rate=0: no trace is scored;"),  # it said "about 1 trace in none"
])
def test_the_shutdown_line_says_what_the_sample_rate_scores(rate: float, share: str) -> None:
    line = nothing_scored_line({"not_sampled": 9}, rate)
    assert line is not None and line.startswith(f"ragtrace: scored nothing: 9 not sampled ({share}"), line


def test_install_on_a_provider_without_processors_says_where_spans_will_go(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Item 6: install() before add_span_processor quietly built a gRPC exporter to localhost:4317."""
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9")
    provider = TracerProvider()
    installed = ragtrace.install(provider, judge="local", worker="thread", drift=False)
    try:
        warned = [r for r in caplog.records if r.levelname == "WARNING" and "no span processor" in r.getMessage()]
        assert len(warned) == 1
        message = warned[0].getMessage()
        assert "OTLPSpanExporter 127.0.0.1:9" in message and "before install()" in message, message
    finally:
        assert installed is not None
        provider.shutdown()
