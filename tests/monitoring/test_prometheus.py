"""The shipped Prometheus files against a real Prometheus: promtool accepts them, and an alert fires.

The end-to-end test runs this file as a script: an app process scores RAG traces through a real
RagScoringSpanProcessor (scripted judge, low scores) and exposes ragtrace's metrics with
opentelemetry-exporter-prometheus on 127.0.0.1. Prometheus (own config, tmp storage, free port) scrapes it
every second and evaluates the SHIPPED alerts.yml; only the test copy's `for:` durations are shortened.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from ragtrace.judges import judge_id
from tests.live.fakes import LenientJudge
from tests.servers.collector import free_port, get_json, get_text
from tests.servers.processes import stop

ROOT = Path(__file__).resolve().parents[2]
COLLECTOR = ROOT / "collector"
ALERTS = COLLECTOR / "alerts.yml"
PROM_CONFIG = COLLECTOR / "prometheus.yml"

needs_promtool = pytest.mark.skipif(
    shutil.which("promtool") is None, reason="promtool absent (apt-get install prometheus)"
)
needs_prometheus = pytest.mark.skipif(
    shutil.which("prometheus") is None, reason="prometheus binary absent (apt-get install prometheus)"
)


@needs_promtool
def test_promtool_accepts_the_shipped_config_and_rules() -> None:
    rules = subprocess.run(["promtool", "check", "rules", str(ALERTS)], capture_output=True, text=True, timeout=30)
    assert rules.returncode == 0, rules.stdout + rules.stderr
    config = subprocess.run(
        ["promtool", "check", "config", str(PROM_CONFIG)], capture_output=True, text=True, timeout=30
    )
    assert config.returncode == 0, config.stdout + config.stderr


# --- the app process ---------------------------------------------------------------------------------


def _app(port_file: Path, seconds: float) -> None:
    """Score low-quality RAG traces for `seconds`, exposing metrics on a free port written to `port_file`."""
    from opentelemetry.exporter.prometheus import PrometheusMetricReader
    from opentelemetry.sdk.metrics import MeterProvider
    from prometheus_client import start_http_server

    from ragtrace.live.drift import DriftConfig, DriftMetrics, DriftMonitor
    from ragtrace.live.drift.canary import Canary, CanaryItem
    from ragtrace.live.processor import RagScoringSpanProcessor
    from ragtrace.live.sampling import Sampler
    from ragtrace.scoring import ContextPrecision, RagSample
    from tests.live.fakes import CountingProcessor, LenientJudge, ScriptedJudge, provider_with, rag_trace

    meter_provider = MeterProvider(metric_readers=[PrometheusMetricReader()])
    server, _thread = start_http_server(0, addr="127.0.0.1")
    # People's labels: the context that says "good" is the useful one. The scripted judge agrees (1.0).
    sample = RagSample(query="q", contexts=("good doc", "bad doc", "other doc"), response="r")
    labelled = [CanaryItem(sample, (True, False, False))] * 4
    canary = Canary(ScriptedJudge(), labelled, scorers=[ContextPrecision()])
    monitor = DriftMonitor(DriftConfig(baseline_size=20, window=20, min_recent=10), interval=0.5,
                           meter_provider=meter_provider, canary=canary, canary_interval=1.0).start()
    processor = RagScoringSpanProcessor(
        CountingProcessor(), judge=ScriptedJudge(), scorers=[ContextPrecision()], sampler=Sampler(1.0),
        metrics=DriftMetrics(meter_provider, monitor=monitor), tick_interval=0.01,
    )
    tracer = provider_with(processor).get_tracer("app")
    tmp = port_file.with_suffix(".tmp")
    tmp.write_text(str(server.server_port))
    tmp.replace(port_file)
    deadline = time.monotonic() + seconds
    i = 0
    while time.monotonic() < deadline:
        # good for a while (a baseline), then mostly bad: the useful document sinks to rank 3 (AP 1/3, fail)
        bad = i > 60 and i % 5 != 0
        if i == 60:  # the judge is swapped for one that finds every context useful: the canary drops to 1/3
            canary.judge = LenientJudge()
        docs = ("bad doc", "bad doc", "good doc") if bad else ("good doc", "bad doc")
        rag_trace(tracer, "fast: what is good?", docs)
        i += 1
        time.sleep(0.02)
    processor.shutdown()
    monitor.shutdown()
    server.shutdown()


@pytest.fixture
def app(tmp_path: Path) -> Any:
    port_file = tmp_path / "app.port"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    process = subprocess.Popen(
        [sys.executable, __file__, "--app", str(port_file), "90"], env=env, cwd=ROOT,
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 30
        while not port_file.exists():
            if process.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"app did not start: {process.stderr.read().decode() if process.stderr else ''}")
            time.sleep(0.05)
        yield int(port_file.read_text())
    finally:
        stop(process)


def _scrape_names(port: int, want: set[str], timeout: float = 30.0) -> set[str]:
    """Sample and label names in the app's exposition, once every wanted one is there (or the timeout passes)."""
    deadline = time.monotonic() + timeout
    names: set[str] = set()
    while time.monotonic() < deadline:
        text = get_text(f"http://127.0.0.1:{port}/metrics", timeout=2.0)
        samples = [line for line in text.splitlines() if line and line[0] != "#"]
        names = {line.split("{", 1)[0].split(" ", 1)[0] for line in samples}
        names.update(label for line in samples for label in re.findall(r'[{,](\w+)="', line))
        if want <= names:
            break
        time.sleep(0.3)
    return names


