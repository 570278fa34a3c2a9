"""How well does the local judge tell supporting paragraphs from distractors? Prints JSON.

Data: HotpotQA dev (distractor setting), 500 items of 10 paragraphs, 2 of them gold (`context_labels`).
The response is "The answer is <answer>." and is the reference usefulness is judged against (the
dataset's `ground_truth` is the gold paragraphs concatenated, which would make the task trivial).

Reported over all items, over the even-numbered items (where the judge's weights were fitted) and the
odd-numbered ones (held out), and over the first and second halves of the file (mostly bridge questions,
then mostly comparison and yes/no questions):
- `auc`: per-item ROC AUC of the per-context `confidence` against the gold labels, averaged;
- `accuracy` / `f1` of the binary `useful` verdict at the shipped threshold (micro over contexts);
- the same AUC for BM25 of query+answer and of the query alone (the baselines);
- `rank_sensitivity.share`: items where ContextPrecision with gold paragraphs first beats gold last;
- `monotone`: mean ContextPrecision with the gold paragraphs first, at ranks 4-5 and absent (the
  distractors only), the share of items where "absent" scores no higher than "ranks 4-5", and the share
  where "absent" is labelled fail. These two need distractors to rank against: the few items made of
  their gold paragraphs alone are left out of them (`items_with_distractors` says how many remain);
- `answer_verbatim`: of the contexts that hold the answer string (answers other than yes/no), the share
  judged useful, apart for answers that add words to the query and answers the query already names
  (comparisons: "Which is older, A or B?" -> "A"), and the AUC over the other contexts;
- `median_latency_ms` per 10-context item, cold: a fresh judge, nothing cached, first `--latency-items`.

On two shared cores a full run embeds ~580k tokens (tens of minutes). `--store FILE` keeps the
encoder's vectors (text -> vector, npz) so a rerun only redoes the judging logic; latency is always
measured without it.

    python bench/local_judge_quality.py [--limit N] [--claims N] [--store /tmp/minilm_vectors.npz]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.hotpotqa import DATA
from ragtrace.judges import judge_and_score
from ragtrace.judges.base import JudgeRequest
from ragtrace.judges.encoder import Encoder, get_encoder
from ragtrace.judges.lexical import bm25_scores, contains_phrase, content_tokens, tokens
from ragtrace.judges.local import LocalJudge
from ragtrace.scoring import Aspect, ContextPrecision, RagSample


class StoredEncoder:
    """The real encoder behind a text -> vector store on disk (benchmark reruns only)."""

    def __init__(self, encoder: Encoder, path: Path | None) -> None:
        self._encoder = encoder
        self._path = path
        self.dim = encoder.dim
        self.max_length = encoder.max_length
        self._store: dict[str, Any] = {}
        if path is not None and path.exists():
            data = np.load(path, allow_pickle=False)
            self._store = dict(zip(data["texts"].tolist(), data["vectors"], strict=True))

    def truncated(self, texts: Sequence[str]) -> list[bool]:
        return self._encoder.truncated(texts)

    def encode(self, texts: Sequence[str]) -> Any:
        missing = [t for t in dict.fromkeys(texts) if t not in self._store]
        if missing:
            self._store.update(zip(missing, self._encoder.encode(missing), strict=True))
        return np.stack([self._store[t] for t in texts]) if texts else self._encoder.encode([])

    def save(self) -> None:
        if self._path is not None and self._store:
            texts = list(self._store)
            np.savez(self._path, texts=np.array(texts), vectors=np.stack([self._store[t] for t in texts]))


def auc(scores: list[float], labels: list[int]) -> float | None:
    """ROC AUC with ties counted half; None when a class is absent."""
    pos = [s for s, y in zip(scores, labels, strict=True) if y]
    neg = [s for s, y in zip(scores, labels, strict=True) if not y]
    if not pos or not neg:
        return None
    wins = sum((p > n) + 0.5 * (p == n) for p in pos for n in neg)
    return wins / (len(pos) * len(neg))


def mean(values: list[float]) -> float | None:
    return round(statistics.fmean(values), 4) if values else None


def binary(pred: list[bool], gold: list[int]) -> dict[str, float]:
    tp = sum(1 for p, g in zip(pred, gold, strict=True) if p and g)
    fp = sum(1 for p, g in zip(pred, gold, strict=True) if p and not g)
    fn = sum(1 for p, g in zip(pred, gold, strict=True) if not p and g)
    correct = sum(1 for p, g in zip(pred, gold, strict=True) if p == bool(g))
    precision = tp / (tp + fp) if tp + fp else 0.0
    recall = tp / (tp + fn) if tp + fn else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {
        "accuracy": round(correct / len(gold), 4),
        "f1": round(f1, 4),
        "precision": round(precision, 4),
        "recall": round(recall, 4),
    }


def sample_of(item: dict[str, Any], order: list[int] | None = None) -> RagSample:
    contexts = item["contexts"] if order is None else [item["contexts"][i] for i in order]
    return RagSample(query=item["question"], contexts=contexts, response=f"The answer is {item['answer']}.")


async def latency(items: list[dict[str, Any]], n: int) -> list[float]:
    """Cold per-sample latency: a fresh judge and cache, the real encoder, 10-context items only."""
    judge = LocalJudge()
    judge.warm_up()
    out: list[float] = []
    for item in [i for i in items if len(i["contexts"]) == 10][:n]:
        sample = sample_of(item)
        judge.clear_cache()
        start = time.perf_counter()
        await judge.judge(
            JudgeRequest(sample, frozenset({Aspect.USEFULNESS, Aspect.RELEVANCE}), reference=sample.response)
        )
        out.append((time.perf_counter() - start) * 1000.0)
    return out


async def run(items: list[dict[str, Any]], claims_items: int, encoder: StoredEncoder) -> dict[str, Any]:
    judge = LocalJudge(encoder=encoder)  # type: ignore[arg-type]
    precision = ContextPrecision(reference_source="response")
    per_item: list[dict[str, Any]] = []
    for item in items:
        labels = item["context_labels"]
        sample = sample_of(item)
        judgement = await judge.judge(
            JudgeRequest(sample, frozenset({Aspect.USEFULNESS, Aspect.RELEVANCE}), reference=sample.response)
        )
        verdicts = judgement.verdicts.contexts
        gold = [i for i, y in enumerate(labels) if y]
        rest = [i for i, y in enumerate(labels) if not y]
        # Same texts in a new order: served from the embedding cache.
        first = await judge_and_score(sample_of(item, gold + rest), [precision], judge)
        last = await judge_and_score(sample_of(item, rest + gold), [precision], judge)
        degraded = await judge_and_score(sample_of(item, rest[:3] + gold + rest[3:]), [precision], judge)
        absent = (await judge_and_score(sample_of(item, rest), [precision], judge)).results[0]
        docs = [tokens(c) for c in item["contexts"]]
        answer = tokens(item["answer"])
        verbatim = (
            [contains_phrase(answer, d) for d in docs]
            if item["answer"].strip().lower() not in ("yes", "no")
            else [False] * len(docs)
        )
        # "Which is older, A or B?" -> "A": the answer names a query entity, not a fact beyond the query.
        named_in_query = set(content_tokens(item["answer"])) <= set(content_tokens(item["question"]))
        per_item.append(
            {
                "labels": labels,
                "local": [v.confidence or 0.0 for v in verdicts],
                "useful": [bool(v.useful) for v in verdicts],
                "bm25": bm25_scores(content_tokens(f"{item['question']} {sample.response}"), docs),
                "bm25_query_only": bm25_scores(content_tokens(item["question"]), docs),
                "precision_first": first.results[0].score,
                "precision_last": last.results[0].score,
                "precision_degraded": degraded.results[0].score or 0.0,
                "precision_absent": absent.score or 0.0,
                "absent_fails": absent.label == "fail",
                "has_distractors": bool(rest),
                "verbatim": verbatim,
                "answer_named_in_query": named_in_query,
            }
        )
    return {"per_item": per_item, "claims": await claims_check(judge, items[:claims_items])}


async def claims_check(judge: LocalJudge, items: list[dict[str, Any]]) -> dict[str, Any]:
    """Sanity of claim support: the item's own gold text should be supported by its own contexts,
    another item's gold text (a different topic) should not."""
    if len(items) < 2:
        return {}
    own: list[float] = []
    other: list[float] = []
    for k, item in enumerate(items):
        for ground_truth, bucket in ((item["ground_truth"], own), (items[k - 1]["ground_truth"], other)):
            sample = RagSample(
                query=item["question"], contexts=item["contexts"], response="", ground_truth=ground_truth
            )
            judgement = await judge.judge(JudgeRequest(sample, frozenset({Aspect.CLAIMS})))
            claims = judgement.verdicts.claims or []
            if claims:
                bucket.append(sum(c.supported for c in claims) / len(claims))
    return {"items": len(items), "supported_share_own": mean(own), "supported_share_other_item": mean(other)}


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {"items": len(rows)}
    for key in ("local", "bm25", "bm25_query_only"):
        values = [a for r in rows if (a := auc(r[key], r["labels"])) is not None]
        out[key] = {"auc": mean(values)}
    out["local"].update(
        binary([u for r in rows for u in r["useful"]], [y for r in rows for y in r["labels"]])
    )
    ranked = [r for r in rows if r["has_distractors"]]
    n = len(ranked) or 1
    wins = sum(r["precision_first"] > r["precision_last"] for r in ranked)
    out["rank_sensitivity"] = {"share": round(wins / n, 4), "items_with_distractors": len(ranked)}
    not_above = sum(r["precision_absent"] <= r["precision_degraded"] for r in ranked)
    out["monotone"] = {
        "mean_precision_gold_first": mean([r["precision_first"] or 0.0 for r in ranked]),
        "mean_precision_gold_at_4_5": mean([r["precision_degraded"] for r in ranked]),
        "mean_precision_no_gold": mean([r["precision_absent"] for r in ranked]),
        "share_no_gold_not_above_4_5": round(not_above / n, 4),
        "share_no_gold_labelled_fail": round(sum(r["absent_fails"] for r in ranked) / n, 4),
    }
    def stated(named: bool) -> list[bool]:
        return [
            u for r in rows if r["answer_named_in_query"] == named
            for u, v in zip(r["useful"], r["verbatim"], strict=True) if v
        ]

    beyond, named = stated(False), stated(True)
    others = [
        a for r in rows
        if (a := auc([s for s, v in zip(r["local"], r["verbatim"], strict=True) if not v],
                     [y for y, v in zip(r["labels"], r["verbatim"], strict=True) if not v])) is not None
    ]
    out["answer_verbatim"] = {
        "contexts": len(beyond) + len(named),
        "share_useful": round((sum(beyond) + sum(named)) / (len(beyond) + len(named) or 1), 4),
        "answer_beyond_query": {"contexts": len(beyond), "share_useful": round(sum(beyond) / (len(beyond) or 1), 4)},
        "answer_named_in_query": {"contexts": len(named), "share_useful": round(sum(named) / (len(named) or 1), 4)},
        "auc_other_contexts": mean(others),
    }
    return out


