"""The shipped deployment, run for real on loopback: collector/otelcol.yaml in ragtrace's Collector build,
two `ragtrace serve` gateways on the local judge, Jaeger v2 (in-memory), Prometheus with the shipped rules.

    app --OTLP--> Collector [traces/in, load_balancing by trace id] --> gateway a | gateway b
    gateways --OTLP--> Collector [traces/scored: tail_sampling] --> Jaeger, "Tempo" (an OTLP sink here)
                                 [signal_to_metrics, gateway metrics] --> :prometheus <-- Prometheus + alerts.yml

The configs are the shipped files with only their addresses changed (ports, the resolver's gateways, the
exporters' endpoints, the queue's directory; `deployed` checks that nothing else differs); the test copy
of alerts.yml has its `for:` durations shortened, and Prometheus scrapes every second.

What a trace should become is known before it is sent: each is built from a template (a demo question
with its answer as the document, or with passages about other subjects) that the same local judge scored
in this process, used only when every score is far from the threshold (the gateways then agree).
Phase 1 sends traces one span per request, one trace at a time, and reads
both gateways' counters after each, so every trace is seen to reach exactly one gateway. Phase 2 sends
failing traces in batches while gateway b is SIGKILLed and restarted on the same spool.
"""

from __future__ import annotations

import copy
import json
import math
import os
import random
import re
import shlex
import shutil
import sys
import threading
import time
import urllib.parse
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.live.fakes import open_rag_trace
from tests.servers.collector import Binaries, Server, free_port, get_json, get_text, servers, wait_for
from tests.servers.otlp import OtlpReceiver

yaml = pytest.importorskip("yaml", reason="PyYAML is needed to read the shipped configs")

ROOT = Path(__file__).resolve().parents[2]
COLLECTOR = ROOT / "collector"
DEMO = ROOT / "ragtrace" / "demo"
SCORERS = ("context_precision", "context_relevance", "context_recall")
APP_SERVICE = "rag-app"  # the service the cheatsheet's Jaeger queries name
SPANS_PER_TRACE = 4  # root, retrieve, chat, one plain step (tests.live.fakes.open_rag_trace)
CLEAR_PASS, CLEAR_FAIL = 0.7, 0.3  # a template is used when all its scores are this far from the threshold
SAMPLED_SHARE = 0.10  # the shipped probabilistic policy's sampling_percentage / 100
PHASE1_TRACES = 220
PHASE2_TRACES = 90
EVAL_FAILURES = (("error", "judge_error"), ("timeout", "judge_timeout")) * 4  # traces a gateway could not score

pytestmark = pytest.mark.skipif(shutil.which("prometheus") is None,
                                reason="prometheus binary absent (apt-get install prometheus)")


# ------------------------------------------------------------------------------------- the configs


def _leaves(tree: Any, path: tuple[str, ...] = ()) -> dict[tuple[str, ...], Any]:
    if isinstance(tree, dict):
        return {k: v for key, value in tree.items() for k, v in _leaves(value, (*path, str(key))).items()}
    if isinstance(tree, list):
        return {k: v for i, value in enumerate(tree) for k, v in _leaves(value, (*path, str(i))).items()}
    return {path: tree}


# Addresses (and, for Prometheus, the rules' path and the 1 s intervals): the only keys a test copy changes.
ADDRESS_KEYS = {"endpoint", "directory", "path", "host", "port", "resolver", "targets", "rule_files",
                "scrape_interval", "evaluation_interval"}


def deployed(shipped: dict[str, Any], changed: dict[str, Any], out: Path) -> Path:
    """`shipped` with the values at the `changed` paths ("a.b.c": value) replaced, written to `out`.

    Only addresses may change (ADDRESS_KEYS): every differing leaf must lie under one, so the file that
    runs is the shipped one."""
    config = copy.deepcopy(shipped)
    for dotted, value in changed.items():
        *parents, last = dotted.split("|")
        node = config
        for key in parents:
            node = node[int(key)] if isinstance(node, list) else node[key]
        if isinstance(node, list):
            node[int(last)] = value
        else:
            node[last] = value
    before, after = _leaves(shipped), _leaves(config)
    differing = {p for p in before.keys() | after.keys() if before.get(p) != after.get(p)}
    assert all(ADDRESS_KEYS & set(p) for p in differing), f"not an address: {differing}"
    out.write_text(yaml.safe_dump(config, sort_keys=False))
    return out