def _rule_metric_names() -> set[str]:
    """Every raw metric name (not a recording rule, which has a colon) used in the shipped rules."""
    text = ALERTS.read_text()
    exprs = re.findall(r"expr:\s*(\|[^\n]*\n(?:\s{10,}.*\n)+|.*)", text)
    names = set()
    for expr in exprs:
        names.update(re.findall(r"(?<![\w:{$.])(ragtrace_[a-zA-Z_]+)\b(?![\w:])", expr))
    return names


def test_rule_names_are_what_the_exporter_exposes(app: int) -> None:
    """Every metric and label the rules query exists in a real opentelemetry-exporter-prometheus scrape."""
    used = _rule_metric_names()
    assert {"ragtrace_evaluation_score_count", "ragtrace_evaluation_decisions_total",
            "ragtrace_drift_detected", "ragtrace_judge_canary_agreement", "ragtrace_judge_id"} <= used
    names = _scrape_names(app, used)
    assert used <= names, f"not exposed: {sorted(used - names)}; exposed: {sorted(n for n in names if 'ragtrace' in n)}"


# --- Prometheus --------------------------------------------------------------------------------------


def _test_rules(tmp_path: Path) -> Path:
    """The shipped rules with every `for:` shortened to 1s (the only change)."""
    text = re.sub(r"(?m)^(\s+for:\s*)\S+", r"\g<1>1s", ALERTS.read_text())
    path = tmp_path / "alerts.yml"
    path.write_text(text)
    return path


@needs_prometheus
def test_low_scores_fire_the_failing_share_and_drift_alerts(app: int, tmp_path: Path) -> None:
    rules = _test_rules(tmp_path)
    port = free_port()
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
        f"rule_files:\n  - {rules}\n"
        f"scrape_configs:\n  - job_name: app\n    static_configs:\n      - targets: ['127.0.0.1:{app}']\n"
    )
    log = (tmp_path / "prometheus.log").open("wb")
    process = subprocess.Popen(
        ["prometheus", f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'data'}",
         f"--web.listen-address=127.0.0.1:{port}", "--storage.tsdb.retention.time=1h"],
        stdout=log, stderr=subprocess.STDOUT,
    )
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 75
        alerts: list[dict[str, Any]] = []
        while time.monotonic() < deadline:
            assert process.poll() is None, (tmp_path / "prometheus.log").read_text()[-2000:]
            try:
                alerts = get_json(f"{base}/api/v1/alerts", timeout=2.0)["data"]["alerts"]
            except OSError:
                alerts = []
            firing_now = {a["labels"]["alertname"] for a in alerts if a["state"] == "firing"}
            if {"RagtraceHighFailingShare", "RagtraceDriftDetected", "RagtraceJudgeCanaryDrop"} <= firing_now:
                break
            time.sleep(0.5)
        firing = [a for a in alerts if a["state"] == "firing"]
        names = {a["labels"]["alertname"] for a in firing}
        assert "RagtraceHighFailingShare" in names, f"alerts: {alerts}"
        failing = next(a for a in firing if a["labels"]["alertname"] == "RagtraceHighFailingShare")
        assert failing["labels"]["gen_ai_evaluation_name"] == "context_precision"
        assert float(failing["value"]) > 0.3
        assert "RagtraceDriftDetected" in names, f"alerts: {alerts}"  # the drift gauge, through the same path
        drift = next(a for a in firing if a["labels"]["alertname"] == "RagtraceDriftDetected")
        # The scores moved because the judge was swapped, and the canary moved with them: the alert says so.
        assert drift["labels"]["ragtrace_drift_cause"] == "judge", f"alerts: {alerts}"
        assert "cause: judge" in drift["annotations"]["summary"]
        # The canary judged by the swapped judge agrees with people on a third of the labels: the drop alert
        # fires, naming the new judge's id.
        canary_drop = next((a for a in firing if a["labels"]["alertname"] == "RagtraceJudgeCanaryDrop"), None)
        assert canary_drop is not None, f"alerts: {alerts}"
        assert canary_drop["labels"]["ragtrace_judge_id"] == judge_id(LenientJudge())
        assert float(canary_drop["value"]) == pytest.approx(1 / 3)
        assert "RagtraceQueueFull" not in names and "RagtraceJudgeErrors" not in names
    finally:
        stop(process)
        log.close()


if __name__ == "__main__" and len(sys.argv) == 4 and sys.argv[1] == "--app":
    _app(Path(sys.argv[2]), float(sys.argv[3]))
