"""A small RAG app that needs no model and no network: a BM25 retriever over a shipped corpus and an
extractive generator, instrumented with ragtrace's GenAI-semconv helpers. `ragtrace demo` runs it."""

from __future__ import annotations

import json
import math
import random
import re
from collections import Counter
from dataclasses import dataclass
from importlib import resources

from opentelemetry.trace import Tracer

from ragtrace.instrument import generation_span, retrieval_span
from ragtrace.scoring import Document

_WORD = re.compile(r"[a-z0-9]+")
_STOP = frozenset(
    [
        "a",
        "an",
        "and",
        "are",
        "as",
        "at",
        "be",
        "by",
        "did",
        "does",
        "for",
        "from",
        "has",
        "have",
        "how",
        "in",
        "is",
        "it",
        "its",
        "of",
        "on",
        "or",
        "the",
        "to",
        "was",
        "what",
        "when",
        "where",
        "which",
        "who",
        "whose",
        "why",
        "with",
    ]
)


def terms(text: str) -> list[str]:
    return [t for t in _WORD.findall(text.lower()) if t not in _STOP]


@dataclass(frozen=True)
class Passage:
    id: str
    title: str
    text: str


@dataclass(frozen=True)
class Question:
    query: str
    ground_truth: str | None


def _jsonl(name: str) -> list[dict[str, object]]:
    text = resources.files("ragtrace.demo").joinpath(name).read_text(encoding="utf-8")
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def load_corpus() -> list[Passage]:
    return [Passage(str(r["id"]), str(r["title"]), str(r["text"])) for r in _jsonl("corpus.jsonl")]


def load_questions() -> list[Question]:
    return [
        Question(str(r["query"]), r["ground_truth"] if isinstance(r["ground_truth"], str) else None)
        for r in _jsonl("questions.jsonl")
    ]


class BM25Retriever:
    """Okapi BM25 (k1=1.5, b=0.75) over title + text."""

    def __init__(self, passages: list[Passage], k1: float = 1.5, b: float = 0.75) -> None:
        self.passages = passages
        self.k1, self.b = k1, b
        self.docs = [Counter(terms(f"{p.title} {p.text}")) for p in passages]
        self.lengths = [sum(d.values()) for d in self.docs]
        self.avg_length = sum(self.lengths) / len(self.lengths)
        df: Counter[str] = Counter(t for d in self.docs for t in d)
        n = len(passages)
        self.idf = {t: math.log(1 + (n - f + 0.5) / (f + 0.5)) for t, f in df.items()}

    def search(self, query: str, k: int = 4) -> list[Document]:
        q = terms(query)
        scored = []
        for passage, doc, length in zip(self.passages, self.docs, self.lengths, strict=True):
            norm = self.k1 * (1 - self.b + self.b * length / self.avg_length)
            score = sum(self.idf.get(t, 0.0) * doc[t] * (self.k1 + 1) / (doc[t] + norm) for t in q if t in doc)
            scored.append((score, passage))
        scored.sort(key=lambda pair: -pair[0])
        return [Document(id=p.id, score=round(s, 4), content=p.text) for s, p in scored[:k]]


def extractive_answer(query: str, documents: list[Document]) -> str:
    """The sentence of the top two documents that shares most words with the query."""
    wanted = set(terms(query))
    best, best_overlap = "", 0
    for doc in documents[:2]:
        for sentence in re.split(r"(?<=[.!?])\s+", doc.content):
            overlap = len(wanted & set(terms(sentence)))
            if overlap > best_overlap:
                best, best_overlap = sentence, overlap
    return best if best_overlap >= 2 else "I could not find that in the knowledge base."


def stale_snapshot(passages: list[Passage], keep: float = 0.35, seed: int = 7) -> list[Passage]:
    """What a re-index that failed part-way leaves behind: a random share `keep` of the passages."""
    rng = random.Random(seed)
    return [p for p in passages if rng.random() < keep]


@dataclass(frozen=True)
class Answer:
    text: str
    trace_id: int


class DemoApp:
    """The app: retrieve the top `top_k` passages, answer from them. `retriever` can be swapped while it
    runs, as a re-index swaps an index under a live service."""

    RETRIEVER = "solar-bm25"  # the retriever's name on its spans: the drift series the scores belong to

    def __init__(self, tracer: Tracer, retriever: BM25Retriever | None = None, top_k: int = 2) -> None:
        self.tracer = tracer
        self.retriever = retriever if retriever is not None else BM25Retriever(load_corpus())
        self.top_k = top_k

    def answer(self, question: Question) -> Answer:
        """One request: a root span, a retrieval span and a generation span, as an instrumented app makes them."""
        attributes = {"input.value": question.query}
        if question.ground_truth:
            # A replayed golden question: its reference answer travels with the trace, so recall can be scored.
            attributes["ragtrace.ground_truth"] = question.ground_truth
        with self.tracer.start_as_current_span("rag.request", attributes=attributes) as root:
            with retrieval_span(question.query, data_source=self.RETRIEVER, tracer=self.tracer) as retrieval:
                documents = self.retriever.search(question.query, k=self.top_k)
                retrieval.record(documents)
            with generation_span(model="extractive-v1", query=question.query, tracer=self.tracer) as generation:
                response = extractive_answer(question.query, documents)
                generation.record(response)
            root.set_attribute("output.value", response)
        return Answer(response, root.get_span_context().trace_id)