def _shipped(name: str) -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((COLLECTOR / name).read_text())
    return data


# ------------------------------------------------------------------------------------- the traffic


@dataclass(frozen=True)
class Template:
    query: str
    docs: tuple[str, ...]
    answer: str
    ground_truth: str


def templates(n_questions: int = 6) -> list[Template]:
    """Good: the question's answer is the document. Bad: two passages sharing no content word with it."""
    questions = [json.loads(line) for line in (DEMO / "questions.jsonl").read_text().splitlines()][:n_questions]
    corpus = [json.loads(line)["text"] for line in (DEMO / "corpus.jsonl").read_text().splitlines()]

    def words(text: str) -> set[str]:
        return {w for w in re.findall(r"[a-z]+", text.lower()) if len(w) > 3}

    out = []
    for q in questions:
        truth = q["ground_truth"]
        out.append(Template(q["query"], (truth,), truth, truth))
        unrelated = [d for d in corpus if not words(d) & words(q["query"] + " " + truth)][:2]
        out.append(Template(q["query"], tuple(unrelated), "I do not know.", truth))
    return out


def judged_in_process(items: list[Template]) -> list[dict[str, Any]]:
    """Each template's retrieval span attributes (scores, labels), from the local judge the gateways run, in
    this process."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    import ragtrace
    from ragtrace.live import RagtraceSettings

    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    ragtrace.install(provider, judge="local", settings=RagtraceSettings(sample_rate=1.0), drift=False)
    tracer = provider.get_tracer("templates")
    trace_ids = [open_rag_trace(tracer, t.query, t.docs, t.answer, ground_truth=t.ground_truth,
                                end_root=True)[0].get_span_context().trace_id for t in items]

    def scored() -> list[dict[str, Any]] | None:
        provider.force_flush(10_000)
        by_trace = {s.context.trace_id: dict(s.attributes or {}) for s in memory.get_finished_spans()
                    if s.name == "retrieve" and s.context is not None}
        return [by_trace[i] for i in trace_ids] if len(by_trace) == len(items) else None

    labels = wait_for("the templates scored in process", scored, timeout=120, interval=0.5)
    provider.shutdown()
    return labels


@dataclass
class Sent:
    trace_id: str  # 32 hex digits, as Jaeger prints it
    template: int
    error: bool  # the app's root span ended with status ERROR
    phase: int
    gateway: str | None = None  # which gateway's counter rose (phase 1)


def _send_trace(tracer: Any, t: Template, error: bool) -> str:
    from opentelemetry.trace import Status, StatusCode

    root, _ids = open_rag_trace(tracer, t.query, t.docs, t.answer, ground_truth=t.ground_truth)
    if error:
        root.set_status(Status(StatusCode.ERROR, "upstream failed"))
    root.end()
    return f"{root.get_span_context().trace_id:032x}"


def _send_unscorable_trace(tracer: Any, status: str, error: str) -> str:
    """A trace as a gateway forwards it when its judge failed: a retrieval with `ragtrace.eval.status` and no
    score. The local judge never fails, so these go straight to the Collector's scored receiver, where the
    gateways' output arrives, to show the keep-evaluation-errors policy at work."""
    with tracer.start_as_current_span("rag-request") as root, tracer.start_as_current_span("retrieve") as retrieval:
        retrieval.set_attributes({"ragtrace.eval.status": status, "ragtrace.eval.error": error})
    return f"{root.get_span_context().trace_id:032x}"


def app_provider(endpoint: str, batch: bool) -> Any:
    """The app: the SDK's OTLP gRPC exporter to the Collector, each span its own request or batched."""
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor

    provider = TracerProvider(resource=Resource.create({"service.name": APP_SERVICE}))
    exporter = OTLPSpanExporter(endpoint=endpoint, insecure=True)
    provider.add_span_processor(
        BatchSpanProcessor(exporter, schedule_delay_millis=100) if batch else SimpleSpanProcessor(exporter)
    )
    return provider


# ------------------------------------------------------------------------------------- the deployment


@dataclass
class Gateway:
    name: str
    grpc: int
    http: int
    spool: Path
    server: Server | None = None

    @property
    def health_url(self) -> str:
        return f"http://127.0.0.1:{self.http}/healthz"

    def health(self) -> dict[str, Any]:
        data: dict[str, Any] = get_json(self.health_url)
        return data


