"""Would batching the local judge's encoder across samples pay? CPU per text, lone vs batched forward passes.

The gateway's local judge spends ~94 % of its CPU in the encoder's onnxruntime forward pass (cProfile of
`LocalJudge.judge_sync` on the gateway bench's workload); the rest is tokenizing and the lexical evidence.
The encoder runs lone texts (batch 1, no padding). Samples that arrive together could share one batched
pass: this measures what that would give, on the texts of 16 gateway-bench samples at once (query, anchor,
response, 5 contexts of similar length each) and of 12 HotpotQA rows (10 contexts of varied length each).
`Encoder.encode` sorts texts by length before batching, so padding is as small as it can be. The vectors
are checked equal (within 1e-5) whatever the batch size.

    python bench/local_judge_batching.py --rounds 3
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np

from ragtrace.judges.encoder import get_encoder

ROOT = Path(__file__).resolve().parents[1]


def gateway_texts(i: int) -> list[str]:
    """One sample of bench/gateway_throughput.py's RAG trace (bench/overhead.py's `rag_trace(number=i)`)."""
    contexts = [f"passage {k} of request {i}: " + "lorem ipsum dolor sit amet " * 8 for k in range(5)]
    query, response = f"what is lorem ipsum, question {i}?", f"answer {i} " * 20
    return [query, f"{query} {response}", response, *contexts]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    rows = [json.loads(line) for line in (ROOT / "data/hotpotqa/hotpotqa_dev_500.jsonl").open()][:12]
    workloads = {
        "gateway_16_samples": [t for i in range(16) for t in gateway_texts(i)],
        "hotpotqa_12_rows": [t for row in rows for t in (row["question"], row["answer"], *row["contexts"])],
    }
    encoder = get_encoder()
    found: dict[str, list[float]] = {}
    for _ in range(args.rounds):
        for name, texts in workloads.items():
            reference = None
            for batch in (1, 8, 32):  # interleaved, so that each sees the same machine speeds
                encoder.batch_size = batch
                cpu = time.process_time()
                vectors = encoder.encode(texts)
                cpu = time.process_time() - cpu
                reference = vectors if reference is None else reference
                assert float(np.abs(vectors - reference).max()) < 1e-5
                found.setdefault(f"{name}:batch={batch}", []).append(round(cpu * 1000 / len(texts), 2))
    print(json.dumps({
        "backend": encoder.backend, "cpu_ms_per_text": found,
        "median": {k: statistics.median(v) for k, v in found.items()},
        "texts": {k: len(v) for k, v in workloads.items()}, "load_average_1m": round(os.getloadavg()[0], 2),
    }, indent=1))


if __name__ == "__main__":
    main()
