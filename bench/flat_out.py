"""An app that never waits, timed by the wall clock: traces a second with and without ragtrace, scoring
process and all.

bench/overhead.py counts CPU per trace with the variants interleaved every few ms. That keeps every
variant on the same machine speed, but it leaves two costs out by design: the scoring process's CPU on the
other core, and what one variant's threads and scoring process do to the others' speed (a busy second
core slows the first on a shared host; a thread that takes the GIL leaves a gap while it wakes). Both fall
on whichever variant runs, `without` included. Here each variant runs alone, flat out, for `--seconds`,
while the others sit idle and settled, so everything it sets off runs beside it and nothing else does: its
app thread's traces a second is the app's throughput.

Each round runs `without`, `twin` (a second variant without ragtrace: the A/A check) and each
configuration once, in a new order, and gives one paired ratio per configuration (its traces a second
over `without`'s in the same round). Between runs the variant that ran is settled (its exporter flushed,
its held traces scored) on nobody's clock. Reported: the median over rounds, with quartiles. Machine speed
drifts between runs, so these ratios are noisier than overhead.py's; more rounds narrow them.

    python bench/flat_out.py                       # install, 10 % sampling, RAG and plain traces
    python bench/flat_out.py --configs install exporter/thread --rounds 12
    python bench/flat_out.py --app-work 7         # an app with ~1 ms of its own CPU per trace
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from opentelemetry.trace import Tracer
from overhead import Variant, plain_trace, quartiles, rag_trace, scoring, with_app_work


def traces_per_second(variant: Variant, build: Callable[[Tracer], None], seconds: float) -> float:
    """The variant's app thread running traces back to back for `seconds` of wall time."""
    tracer, done = variant.tracer, 0
    started = time.perf_counter()
    end = started + seconds
    while (now := time.perf_counter()) < end:
        for _ in range(20):
            build(tracer)
        done += 20
    return done / (now - started)


def measure(
    build: Callable[[Tracer], None], configs: list[str], rate: float, rounds: int, seconds: float
) -> dict[str, object]:
    variants = {"without": Variant(False), "twin": Variant(False)}
    variants.update({config: scoring(config, rate) for config in configs})
    for variant in variants.values():  # warm up, and start each scoring process
        traces_per_second(variant, build, 0.2)
        variant.drain()
    got: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(rounds):
        order = list(variants)
        random.shuffle(order)
        for name in order:
            got[name].append(traces_per_second(variants[name], build, seconds))
            variants[name].drain()
    out: dict[str, object] = {"without_traces_per_s": round(statistics.median(got["without"]))}
    for name in variants:
        if name == "without":
            continue
        ratios = [mine / theirs for mine, theirs in zip(got[name], got["without"], strict=True)]
        out[name] = {"ratio": round(statistics.median(ratios), 4), "ratio_quartiles": quartiles(ratios)}
    for variant in variants.values():
        variant.provider.shutdown()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configs", nargs="+", default=["install"],
                        help="install (the README's first snippet) or <placement>/<worker>, as in overhead.py")
    parser.add_argument("--rate", type=float, default=0.1, help="sampling rate")
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=2.0, help="wall time of one variant's run")
    parser.add_argument("--kinds", nargs="+", default=["rag", "plain"], choices=("rag", "plain"))
    parser.add_argument("--app-work", type=int, default=0,
                        help="JSON round trips of a 2 KB payload per trace, the app's own work (as in overhead.py)")
    args = parser.parse_args()
    builds = {"rag": with_app_work(rag_trace, args.app_work), "plain": with_app_work(plain_trace, args.app_work)}
    report: dict[str, object] = {
        kind: measure(builds[kind], args.configs, args.rate, args.rounds, args.seconds) for kind in args.kinds
    }
    report.update(rate=args.rate, app_work_json_round_trips=args.app_work, rounds=args.rounds, seconds=args.seconds,
                  cpus=os.cpu_count(),
                  load_average_1m=round(os.getloadavg()[0], 2))
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
