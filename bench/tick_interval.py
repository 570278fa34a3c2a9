"""What the worker's tick interval costs the app: one variant per interval, A/B in one process.

The workload and the estimator are those of bench/overhead.py (CPU per trace, app thread plus the
variant's background threads, variants interleaved every 20 traces, GC between segments): a baseline
without ragtrace and one RagScoringSpanProcessor per `--ticks` value at 10 % sampling. With k variants
interleaved each gets 1/k of the traffic, so each interval is stretched k times, as overhead.py does.

    python bench/tick_interval.py                          # both workers, 0.05 0.1 0.2 0.5 s
    python bench/tick_interval.py --worker process --ticks 0.05 0.2
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from overhead import Variant, quartiles, rag_trace, shuffled_rounds


def compare(worker: str, ticks: list[float], segments: int, rounds: int, n: int, rate: float) -> dict[str, object]:
    k = len(ticks) + 1
    variants = {"without": Variant(False)}
    variants.update({str(tick): Variant(True, rate, worker, tick_interval=tick * k) for tick in ticks})
    for variant in variants.values():  # warm up
        variant.block(rag_trace, 200)
        variant.wait_scored()
    totals: dict[str, list[float]] = {name: [] for name in variants}
    background: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(segments):
        before = {name: variant.background_cpu() for name, variant in variants.items()}
        gc.collect()
        gc.disable()
        try:
            app = shuffled_rounds(variants, rag_trace, rounds, n)
            for variant in variants.values():
                variant.wait_scored()
        finally:
            gc.enable()
        for name, variant in variants.items():
            spent = variant.background_cpu() - before[name]
            totals[name].append((app[name] + spent) / (rounds * n) * 1e6)
            background[name].append(spent / (rounds * n) * 1e6)
    out: dict[str, object] = {}
    for name in variants:
        if name == "without":
            continue
        ratios = [a / b for a, b in zip(totals["without"], totals[name], strict=True)]
        out[name] = {
            "ratio": round(statistics.median(ratios), 4),
            "ratio_quartiles": quartiles(ratios),
            "background_extra_us_per_trace": round(
                statistics.fmean(background[name]) - statistics.fmean(background["without"]), 1
            ),
        }
    for variant in variants.values():
        variant.provider.shutdown()
    return dict(sorted(out.items(), key=lambda item: float(item[0])))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ticks", type=float, nargs="+", default=[0.05, 0.1, 0.2, 0.5], help="intervals (s)")
    parser.add_argument("--worker", choices=("thread", "process", "both"), default="both")
    parser.add_argument("--segments", type=int, default=6)
    parser.add_argument("--rounds", type=int, default=100, help="interleaved rounds per segment")
    parser.add_argument("--traces", type=int, default=20, help="traces per variant and round")
    parser.add_argument("--rate", type=float, default=0.1)
    args = parser.parse_args()
    workers = ["thread", "process"] if args.worker == "both" else [args.worker]
    result = {
        worker: compare(worker, args.ticks, args.segments, args.rounds, args.traces, args.rate) for worker in workers
    }
    print(json.dumps({"sampling_rate": args.rate, "by_worker": result}, indent=1))


if __name__ == "__main__":
    main()
