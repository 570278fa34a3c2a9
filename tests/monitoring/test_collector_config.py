"""collector/: every file parses, and every ragtrace / GenAI-evaluation name it uses exists.

A name exists when the span contract (`docs/span-contract.md`) defines it, or when ragtrace's code
registers it (metrics.py, drift/: e.g. `ragtrace.retriever`, the drift gauges), or when the Collector
config itself defines it (a `signaltometrics` metric). Prometheus-style names (`ragtrace_..._total`) must be
an exposed form of a known metric or label.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.servers.collector import Binaries

yaml = pytest.importorskip("yaml", reason="PyYAML is needed to parse the collector files")

ROOT = Path(__file__).resolve().parents[2]
COLLECTOR = ROOT / "collector"
SPEC = ROOT / "docs" / "span-contract.md"
CODE = [ROOT / "ragtrace" / "live" / "metrics.py", *sorted((ROOT / "ragtrace" / "live" / "drift").glob("*.py"))]
SCORERS = ("context_precision", "context_relevance", "context_recall")

DOTTED = re.compile(r"(?<![\w.])((?:ragtrace|gen_ai\.evaluation)(?:\.[a-z0-9_<>]+)+)")
UNDERSCORED = re.compile(r"(?<![\w:.])(ragtrace_[A-Za-z0-9_]+)")
PROM_SUFFIXES = ("", "_total", "_bucket", "_sum", "_count", "_seconds", "_seconds_bucket", "_seconds_sum",
                 "_seconds_count", "_USD_total")


def _files() -> list[Path]:
    return sorted(p for p in COLLECTOR.rglob("*") if p.is_file())


def test_the_collector_folder_is_complete() -> None:
    names = {p.relative_to(COLLECTOR).as_posix() for p in _files()}
    assert {"otelcol.yaml", "prometheus.yml", "alerts.yml", "grafana/ragtrace-dashboard.json",
            "docker-compose.yml", "README.md", "cheatsheet.md"} <= names


@pytest.mark.parametrize("path", [p for p in _files() if p.suffix in (".yaml", ".yml", ".json")],
                         ids=lambda p: p.name)
def test_every_yaml_and_json_parses(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    data = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    assert isinstance(data, dict) and data


def test_collector_pipelines_reference_defined_components() -> None:
    config = yaml.safe_load((COLLECTOR / "otelcol.yaml").read_text())
    defined = {kind: set(config.get(kind) or {}) for kind in ("receivers", "processors", "exporters", "connectors")}
    for name, pipeline in config["service"]["pipelines"].items():
        for kind in ("receivers", "processors", "exporters"):
            for component in pipeline.get(kind, []):
                assert component in defined[kind] | defined["connectors"], f"{name}: {component} undefined"
    policies = config["processors"]["tail_sampling"]["policies"]
    conditions = [c for p in policies if p["type"] == "ottl_condition" for c in p["ottl_condition"]["span"]]
    assert 'span.attributes["ragtrace.context_precision.label"] == "fail"' in conditions
    assert config["exporters"]["load_balancing"]["routing_key"] == "traceID"
    assert config["exporters"]["load_balancing"]["resolver"]["dns"]["port"] == "4317"


def test_compose_brings_up_the_whole_stack() -> None:
    compose = yaml.safe_load((COLLECTOR / "docker-compose.yml").read_text())
    assert {"otel-collector", "ragtrace-gateway", "jaeger", "tempo", "prometheus", "grafana"} <= set(
        compose["services"]
    )
    assert "jaegertracing/jaeger:2" in compose["services"]["jaeger"]["image"]


def test_dashboard_links_bad_scores_to_traces() -> None:
    dashboard = json.loads((COLLECTOR / "grafana" / "ragtrace-dashboard.json").read_text())
    text = json.dumps(dashboard)
    assert "traceql" in text and 'span.ragtrace.context_precision.label = \\"fail\\"' in text
    assert any(t.get("exemplar") for p in dashboard["panels"] for t in p["targets"])
    assert any(p["fieldConfig"]["defaults"].get("links") for p in dashboard["panels"])


def _spec_names(spec: str) -> set[str]:
    names = set()
    for line in spec.splitlines():
        found = re.findall(r"`([^`]+)`", line)
        last_full = ""
        for token in found:
            for candidate in re.split(r"\s*/\s*|\s+", token):
                if candidate.startswith((".", "ragtrace.", "gen_ai.evaluation")):
                    if candidate.startswith(".") and last_full:  # `ragtrace.judge.input_tokens` / `.cost_usd`
                        candidate = last_full.rsplit(".", 1)[0] + candidate
                    candidate = candidate.split("=", 1)[0].strip()
                    last_full = candidate
                    names.update(candidate.replace("<scorer>", s) for s in SCORERS)
    return {n for n in names if n.startswith(("ragtrace.", "gen_ai.evaluation"))}


def _code_names() -> set[str]:
    names = set()
    for path in CODE:
        names.update(re.findall(r"\"((?:ragtrace|gen_ai\.evaluation)\.[a-z0-9_.]+)\"", path.read_text()))
    return names


def _collector_defined() -> set[str]:
    config = yaml.safe_load((COLLECTOR / "otelcol.yaml").read_text())
    return {m["name"] for signal in config["connectors"]["signal_to_metrics"].values() for m in signal}


def _is_python_path(name: str) -> bool:
    first = name.split(".")[1]
    package = ROOT / "ragtrace"
    return (package / first).is_dir() or (package / f"{first}.py").exists() or name in {"ragtrace.install"}


def test_every_name_used_in_collector_exists() -> None:
    spec = _spec_names(SPEC.read_text(encoding="utf-8"))
    assert {"ragtrace.context_precision.label", "ragtrace.judge.cost_usd", "ragtrace.evaluation.decisions",
            "gen_ai.evaluation.score.label"} <= spec
    known = spec | _code_names() | _collector_defined()
    exposed = {n.replace(".", "_") + suffix for n in known for suffix in PROM_SUFFIXES}
    unknown: dict[str, set[str]] = {}
    for path in _files():
        text = path.read_text(encoding="utf-8")
        for found in DOTTED.findall(text):
            found = found.rstrip(".")
            if _is_python_path(found):  # `ragtrace.install`, `ragtrace.live.drift`: code, not telemetry
                continue
            for name in {found.replace("<scorer>", s) for s in SCORERS}:
                if name not in known:
                    unknown.setdefault(path.name, set()).add(name)
        for name in UNDERSCORED.findall(text):
            if name not in exposed:
                unknown.setdefault(path.name, set()).add(name)
    assert not unknown, f"names not in the spec nor registered by ragtrace: {unknown}"


# --- the built Collector and Jaeger (collector/build.sh) -----------------------------------------------

# Built although no shipped config names them: the debug exporter to look at a pipeline while setting it
# up, otlphttp for backends that take OTLP over HTTP only (Arize Phoenix, see README.md).
OPERATOR_EXTRAS = {("exporters", "debug"), ("exporters", "otlp_http")}
KINDS = ("receivers", "processors", "exporters", "connectors", "extensions")
# The shipped Collector configs: the deployment, and the one that captures traces to a file for explain.
COLLECTOR_CONFIGS = ("otelcol.yaml", "otelcol-file.yaml")


def _used_components(config: dict[str, Any]) -> set[tuple[str, str]]:
    return {(kind, name.split("/", 1)[0]) for kind in KINDS for name in config.get(kind) or {}}


def test_the_distribution_has_exactly_the_components_the_shipped_config_uses(collector_binaries: Binaries) -> None:
    listed = subprocess.run([str(collector_binaries.otelcol), "components"], capture_output=True, text=True, timeout=60)
    assert listed.returncode == 0, listed.stderr
    inventory = yaml.safe_load(listed.stdout)
    built = {(kind, c["name"]) for kind in KINDS for c in inventory.get(kind) or []}
    used = set().union(*(_used_components(yaml.safe_load((COLLECTOR / c).read_text())) for c in COLLECTOR_CONFIGS))
    assert used <= built, f"used but not built: {used - built}"
    assert built - used == OPERATOR_EXTRAS, f"built but unused: {built - used - OPERATOR_EXTRAS}"
    versions = {c["module"].rsplit(" ", 1)[-1] for kind in KINDS for c in inventory.get(kind) or []}
    assert versions == {"v0.161.0"}, f"one Collector release for every module: {versions}"


@pytest.mark.parametrize(
    ("config", "binary"), [*((c, "otelcol") for c in COLLECTOR_CONFIGS), ("jaeger.yaml", "jaeger")]
)
def test_the_built_binaries_validate_every_shipped_config(
    collector_binaries: Binaries, config: str, binary: str
) -> None:
    command = [str(getattr(collector_binaries, binary)), "validate", f"--config={COLLECTOR / config}"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