@dataclass
class Deployment:
    tmp: Path
    ports: dict[str, int]
    gateways: list[Gateway]
    started: list[Server]
    tempo: OtlpReceiver
    scored_endpoint: str = ""
    notes: dict[str, Any] = field(default_factory=dict)

    def url(self, port: str, path: str) -> str:
        return f"http://127.0.0.1:{self.ports[port]}{path}"

    def start_gateway(self, gateway: Gateway) -> None:
        env = {
            **os.environ, "PYTHONPATH": str(ROOT), "OTEL_SERVICE_NAME": "ragtrace-gateway",
            # one series per replica in the Collector's Prometheus exporter (else the replicas overwrite)
            "OTEL_RESOURCE_ATTRIBUTES": f"service.instance.id={gateway.name}",
            "OTEL_METRIC_EXPORT_INTERVAL": "1000", "LITELLM_LOCAL_MODEL_COST_MAP": "True",
            "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false",
        }
        argv = [
            sys.executable, "-m", "ragtrace", "serve", "--judge", "local", "--sample-rate", "1.0",
            "--grpc-port", str(gateway.grpc), "--http-port", str(gateway.http),
            "--exporter-endpoint", self.scored_endpoint, "--spool-dir", str(gateway.spool),
            "--stats-interval", "5",
        ]
        gateway.server = Server(f"gateway-{gateway.name}", argv, self.tmp, env)
        self.started.append(gateway.server)
        gateway.server.wait_ready(gateway.health_url, timeout=90)


def start_deployment(binaries: Binaries, tmp: Path, started: list[Server], tempo: OtlpReceiver) -> Deployment:
    names = ["in_grpc", "in_http", "scored", "prom_exporter", "health", "telemetry", "jaeger_otlp",
             "jaeger_query", "jaeger_query_grpc", "jaeger_health", "prometheus"]
    ports = {name: free_port() for name in names}
    gateways = [Gateway(n, free_port(), free_port(), tmp / f"spool-{n}") for n in ("a", "b")]
    d = Deployment(tmp, ports, gateways, started, tempo, scored_endpoint=f"http://127.0.0.1:{ports['scored']}")
    loop = "127.0.0.1:{}".format

    jaeger = deployed(_shipped("jaeger.yaml"), {
        "receivers|otlp|protocols|grpc|endpoint": loop(ports["jaeger_otlp"]),
        "extensions|jaeger_query|http|endpoint": loop(ports["jaeger_query"]),
        "extensions|jaeger_query|grpc|endpoint": loop(ports["jaeger_query_grpc"]),
        "extensions|healthcheckv2|http|endpoint": loop(ports["jaeger_health"]),
    }, tmp / "jaeger.yaml")
    started.append(Server("jaeger", [str(binaries.jaeger), f"--config={jaeger}"], tmp))
    started[-1].wait_ready(d.url("jaeger_query", "/api/services"))

    for gateway in gateways:  # they retry their exports until the Collector listens
        d.start_gateway(gateway)

    collector = deployed(_shipped("otelcol.yaml"), {
        "receivers|otlp|protocols|grpc|endpoint": loop(ports["in_grpc"]),
        "receivers|otlp|protocols|http|endpoint": loop(ports["in_http"]),
        "receivers|otlp/scored|protocols|grpc|endpoint": loop(ports["scored"]),
        "exporters|load_balancing|resolver": {"static": {"hostnames": [loop(g.grpc) for g in gateways]}},
        "exporters|otlp_grpc/jaeger|endpoint": loop(ports["jaeger_otlp"]),
        "exporters|otlp_grpc/tempo|endpoint": tempo.grpc_endpoint.removeprefix("http://"),
        "exporters|prometheus|endpoint": loop(ports["prom_exporter"]),
        "extensions|health_check|endpoint": loop(ports["health"]),
        "extensions|file_storage|directory": str(tmp / "otelcol-queue"),
        "service|telemetry|metrics|readers|0|pull|exporter|prometheus|host": "127.0.0.1",
        "service|telemetry|metrics|readers|0|pull|exporter|prometheus|port": ports["telemetry"],
    }, tmp / "otelcol.yaml")
    started.append(Server("otelcol", [str(binaries.otelcol), f"--config={collector}"], tmp))
    started[-1].wait_ready(d.url("health", "/"))

    rules = tmp / "alerts.yml"  # the shipped rules, `for:` shortened (as tests/monitoring/test_prometheus.py)
    rules.write_text(re.sub(r"(?m)^(\s+for:\s*)\S+", r"\g<1>1s", (COLLECTOR / "alerts.yml").read_text()))
    shipped_prometheus = _shipped("prometheus.yml")
    jobs = [job["job_name"] for job in shipped_prometheus["scrape_configs"]]
    targets = {"otel-collector": ports["prom_exporter"], "otel-collector-self": ports["telemetry"]}
    prometheus = deployed(shipped_prometheus, {
        "global|scrape_interval": "1s", "global|evaluation_interval": "1s", "rule_files|0": str(rules),
        **{f"scrape_configs|{i}|static_configs|0|targets": [loop(targets[job])] for i, job in enumerate(jobs)},
    }, tmp / "prometheus.yml")
    started.append(Server("prometheus", [
        "prometheus", f"--config.file={prometheus}", f"--storage.tsdb.path={tmp / 'prometheus-data'}",
        f"--web.listen-address=127.0.0.1:{ports['prometheus']}", "--storage.tsdb.retention.time=1h",
    ], tmp))
    started[-1].wait_ready(d.url("prometheus", "/-/ready"))
    return d


