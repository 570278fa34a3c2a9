"""What the session on the score exemplars costs: series and CPU per recorded score, A/B in one process.

Three MeterProviders, each with an InMemoryMetricReader: `baseline` (no session recorded), `views+option`
(`metric_views()` and `session_exemplars=True`: one distinct session per score) and `option without views`
(the option alone, which ragtrace refuses: no session recorded). Each records `--n` scores over 3 scorers x
2 labels, interleaved in blocks of 500 so that load on the machine falls on all alike; then one collection
counts the score series and the exemplars carrying a session. The figure that matters is the series count:
it must not grow with sessions.

    python bench/session_exemplars.py              # JSON on stdout
    python bench/session_exemplars.py --n 50000
"""

from __future__ import annotations

import argparse
import gc
import json
import time
from typing import Any

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from ragtrace.live.metrics import RagtraceMetrics, views

SCORERS = ("context_precision", "context_relevance", "context_recall")
LABELS = ("pass", "fail")
BLOCK = 500


class Variant:
    def __init__(self, with_views: bool, session_exemplars: bool) -> None:
        self.reader = InMemoryMetricReader()
        provider = MeterProvider(metric_readers=[self.reader], views=views() if with_views else ())
        self.metrics = RagtraceMetrics(provider, session_exemplars=session_exemplars)
        self.cpu_s = 0.0

    def block(self, start: int) -> None:
        record = self.metrics.record_score
        began = time.process_time()
        for i in range(start, start + BLOCK):
            record(SCORERS[i % 3], (i % 10) / 10, LABELS[i % 2], None, "docs", (i + 1, i + 1), "judge", f"chat-{i}")
        self.cpu_s += time.process_time() - began

    def series(self) -> dict[str, Any]:
        data = self.reader.get_metrics_data()
        points = [
            p for rm in data.resource_metrics for sm in rm.scope_metrics for m in sm.metrics
            if m.name == "ragtrace.evaluation.score" for p in m.data.data_points
        ] if data is not None else []
        return {
            "series": len(points),
            "series_with_session": sum("ragtrace.session.id" in (p.attributes or {}) for p in points),
            "exemplars_with_session": sum(
                "ragtrace.session.id" in (e.filtered_attributes or {}) for p in points for e in p.exemplars
            ),
        }


def run(n: int) -> dict[str, Any]:
    variants = {
        "baseline": Variant(False, False),
        "views+option": Variant(True, True),
        "option without views": Variant(False, True),
    }
    for variant in variants.values():  # warm up, then start the clocks again
        variant.block(0)
        variant.cpu_s = 0.0
    gc.collect()
    gc.disable()
    try:
        for start in range(BLOCK, n + BLOCK, BLOCK):
            for variant in variants.values():
                variant.block(start)
    finally:
        gc.enable()
    base_us = variants["baseline"].cpu_s / n * 1e6
    out: dict[str, Any] = {"scores": n, "distinct_sessions": n}
    for name, variant in variants.items():
        us = variant.cpu_s / n * 1e6
        out[name] = {"us_per_score": round(us, 2), "ratio_vs_baseline": round(us / base_us, 3), **variant.series()}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=20_000, help="scores per variant (a multiple of 500)")
    args = parser.parse_args()
    print(json.dumps(run(args.n - args.n % BLOCK or BLOCK), indent=2))


if __name__ == "__main__":
    main()
