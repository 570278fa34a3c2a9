"""How much of the app's Python the local judge displaces when it runs in the app's process.

A pure-Python app thread counts loop iterations in one-second windows, alternately alone and while the
local judge scores 10-context samples (unique texts, so no embedding cache hits) in a thread beside it,
as the live worker does. The median ratio of paired windows is the app's speed while the judge works
(pairs, because this machine's speed drifts within seconds): numpy drops the GIL inside its kernels, but
tokenizing, the lexical evidence and the glue between kernels hold it.

    OPENBLAS_NUM_THREADS=1 python bench/local_judge_gil.py      # prints JSON
"""

from __future__ import annotations

import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import argparse
import json
import statistics
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ragtrace.judges.base import JudgeRequest
from ragtrace.judges.local import LocalJudge
from ragtrace.scoring import RagSample
from ragtrace.scoring.verdicts import Aspect


def spin(seconds: float) -> int:
    """Pure-Python work standing for the app: loop iterations done in `seconds`."""
    count, end = 0, time.perf_counter() + seconds
    while time.perf_counter() < end:
        for _ in range(1000):
            count += 1
    return count


def sample(i: int) -> RagSample:
    contexts = [
        f"Passage {i}-{k}: the harbour of site {i} was surveyed in {1900 + k}, near the glacier and the "
        f"beacon tower; the survey team counted {k * 7 + i} moorings along the quay." for k in range(10)
    ]
    return RagSample(query=f"When was the harbour of site {i} surveyed?", contexts=contexts,
                     response=f"It was surveyed in 1903 (site {i}).")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=10, help="pairs of one-second windows")
    args = parser.parse_args()
    judge = LocalJudge()
    judge.warm_up()
    working, idle, stop = threading.Event(), threading.Event(), threading.Event()
    judged, judge_cpu = [0], [0.0]

    def judging() -> None:
        while not stop.is_set():
            if not working.is_set():
                idle.set()
                working.wait(0.05)
                continue
            idle.clear()
            started = time.thread_time()
            item = sample(judged[0])
            judge.judge_sync(JudgeRequest(sample=item, aspects=frozenset(Aspect), reference=item.response))
            judge_cpu[0] += time.thread_time() - started
            judged[0] += 1

    worker = threading.Thread(target=judging, daemon=True)
    worker.start()
    ratios = []
    for _ in range(args.rounds):
        idle.wait()
        alone = spin(1.0)  # the judge is parked between samples for this whole window
        working.set()
        beside = spin(1.0)  # and works without a break for this one
        working.clear()
        idle.wait()
        ratios.append(beside / alone)
    stop.set()
    worker.join()
    print(json.dumps({
        "app_speed_while_judging": round(statistics.median(ratios), 3),
        "ratios": [round(r, 3) for r in ratios],
        "samples_judged": judged[0],
        "judge_cpu_ms_per_sample": round(judge_cpu[0] * 1000 / max(judged[0], 1), 1),
        "contexts_per_sample": 10,
        "blas_threads_env": os.environ.get("OPENBLAS_NUM_THREADS"),
        "cpus": os.cpu_count(),
        "load_average_1m": round(os.getloadavg()[0], 2),
    }))


if __name__ == "__main__":
    main()