# ------------------------------------------------------------------------------------- reading back


def jaeger_traces(d: Deployment, params: dict[str, str]) -> dict[str, list[dict[str, Any]]]:
    query = urllib.parse.urlencode(params)
    data = get_json(d.url("jaeger_query", f"/api/traces?{query}"), timeout=20)["data"]
    return {t["traceID"].rjust(32, "0"): t["spans"] for t in data}


def cheatsheet_queries() -> list[tuple[str, dict[str, str]]]:
    """The Jaeger API calls collector/cheatsheet.md prints (curl -G lines between its jaeger-api markers)."""
    text = (COLLECTOR / "cheatsheet.md").read_text()
    block = text.split("<!-- jaeger-api -->", 1)[1].split("<!-- /jaeger-api -->", 1)[0]
    queries = []
    for line in block.splitlines():
        if not line.startswith("curl "):
            continue
        words = shlex.split(line)
        url = next(w for w in words if w.startswith("http"))
        params = dict(words[i + 1].split("=", 1) for i, w in enumerate(words) if w == "--data-urlencode")
        queries.append((urllib.parse.urlsplit(url).path, params))
    return queries


def tags(span: dict[str, Any]) -> dict[str, Any]:
    return {t["key"]: t["value"] for t in span["tags"]}


def prom_query(d: Deployment, expr: str) -> list[dict[str, Any]]:
    url = d.url("prometheus", "/api/v1/query?" + urllib.parse.urlencode({"query": expr}))
    result: list[dict[str, Any]] = get_json(url)["data"]["result"]
    return result


def span_histogram_counts(d: Deployment, scorer: str, until: dict[str, int], timeout: float = 30) -> dict[str, int]:
    """The observations of the Collector's ragtrace.span.<scorer>.score histogram in Prometheus, by label,
    once they equal `until` (scrapes lag) or when `timeout` has passed."""
    deadline = time.monotonic() + timeout
    while True:
        series = prom_query(d, f"sum by (ragtrace_{scorer}_label) (ragtrace_span_{scorer}_score_count)")
        got = {r["metric"].get(f"ragtrace_{scorer}_label", ""): int(float(r["value"][1])) for r in series}
        if got == until or time.monotonic() > deadline:
            return got
        time.sleep(1)


def self_metrics(d: Deployment) -> dict[str, float]:
    """The Collector's own loadbalancing / exporter series (its telemetry port), name{labels} -> value."""
    out = {}
    for line in get_text(d.url("telemetry", "/metrics")).splitlines():
        if line.startswith("otelcol_loadbalancer") or (
                line.startswith("otelcol_exporter") and 'exporter="load_balancing"' in line):
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out


def lb_total(metrics: dict[str, float], prefix: str, *must: str) -> float:
    return sum(v for k, v in metrics.items() if k.startswith(prefix) and all(m in k for m in must))


def binomial_interval(n: int, p: float, tail: float = 1e-4) -> tuple[int, int]:
    """The smallest and largest k with at most `tail` probability below / above them under Binomial(n, p)."""
    pmf = [math.comb(n, k) * p**k * (1 - p) ** (n - k) for k in range(n + 1)]
    low = next(k for k in range(n + 1) if sum(pmf[: k + 1]) > tail)
    high = next(k for k in range(n, -1, -1) if sum(pmf[k:]) > tail)
    return low, high


