"""`ragtrace align` on the HotpotQA labels shipped in data/hotpotqa: the local judge and the LLM judge (litellm
against the scripted OpenAI-compatible server of tests/servers/judge.py, started in this process) side by
side, usefulness judged against the short answer. Prints JSON: per judge kappa, accuracy, F1 / precision /
recall of the useful label, AUC (and of what), ECE and the confusion matrix; McNemar's exact test between them.

The scripted server's verdicts are an oracle of the tests (useful = the context's first sentence is in the
reference), not a model: its figures show the LLM path end to end, not an LLM's quality.

    python bench/align_hotpotqa.py [--limit N]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.hotpotqa import DATA
from ragtrace.judges.resolve import resolve_judge
from ragtrace.offline.align import align
from ragtrace.scoring import ContextPrecision
from tests.servers.judge import JudgeServer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=None, help="first N questions (default: all 500)")
    args = parser.parse_args()
    os.environ.setdefault("OPENAI_API_KEY", "sk-bench")
    server = JudgeServer().start()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            labels = Path(tmp) / "hotpotqa.jsonl"
            with DATA.open(encoding="utf-8") as handle:
                labels.write_text("".join(itertools.islice(handle, args.limit)), encoding="utf-8")
            llm = resolve_judge("openai/judge-test", api_base=server.url + "/v1")
            report = align(labels, ["local", llm], scorers=[ContextPrecision(reference_source="response")])
    finally:
        server.stop()
    out = {"items": report.items, "labelled": report.labelled, "judges": {}, "mcnemar": None}
    for judge in report.judges:
        a = judge.agreements["contexts"]
        out["judges"][judge.judge] = {
            "model": judge.model, "judge_id": judge.judge_id, "units": a.units, "kappa": a.kappa,
            "accuracy": a.accuracy, "f1": a.yes.f1 if a.yes else None, "precision": a.yes.precision if a.yes else None,
            "recall": a.yes.recall if a.yes else None, "auc": a.auc, "auc_of": a.auc_of, "ece": a.ece,
            "confusion": a.confusion,
        }
    if report.comparisons:
        out["mcnemar"] = report.comparisons[0].model_dump(mode="json")
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
