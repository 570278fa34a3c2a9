"""Zero-code setup: `opentelemetry-instrument python examples/zero_code_app.py` with only environment
variables; ragtrace's `opentelemetry_post_instrument` entry point installs it in front of the exporter the
SDK configurator built, and scored spans (enrich mode) and decision metrics reach a real OTLP receiver."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from importlib.metadata import entry_points
from pathlib import Path

import pytest

from tests.servers.otlp import OtlpReceiver

ROOT = Path(__file__).resolve().parents[2]
APP = ROOT / "examples" / "zero_code_app.py"
GROUP = "opentelemetry_post_instrument"
ENTRY_POINT = "ragtrace = ragtrace.live.setup:auto_install"


def _installed() -> bool:
    return any(ep.value == "ragtrace.live.setup:auto_install" for ep in entry_points(group=GROUP))


def _entry_point_dir(tmp_path: Path) -> Path:
    """A dist-info declaring the same entry point as pyproject.toml, for a checkout that is not pip-installed."""
    info = tmp_path / "ragtrace_entry_point-0.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: ragtrace-entry-point\nVersion: 0.0\n")
    (info / "entry_points.txt").write_text(f"[{GROUP}]\n{ENTRY_POINT}\n")
    return tmp_path


def _run(receiver: OtlpReceiver, tmp_path: Path, **extra: str) -> subprocess.CompletedProcess[str]:
    launcher = shutil.which("opentelemetry-instrument")
    if launcher is None:
        pytest.skip("opentelemetry-instrument (opentelemetry-instrumentation) is not installed")
    paths = [str(ROOT)] + ([] if _installed() else [str(_entry_point_dir(tmp_path))])
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "RAGTRACE_"))},
        "PYTHONPATH": os.pathsep.join(paths),
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        "RAGTRACE_ENABLED": "true",
        "RAGTRACE_JUDGE": "local",
        "RAGTRACE_SAMPLE_RATE": "1",
        "RAGTRACE_MODE": "enrich",
        "OTEL_SERVICE_NAME": "zero-code-app",
        "OTEL_TRACES_EXPORTER": "otlp",
        "OTEL_METRICS_EXPORTER": "otlp",
        "OTEL_LOGS_EXPORTER": "none",
        "OTEL_METRIC_EXPORT_INTERVAL": "200",
        "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.http_endpoint,
        "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
        # only what the app needs: loading every installed instrumentor (LangChain, chromadb ...) is slow
        "OTEL_PYTHON_DISABLED_INSTRUMENTATIONS": "*",
        **extra,
    }
    return subprocess.run(
        [launcher, sys.executable, str(APP)], env=env, capture_output=True, text=True, timeout=90, cwd=ROOT
    )


@pytest.mark.usefixtures("local_judge")  # the subprocess loads its own; this skips where it cannot
def test_zero_code_scores_arrive_over_otlp(otlp_receiver: OtlpReceiver, tmp_path: Path) -> None:
    done = _run(otlp_receiver, tmp_path)
    assert done.returncode == 0, done.stderr
    printed = json.loads(done.stdout.strip().splitlines()[-1])
    assert printed["ragtrace"] is True, done.stderr
    assert printed["decisions"] == {"scored": 4}  # 2 traces x (precision, relevance)

    spans = otlp_receiver.wait_for_spans(6)  # 2 x (root, retrieval, generation), each once
    retrievals = [s for s in spans if s.name == "retrieval wiki"]
    assert len(retrievals) == 2 and len(spans) == 6
    for span in retrievals:
        attrs = span.attributes
        assert attrs["ragtrace.eval.status"] == "scored"
        assert attrs["ragtrace.judge.model"].startswith("local/")
        assert 0.0 <= attrs["ragtrace.context_precision.score"] <= 1.0
        assert attrs["ragtrace.context_relevance.label"] in ("pass", "fail")
        assert span.service_name == "zero-code-app"
        assert {e["gen_ai.evaluation.name"] for e in span.event("gen_ai.evaluation.result")} == {
            "context_precision", "context_relevance",
        }
    decisions = otlp_receiver.wait_for_metric(
        "ragtrace.evaluation.decisions", predicate=lambda m: m.point_where({"decision": "scored"}) is not None
    )
    assert decisions.point_where({"decision": "scored"}).value == 4  # type: ignore[union-attr]


def test_zero_code_off_unless_enabled(otlp_receiver: OtlpReceiver, tmp_path: Path) -> None:
    """The hook runs in every auto-instrumented app once ragtrace is installed: it is opt-in."""
    done = _run(otlp_receiver, tmp_path, RAGTRACE_ENABLED="")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1])["ragtrace"] is False
    spans = otlp_receiver.wait_for_spans(6)
    assert not any(k.startswith("ragtrace.") for s in spans for k in s.attributes)


def test_entry_point_is_installed() -> None:
    """The packaging half: pyproject.toml declares the hook and the checkout is pip-installed."""
    if not _installed():
        pytest.skip(
            f"no ragtrace entry point in group {GROUP!r} of the installed metadata: add "
            f"`[project.entry-points.{GROUP}]` `{ENTRY_POINT}` to pyproject.toml and `pip install -e .` "
            "(the subprocess tests above register it through a temporary dist-info meanwhile)"
        )