# ------------------------------------------------------------------------------------- the test


@pytest.fixture
def deployment(collector_binaries: Binaries, tmp_path: Path, otlp_receiver: OtlpReceiver) -> Iterator[Deployment]:
    with servers() as started:
        yield start_deployment(collector_binaries, tmp_path, started, otlp_receiver)


def test_the_shipped_deployment_end_to_end(deployment: Deployment, tmp_path: Path) -> None:
    d = deployment
    items = templates()
    judged = judged_in_process(items)
    # Only templates whose every score is far from the 0.5 threshold: the gateways' judge must give them
    # the same labels (a score near it can fall either side with another batch's float rounding).
    scores = [[float(a[f"ragtrace.{s}.score"]) for s in SCORERS] for a in judged]
    good = [i for i, row in enumerate(scores) if min(row) >= CLEAR_PASS]
    bad = [i for i, row in enumerate(scores) if max(row) <= CLEAR_FAIL]
    assert len(good) >= 3 and len(bad) >= 3, f"too few clear templates: {scores}"
    labels = {i: {s: "pass" if i in good else "fail" for s in SCORERS} for i in good + bad}
    failing = {i: i in bad for i in good + bad}
    rng = random.Random(25)
    unclear = len(items) - len(good) - len(bad)
    figures: dict[str, Any] = {"templates": {"good": len(good), "bad": len(bad), "unclear": unclear}}

    # Phase 1: one trace at a time, one span per request; the gateway whose counter rose took it.
    sent: list[Sent] = []
    provider = app_provider(f"http://127.0.0.1:{d.ports['in_grpc']}", batch=False)
    tracer = provider.get_tracer("rag-app")
    a, b = d.gateways
    counts = {g.name: g.health()["received_spans"] for g in d.gateways}
    for _ in range(PHASE1_TRACES):
        roll = rng.random()
        index = rng.choice(bad) if roll < 0.35 else rng.choice(good)
        trace = Sent(_send_trace(tracer, items[index], error=0.35 <= roll < 0.40), index, 0.35 <= roll < 0.40, 1)

        def moved(before: dict[str, int] = counts) -> dict[str, int] | None:
            now = {g.name: g.health()["received_spans"] for g in d.gateways}
            return now if sum(now.values()) - sum(before.values()) >= SPANS_PER_TRACE else None

        now = wait_for("the trace's spans at a gateway", moved, timeout=20, interval=0.01)
        delta = {name: now[name] - counts[name] for name in now}
        assert sorted(delta.values()) == [0, SPANS_PER_TRACE], f"trace {trace.trace_id} split: {delta}"
        trace.gateway = max(delta, key=lambda name: delta[name])
        sent.append(trace)
        counts = now
    provider.shutdown()
    per_gateway = Counter(t.gateway for t in sent)
    figures["phase1_per_gateway_traces"] = dict(per_gateway)
    figures["phase1_per_gateway_spans"] = counts
    assert sum(counts.values()) == PHASE1_TRACES * SPANS_PER_TRACE
    assert min(per_gateway.values()) > PHASE1_TRACES * 0.3, f"the ring is lopsided: {per_gateway}"

    # Evaluation failures, as a gateway writes them, straight to the scored receiver (before phase 2, so that
    # tail sampling has decided them when the failing traces are read back).
    provider = app_provider(d.scored_endpoint, batch=True)
    tracer = provider.get_tracer("rag-app")
    unscorable = {_send_unscorable_trace(tracer, status, error): status for status, error in EVAL_FAILURES}
    assert provider.force_flush(30_000)
    provider.shutdown()

    # Phase 2: failing traces in batches; gateway b SIGKILLed mid-run, restarted 3 s later on its spool.
    before_kill = {g.name: g.health()["received_spans"] for g in d.gateways}
    lb_before = self_metrics(d)
    provider = app_provider(f"http://127.0.0.1:{d.ports['in_grpc']}", batch=True)
    tracer = provider.get_tracer("rag-app")
    kill_log: dict[str, Any] = {}

    def kill_and_restart() -> None:
        time.sleep(2.5)
        assert b.server is not None
        kill_log["b_received_at_kill"] = b.health()["received_spans"] - before_kill["b"]
        kill_log["b_held_at_kill"] = b.health()["held_spans"]
        a_at_kill = a.health()["received_spans"]
        b.server.kill()
        t_kill = time.monotonic()
        peak = 0.0
        while time.monotonic() - t_kill < 3.0:
            peak = max(peak, lb_total(self_metrics(d), "otelcol_exporter_queue_size"))
            time.sleep(0.2)
        kill_log["queue_peak_while_down"] = peak
        kill_log["a_received_while_b_down_3s"] = a.health()["received_spans"] - a_at_kill
        d.start_gateway(b)
        kill_log["down_seconds"] = round(time.monotonic() - t_kill, 1)

    killer = threading.Thread(target=kill_and_restart)
    killer.start()
    for _ in range(PHASE2_TRACES):
        index = rng.choice(bad)
        sent.append(Sent(_send_trace(tracer, items[index], error=False), index, False, 2))
        time.sleep(0.08)
    killer.join()
    assert provider.force_flush(30_000)
    provider.shutdown()

    # Everything scored and forwarded: gateways idle, the Collector's queue empty.
    def idle() -> bool | None:
        states = [g.health() for g in d.gateways]
        busy = any(s["held_spans"] or s["settling_roots"] or s["queue_depth"] or s["exporting_spans"]
                   or s.get("spool", {}).get("spans") for s in states)
        queued = lb_total(self_metrics(d), "otelcol_exporter_queue_size")
        return None if busy or queued else True

    wait_for("the gateways to score and forward everything", idle, timeout=120, interval=0.5)
    lb_after = self_metrics(d)
    kill_log["a_received_phase2"] = a.health()["received_spans"] - before_kill["a"]
    kill_log["b_received_after_restart"] = b.health()["received_spans"]
    kill_log["b_spool_after_restart"] = b.health().get("spool")
    kill_log["lb_send_failed_spans"] = lb_total(lb_after, "otelcol_exporter_send_failed_spans") - lb_total(
        lb_before, "otelcol_exporter_send_failed_spans")
    kill_log["lb_backend_failures"] = lb_total(lb_after, "otelcol_loadbalancer_backend_outcome", 'success="false"')
    figures["kill"] = kill_log

    # Jaeger: the cheatsheet's queries return exactly the failing traces, once tail sampling decided.
    expected_failing = {t.trace_id for t in sent if failing[t.template]}
    queries = cheatsheet_queries()
    assert [p["tags"] for _, p in queries] == [json.dumps({f"ragtrace.{s}.label": "fail"}) for s in SCORERS]

    def found_failing() -> set[str]:
        union: set[str] = set()
        for path, params in queries:
            assert path == "/api/traces" and params["service"] == APP_SERVICE
            union |= set(jaeger_traces(d, params))
        return union

    deadline = time.monotonic() + 120  # decision_wait (65 s) after the last trace reached :4319, and margin
    while not expected_failing <= found_failing() and time.monotonic() < deadline:
        time.sleep(2)
    time.sleep(3)  # the good traces were decided in the same seconds; let the last batch land
    kept = jaeger_traces(d, {"service": APP_SERVICE, "limit": "5000"})
    union = found_failing()
    figures["jaeger_failing_query"] = {"returned": len(union), "expected": len(expected_failing),
                                       "missing": len(expected_failing - union)}

    # Tail sampling: every failing and every ERROR trace kept, complete; 10 % of the rest.
    by_id = {t.trace_id: t for t in sent}
    must_keep = expected_failing | {t.trace_id for t in sent if t.error} | set(unscorable)
    rest = [t.trace_id for t in sent if t.trace_id not in must_keep]
    rest_kept = sum(1 for tid in rest if tid in kept)
    low, high = binomial_interval(len(rest), SAMPLED_SHARE)
    figures["tail_sampling"] = {"must_keep": len(must_keep), "kept": len(set(kept) & must_keep),
                                "evaluation_failures": len(unscorable),
                                "evaluation_failures_kept": len(set(unscorable) & set(kept)),
                                "rest": len(rest), "rest_kept": rest_kept, "interval_1e-4": [low, high]}
    incomplete, duplicated = {}, 0
    duplicated_retrievals: Counter[tuple[str, str]] = Counter()  # (scorer, label) of a retrieval seen twice
    statuses: Counter[tuple[str, str]] = Counter()
    unscored: dict[str, tuple[Any, ...]] = {}
    for tid in must_keep & set(kept) - set(unscorable):
        spans = kept[tid]
        ids = Counter(s["spanID"] for s in spans)
        duplicated += sum(n - 1 for n in ids.values())
        if len(ids) != SPANS_PER_TRACE:
            incomplete[tid] = len(ids)
        retrievals = [tags(s) for s in spans if s["operationName"] == "retrieve"]
        for retrieval in retrievals:
            status = (str(retrieval.get("ragtrace.eval.status")), str(retrieval.get("ragtrace.eval.error", "")))
            statuses[status] += 1
            if status[0] != "scored":
                unscored[tid] = (by_id[tid].phase, by_id[tid].gateway, len(retrievals), *status)
        for extra in retrievals[1:]:
            duplicated_retrievals.update((s, str(extra.get(f"ragtrace.{s}.label"))) for s in SCORERS)
    phase2 = {t.trace_id for t in sent if t.phase == 2}
    figures["kill"]["phase2_traces"] = len(phase2)
    figures["kill"]["phase2_missing_in_jaeger"] = len(phase2 - set(kept))
    figures["kill"]["incomplete_traces"] = len(incomplete)
    figures["kill"]["duplicated_spans"] = duplicated
    figures["retrieval_statuses_kept"] = {f"{s}/{e}": n for (s, e), n in statuses.items()}
    print("deployment figures:", json.dumps(figures, indent=1))
    assert union == expected_failing, (
        f"missing {len(expected_failing - union)}, unexpected {len(union - expected_failing)}"
    )
    assert must_keep <= set(kept), f"dropped: {len(must_keep - set(kept))} of {len(must_keep)}"
    assert set(kept) <= set(by_id) | set(unscorable), "Jaeger holds traces this test did not send"
    for tid, written in unscorable.items():
        assert len(kept[tid]) == 2 and written in {str(tags(s).get("ragtrace.eval.status")) for s in kept[tid]}
    assert low <= rest_kept <= high, figures["tail_sampling"]
    assert not incomplete, f"{len(incomplete)} kept traces arrived incomplete (spans found: {incomplete})"
    assert not unscored, f"kept retrievals not scored (phase, gateway, retrievals, status, error): {unscored}"

    # Prometheus: the span histograms count every scored retrieval by label; the shipped alert fires.
    telemetry = get_text(d.url("telemetry", "/metrics")).splitlines()
    dropped = [line for line in telemetry if line.startswith("otelcol_deltatocumulative_datapoints{")
               and "error=" in line]  # points delta_to_cumulative refused (out of order, older start)
    figures["delta_to_cumulative_errors"] = dropped
    for scorer in SCORERS:  # a span the spool forwarded twice is counted twice, as Jaeger shows it twice
        want = Counter(labels[t.template][scorer] for t in sent)
        want.update({label: n for (s, label), n in duplicated_retrievals.items() if s == scorer})
        expected = {label: n for label, n in want.items() if n}
        got = span_histogram_counts(d, scorer, until=expected)
        figures.setdefault("span_histograms", {})[scorer] = got
        assert got == expected, (scorer, got, expected)

    def firing() -> list[dict[str, Any]] | None:
        alerts = get_json(d.url("prometheus", "/api/v1/alerts"))["data"]["alerts"]
        fired = [x for x in alerts if x["state"] == "firing" and x["labels"]["alertname"] == "RagtraceHighFailingShare"]
        return fired or None

    fired = wait_for("RagtraceHighFailingShare firing", firing, timeout=60, interval=1)
    exposition = get_text(d.url("prom_exporter", "/metrics")).splitlines()
    exposed = {line.split("{", 1)[0].split(" ", 1)[0] for line in exposition if line.startswith("ragtrace")}
    figures["collector_exposes"] = sorted(exposed)
    assert {"ragtrace_evaluation_score_count", "ragtrace_evaluation_decisions_total"} <= exposed
    figures["alerts_firing"] = {x["labels"]["gen_ai_evaluation_name"]: round(float(x["value"]), 3) for x in fired}
    print("deployment figures:", json.dumps(figures, indent=1))
    (tmp_path / "figures.json").write_text(json.dumps(figures, indent=1))
    if os.environ.get("RAGTRACE_DEPLOYMENT_FIGURES"):
        Path(os.environ["RAGTRACE_DEPLOYMENT_FIGURES"]).write_text(json.dumps(figures, indent=1))
