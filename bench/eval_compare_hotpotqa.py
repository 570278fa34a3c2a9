"""Does `ragtrace eval --compare` catch a ranking regression on real data? Prints JSON.

Two rankings of the same HotpotQA dev items (10 paragraphs each, 2 gold): gold paragraphs first, then gold
last. The reference for context_precision is the response "The answer is <answer>." (the dataset's
ground_truth field is the gold paragraphs themselves, so it is not used). Both runs go through the real CLI
with the local judge; the second compares against the first.

    python bench/eval_compare_hotpotqa.py                 # all 500 items
    python bench/eval_compare_hotpotqa.py --limit 50      # a quick look
    python bench/eval_compare_hotpotqa.py --keep DIR --resume   # finish runs started earlier in DIR

Throughput is items scored per second in this invocation (`evaluated` / `runtime_s`), so a resumed run
still reports an honest rate.
"""

from __future__ import annotations

import os

# One BLAS thread per process: numpy's default pool oversubscribes a small shared machine.
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import argparse
import contextlib
import io
import itertools
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from bench.hotpotqa import DATA
from ragtrace.cli import main as cli


def rows(path: Path, limit: int | None, gold_first: bool) -> list[dict[str, Any]]:
    out = []
    with path.open(encoding="utf-8") as handle:
        for line in itertools.islice(handle, limit):
            item = json.loads(line)
            pairs = list(zip(item["contexts"], item["context_labels"], strict=True))
            gold = [c for c, label in pairs if label == 1]
            other = [c for c, label in pairs if label != 1]
            out.append({
                "id": item["id"],
                "query": item["question"],
                "contexts": gold + other if gold_first else other + gold,
                "response": f"The answer is {item['answer']}.",
            })
    return out


def run(argv: list[str]) -> tuple[int, dict[str, Any], float]:
    stdout = io.StringIO()
    started = time.perf_counter()
    with contextlib.redirect_stdout(stdout):
        code = cli(argv)
    return code, json.loads(stdout.getvalue()), time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--limit", type=int, default=None)
    parser.add_argument("--judge", default="local")
    parser.add_argument("--concurrency", type=int, default=2)
    parser.add_argument("--keep", type=Path, help="directory to keep the JSONL, results and HTML report in")
    parser.add_argument("--resume", action="store_true", help="with --keep: skip items already scored there")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as scratch:
        work = args.keep or Path(scratch)
        work.mkdir(parents=True, exist_ok=True)
        paths = {}
        for name, gold_first in (("gold_first", True), ("gold_last", False)):
            paths[name] = work / f"{name}.jsonl"
            if args.resume and paths[name].exists():
                continue
            paths[name].write_text("".join(json.dumps(r) + "\n" for r in rows(args.data, args.limit, gold_first)))
        common = ["--judge", args.judge, "--scorers", "context_precision", "--json", "--quiet",
                  "--concurrency", str(args.concurrency), *(["--resume"] if args.resume else [])]
        code_a, first, seconds_a = run(["eval", str(paths["gold_first"]), *common,
                                        "--out", str(work / "gold_first.out.jsonl")])
        code_b, second, seconds_b = run(["eval", str(paths["gold_last"]), *common,
                                         "--out", str(work / "gold_last.out.jsonl"),
                                         "--compare", str(work / "gold_first.out.jsonl"), "--fail-on-regression",
                                         "--html", str(work / "report.html"), "--worst", "5"])
    comparison = second["compare"]["scorers"]["context_precision"]
    n = first["items"]
    print(json.dumps({
        "benchmark": "eval_compare_hotpotqa",
        "items": n,
        "judge": first["judge"]["model"],
        "precision_mean_gold_first": first["scorers"]["context_precision"]["mean"],
        "precision_mean_gold_last": second["scorers"]["context_precision"]["mean"],
        "delta": comparison["delta"],
        "paired": comparison["paired"],
        "worsened": comparison["worsened"],
        "improved": comparison["improved"],
        "wilcoxon_p": comparison["test"]["p_value"],
        "test_method": comparison["test"]["method"],
        "regression_detected": comparison["regressed"],
        "exit_codes": {"gold_first": code_a, "gold_last_with_compare": code_b},
        "worst_ids": [w["id"] for w in comparison["worst"]],
        "evaluated_this_run": {"gold_first": first["evaluated"], "gold_last": second["evaluated"]},
        "runtime_s": {"gold_first": round(seconds_a, 1), "gold_last": round(seconds_b, 1)},
        "items_per_s": {
            "gold_first": round(first["evaluated"] / seconds_a, 2) if first["evaluated"] else None,
            "gold_last": round(second["evaluated"] / seconds_b, 2) if second["evaluated"] else None,
        },
    }, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
