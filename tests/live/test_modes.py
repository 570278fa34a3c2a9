"""Enrich and Link, the one place the two modes differ: what a released trace sends on."""

from __future__ import annotations

import logging

import pytest

from ragtrace.capture import DEFAULT_RULES
from ragtrace.live.enrich import Evaluation
from ragtrace.live.modes import QUEUE_FULL, Enrich, Link, Mode, Verdict
from ragtrace.scoring import JudgeUsage, ScoreResult
from tests.live.seams import ended_spans, span_id, span_named


def mode(kind: type[Mode]) -> Mode:
    return kind(reason_max_chars=500, model="m", prompt_version="v", rules=DEFAULT_RULES)


def scored(target: int) -> Verdict:
    evaluation = Evaluation((ScoreResult(name="context_precision", score=0.5),), JudgeUsage(calls=1))
    return Verdict(1, {"scored": 1}, evaluations={target: [evaluation]})


def test_enrich_sends_every_span_once_with_the_scores_on_the_evaluated_one() -> None:
    spans = ended_spans()
    retrieval = span_named(spans, "retrieve")
    sent = mode(Enrich).send(spans, scored(span_id(retrieval)))
    assert [s.name for s in sent] == [s.name for s in spans]
    written = span_named(sent, "retrieve")
    assert written is not retrieval and written.attributes["ragtrace.context_precision.score"] == 0.5
    assert all(s is o for s, o in zip(sent, spans, strict=True) if s.name != "retrieve")


def test_link_sends_only_evaluation_spans_linked_to_the_evaluated_span() -> None:
    spans = ended_spans()
    retrieval = span_named(spans, "retrieve")
    sent = mode(Link).send(spans, scored(span_id(retrieval)))
    assert [s.name for s in sent] == ["evaluation context_precision"]
    assert sent[0].links[0].context.span_id == span_id(retrieval)


def test_an_outcome_is_said_on_each_retrieval_span_only() -> None:
    spans = ended_spans()
    sent = mode(Enrich).send(spans, Verdict.unjudged(1, QUEUE_FULL, "queue_full"))
    status = {s.name: (s.attributes or {}).get("ragtrace.eval.status") for s in sent}
    assert status == {"retrieve": "skipped", "chat": None, "step 0": None, "rag request": None}
    [linked] = mode(Link).send(spans, Verdict.unjudged(1, QUEUE_FULL))
    assert linked.attributes["ragtrace.eval.error"] == "queue_full"


def test_a_verdict_with_nothing_to_say_sends_the_spans_as_they_are_or_nothing() -> None:
    spans = ended_spans()
    assert mode(Enrich).send(spans, Verdict(1, {"not_rag": 1})) == spans
    assert mode(Link).send(spans, Verdict(1, {"not_rag": 1})) == []


def test_writes_of_the_scoring_process_are_used_as_they_came() -> None:
    spans = ended_spans()
    retrieval = span_id(span_named(spans, "retrieve"))
    sent = mode(Enrich).send(spans, Verdict(1, writes={retrieval: ({"written.there": 1}, [])}))
    assert span_named(sent, "retrieve").attributes["written.there"] == 1


def test_only_enrich_holds_spans_and_keeps_them_counted_while_judged() -> None:
    spans = ended_spans()
    assert mode(Enrich).holds_spans and mode(Enrich).counted_while_judged(spans) == len(spans)
    assert not mode(Link).holds_spans and mode(Link).counted_while_judged(spans) == 0


def test_spans_never_held_go_on_themselves_in_link_mode_too() -> None:
    spans = ended_spans()
    unheld = mode(Link).send_unheld(spans, Verdict.unjudged(0, QUEUE_FULL))
    assert unheld[: len(spans)] == spans and [s.name for s in unheld[len(spans):]] == ["evaluation"]
    assert len(mode(Enrich).send_unheld(spans, Verdict.unjudged(0, QUEUE_FULL))) == len(spans)


def test_scores_for_a_span_that_did_not_wait_are_said_once(caplog: pytest.LogCaptureFixture) -> None:
    spans = ended_spans()
    retrieval, chat = span_named(spans, "retrieve"), span_named(spans, "chat")
    enrich = mode(Enrich)
    with caplog.at_level(logging.WARNING, logger="ragtrace"):
        for _ in range(2):
            sent = enrich.send([retrieval], scored(span_id(chat)))  # the chat span went on already
            assert sent == [retrieval]
    assert [r.getMessage() for r in caplog.records if "before their scores" in r.getMessage()] == [
        "ragtrace: 1 evaluated span(s) had gone on before their scores; they carry none"]
