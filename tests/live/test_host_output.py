"""The host app's own stdout and stderr stay its own: a failing LLM judge prints no litellm banner and
leaves no "Event loop is closed" behind at exit, in either worker."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from tests.servers.judge import Status

ROOT = Path(__file__).resolve().parents[2]

APP = textwrap.dedent(
    """
    import sys
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    import ragtrace
    from ragtrace.instrument import generation_span, retrieval_span

    provider = TracerProvider()
    exporter = InMemorySpanExporter()
    provider.add_span_processor(BatchSpanProcessor(exporter))
    ragtrace.install(provider, judge="openai/judge-test", sample_rate=1.0, worker=sys.argv[1])
    tracer = provider.get_tracer("app")
    for _ in range(3):
        with tracer.start_as_current_span("request"):
            with retrieval_span("what is x?", tracer=tracer) as retrieval:
                retrieval.record(["x is a letter", "y is another"])
            with generation_span(tracer=tracer) as generation:
                generation.record("x is a letter.")
    provider.force_flush(30_000)
    provider.shutdown()
    statuses = {s.attributes.get("ragtrace.eval.error") for s in exporter.get_finished_spans()
                if s.attributes.get("gen_ai.operation.name") == "retrieval"}
    print("app done", sorted(statuses))
    """
)


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])  # nothing listens there once the probe is closed


@pytest.mark.parametrize("worker", ["thread", "process"])
@pytest.mark.parametrize("failure", ["unreachable", "server_error", "no_key"])
def test_a_failing_llm_judge_leaves_the_hosts_output_alone(
    tmp_path: Path, judge_server: Any, worker: str, failure: str
) -> None:
    if failure == "unreachable":
        api_base, expected = f"http://127.0.0.1:{_closed_port()}/v1", "judge_unavailable"
    else:
        judge_server.default = Status(400, "this model does not take that parameter")
        api_base, expected = judge_server.url + "/v1", "judge_error"
    app = tmp_path / "app.py"
    app.write_text(APP)
    env = {
        **os.environ, "OPENAI_API_KEY": "sk-test", "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        "RAGTRACE_JUDGE_API_BASE": api_base, "RAGTRACE_JUDGE_MAX_RETRIES": "0",
    }
    if failure == "no_key":  # litellm's own "Missing credentials" error, raised before any request
        del env["OPENAI_API_KEY"]
        expected = "judge_auth"
    proc = subprocess.run(
        [sys.executable, str(app), worker], capture_output=True, text=True, timeout=120, cwd=tmp_path, env=env
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == f"app done ['{expected}']\n"  # the app's own line, nothing of litellm's
    for noise in ("Event loop is closed", "Give Feedback", "Traceback", "LiteLLM"):
        assert noise not in proc.stderr, proc.stderr