def compare_with_sentence_transformers(items: list[dict[str, Any]]) -> dict[str, Any]:
    """One-off check (needs torch + sentence-transformers, which ragtrace never imports otherwise)."""
    from sentence_transformers import SentenceTransformer

    from ragtrace.judges.encoder import model_dir

    texts = ["", "hello world", " ".join(items[0]["contexts"]) * 3]  # empty, short, truncated
    texts += [t for item in items for t in (item["question"], *item["contexts"])]
    ours = get_encoder().encode(texts)
    reference = SentenceTransformer(str(model_dir()), device="cpu").encode(texts, normalize_embeddings=True)
    return {
        "texts": len(texts),
        "max_abs_diff": float(np.abs(ours - reference).max()),
        "min_cosine": float((ours * reference).sum(axis=1).min()),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--limit", type=int, default=None, help="only the first N items")
    parser.add_argument("--split", type=int, default=250, help="where the second half starts")
    parser.add_argument("--claims", type=int, default=20, help="items for the claim-support sanity check")
    parser.add_argument("--latency-items", type=int, default=20, help="cold samples timed for latency")
    parser.add_argument("--store", type=Path, default=None, help="npz store of text vectors for reruns")
    parser.add_argument(
        "--compare-sentence-transformers",
        type=int,
        default=0,
        metavar="N",
        help="only compare the numpy encoder with sentence-transformers on N items, and exit",
    )
    args = parser.parse_args()
    items = [json.loads(line) for line in args.data.read_text().splitlines() if line.strip()]
    if args.compare_sentence_transformers:
        check = compare_with_sentence_transformers(items[: args.compare_sentence_transformers])
        print(json.dumps({"encoder_check": check}, indent=2))
        return
    items = items[: args.limit] if args.limit else items
    latencies = asyncio.run(latency(items, args.latency_items))
    encoder = StoredEncoder(get_encoder(), args.store)
    result = asyncio.run(run(items, args.claims, encoder))
    encoder.save()
    rows = result["per_item"]
    report = summarize(rows)
    report["local"]["median_latency_ms"] = round(statistics.median(latencies), 1) if latencies else None
    report["local"]["latency_items"] = len(latencies)
    report["local"].update(
        {"model": LocalJudge.model, "useful_threshold": LocalJudge.USEFUL_THRESHOLD}
    )
    report["tuned_even_items"] = summarize(rows[0::2])
    report["held_out_odd_items"] = summarize(rows[1::2])
    report["first_half"] = summarize(rows[: args.split])
    report["second_half"] = summarize(rows[args.split :]) if len(rows) > args.split else None
    report["claims"] = result["claims"]
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
