"""Lexical evidence for the local judge: tokens, BM25, weighted term coverage, sentence splitting.

Pure Python, no dependencies. An embedding model alone misses exact names and numbers that decide
whether a passage holds an answer; these functions supply that evidence, and BM25 is also the baseline
the local judge is measured against.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable, Sequence

# A short English stop list: function words carry no evidence of relevance.
_STOP_TEXT = """a about above after again against all am an and any are as at be because been before being below
    between both but by can could did do does doing down during each few for from further had has have
    having he her here hers herself him himself his how i if in into is it its itself just me more most my
    myself no nor not now of off on once only or other our ours ourselves out over own same she should so
    some such than that the their theirs them themselves then there these they this those through to too
    under until up very was we were what when where which while who whom why will with would you your
    yours yourself yourselves also did does s t"""
STOPWORDS = frozenset(_STOP_TEXT.split())

# Words a generated answer wraps its content in ("Based on the context, the answer is ..."): never the
# evidence that a passage was used.
_FILLER_TEXT = (
    "answer answers based context contexts according provided information passage passages "
    "document documents text source sources"
)
RESPONSE_FILLER = frozenset(_FILLER_TEXT.split())
# A yes/no answer judges the query's claim; it names nothing a passage could contain.
POLARITY = frozenset({"yes", "no", "true", "false"})

_TOKEN = re.compile(r"\w+", re.UNICODE)
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[\"'(\[]?[A-Z0-9])|(?<=;)\s+|\n+")
# A period after these (or after a lone initial, "J. K.") does not end a sentence.
_ABBREVIATION_TEXT = "mr mrs ms dr prof st jr sr vs etc inc co ltd no mt gen col lt sgt fr rev"
_ABBREVIATIONS = frozenset(_ABBREVIATION_TEXT.split())


def _stem(token: str) -> str:
    """Strip a plural/possessive 's' so 'films' matches 'film'; anything stronger hurts names."""
    if len(token) > 3 and token.endswith("s") and not token.endswith("ss") and not token.isdigit():
        return token[:-1]
    return token


def tokens(text: str) -> list[str]:
    """Lower-cased word tokens, lightly stemmed, stop words kept (BM25 and phrases need positions)."""
    return [_stem(t) for t in _TOKEN.findall(text.lower())]


def content_tokens(text: str) -> list[str]:
    """Tokens that can carry evidence: no stop words."""
    return [t for t in tokens(text) if t not in STOPWORDS]


def idf(documents: Sequence[Iterable[str]]) -> dict[str, float]:
    """BM25's smoothed IDF over a small collection, always > 0 (terms in every document still count)."""
    n = len(documents)
    df: Counter[str] = Counter()
    for doc in documents:
        df.update(set(doc))
    return {term: math.log((n - f + 0.5) / (f + 0.5) + 1.0) for term, f in df.items()}


def bm25_scores(
    query: Sequence[str], documents: Sequence[Sequence[str]], k1: float = 1.5, b: float = 0.75
) -> list[float]:
    """Okapi BM25 of one tokenized query against each tokenized document, IDF from the documents."""
    if not documents:
        return []
    weights = idf(documents)
    avg_len = sum(len(d) for d in documents) / len(documents) or 1.0
    scores: list[float] = []
    for doc in documents:
        tf = Counter(doc)
        norm = k1 * (1.0 - b + b * len(doc) / avg_len)
        score = 0.0
        for term in query:
            f = tf.get(term, 0)
            if f:
                score += weights[term] * f * (k1 + 1.0) / (f + norm)
        scores.append(score)
    return scores


def coverage(terms: Sequence[str], document: set[str], weights: dict[str, float] | None = None) -> float:
    """Share of the (IDF-weighted) distinct terms found in the document, in [0, 1]; 0 for no terms.

    Terms unseen in the collection get the largest weight present: a rare word is strong evidence.
    """
    distinct = set(terms)
    if not distinct:
        return 0.0
    default = max(weights.values(), default=1.0) if weights else 1.0
    total = found = 0.0
    for term in distinct:
        w = weights.get(term, default) if weights else 1.0
        total += w
        if term in document:
            found += w
    return found / total if total else 0.0


def contains_phrase(phrase: Sequence[str], document: Sequence[str]) -> bool:
    """The token sequence occurs contiguously in the document (an exact answer-string match)."""
    n = len(phrase)
    if n == 0 or n > len(document):
        return False
    first = phrase[0]
    return any(document[i] == first and list(document[i : i + n]) == list(phrase)
               for i in range(len(document) - n + 1))


def split_sentences(text: str) -> list[str]:
    """Sentences (and ';'-separated clauses), stripped, empty ones dropped. Good enough for claims."""
    out: list[str] = []
    for piece in _SENTENCE_END.split(text):
        piece = piece.strip()
        if not piece:
            continue
        last = out[-1].rsplit(None, 1)[-1] if out else ""
        word = last[:-1].lower()
        if last.endswith(".") and (word in _ABBREVIATIONS or (len(word) == 1 and word.isalpha())):
            out[-1] = f"{out[-1]} {piece}"
        else:
            out.append(piece)
    return out
