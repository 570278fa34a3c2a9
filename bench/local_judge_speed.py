"""The local judge's latency per 10-context HotpotQA item, this tree against an older revision, in one run.

Both judges are imported side by side (the old one from `git archive --base`, as `ragtrace_base`, the way
bench/worker_ab.py does it) and alternate item by item, cold (embedding cache cleared before each item),
so that the load of a shared machine falls on both alike. Reported: per-item latency of each (median,
p90), the median of the per-item ratios old/new, samples/s, and the per-item AUC of each judge's
confidence against the gold labels on the same items. A third judge, this tree's rule on the numpy
encoder (the old forward pass, batches of 16), isolates what the runtime alone gives: same verdicts
(vectors within 2e-7), different speed.

    python bench/local_judge_speed.py --base b3fbe09 --items 40
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import argparse
import asyncio
import importlib
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from hotpotqa import load_items
from local_judge_quality import auc
from worker_ab import export_base

from ragtrace.judges.encoder import Encoder


def judge_item(modules: dict[str, Any], judge: Any, item: dict[str, Any]) -> tuple[float, list[float]]:
    scoring, base = modules["scoring"], modules["base"]
    sample = scoring.RagSample(
        query=item["question"], contexts=item["contexts"], response=f"The answer is {item['answer']}."
    )
    request = base.JudgeRequest(
        sample, frozenset({scoring.Aspect.USEFULNESS, scoring.Aspect.RELEVANCE}), reference=sample.response
    )
    judge.clear_cache()
    start = time.perf_counter()
    judgement = asyncio.run(judge.judge(request))
    elapsed = time.perf_counter() - start
    return elapsed, [v.confidence or 0.0 for v in judgement.verdicts.contexts]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", required=True, help="git revision of the old judge")
    parser.add_argument("--items", type=int, default=40, help="10-context items, spread over both halves")
    args = parser.parse_args()
    items = [i for i in load_items() if len(i["contexts"]) == 10]
    step = max(1, len(items) // args.items)
    items = items[::step][: args.items]  # both halves: bridge and comparison questions
    with tempfile.TemporaryDirectory() as tmp:
        export_base(args.base, Path(tmp))
        sys.path.insert(0, tmp)
        judges: dict[str, tuple[dict[str, Any], Any]] = {}
        for name, package in (("old", "ragtrace_base"), ("new", "ragtrace"), ("new_numpy", "ragtrace")):
            modules = {
                "scoring": importlib.import_module(f"{package}.scoring"),
                "base": importlib.import_module(f"{package}.judges.base"),
            }
            encoder = Encoder(backend="numpy", batch_size=16) if name == "new_numpy" else None
            judge = importlib.import_module(f"{package}.judges.local").LocalJudge(encoder=encoder)
            judge.warm_up()
            judges[name] = (modules, judge)
        names = list(judges)
        latency: dict[str, list[float]] = {name: [] for name in names}
        aucs: dict[str, list[float]] = {name: [] for name in names}
        ratios: list[float] = []
        for k, item in enumerate(items):
            order = names[k % 3 :] + names[: k % 3]
            seconds: dict[str, float] = {}
            for name in order:
                modules, judge = judges[name]
                seconds[name], confidences = judge_item(modules, judge, item)
                latency[name].append(seconds[name])
                if (a := auc(confidences, item["context_labels"])) is not None:
                    aucs[name].append(a)
            ratios.append(seconds["old"] / seconds["new"])
    report: dict[str, Any] = {"base": args.base, "items": len(items)}
    for name in names:
        values = sorted(latency[name])
        report[name] = {
            "median_ms": round(statistics.median(values) * 1000, 1),
            "p90_ms": round(values[int(0.9 * (len(values) - 1))] * 1000, 1),
            "samples_per_s": round(len(values) / sum(values), 2),
            "auc": round(statistics.fmean(aucs[name]), 4),
        }
    report["new"]["encoder_backend"] = judges["new"][1].encoder.backend
    report["new_numpy"]["encoder_backend"] = "numpy"
    report["speedup_median_of_ratios"] = round(statistics.median(ratios), 2)
    report["auc_delta"] = round(report["new"]["auc"] - report["old"]["auc"], 4)
    report["runtime_speedup_median"] = round(
        statistics.median(a / b for a, b in zip(latency["new_numpy"], latency["new"], strict=True)), 2
    )
    json.dump(report, sys.stdout, indent=2)
    print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
