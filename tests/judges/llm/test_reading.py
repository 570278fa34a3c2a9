"""read_reply: from a reply's text to the verdicts it holds and what to tell the judge about the rest."""

from __future__ import annotations

import json

from ragtrace.judges.llm.part import Part
from ragtrace.judges.llm.reading import read_reply
from ragtrace.scoring import Aspect

PART = Part(frozenset({Aspect.USEFULNESS}), (0, 1))
WHOLE = {"contexts": {"0": {"reason": "a", "useful": True}, "1": {"reason": "b", "useful": False}}}


def test_a_whole_reply_is_read_with_nothing_to_say() -> None:
    reading, error = read_reply(json.dumps(WHOLE), PART, 2)
    assert sorted(reading.verdicts) == [0, 1] and error == "" and not reading.from_cut
    assert reading.left(PART) is None


def test_a_cut_reply_keeps_what_closed_and_says_so() -> None:
    text = json.dumps(WHOLE)
    reading, error = read_reply(text[: text.index('"1"') + 6], PART, 2)
    assert list(reading.verdicts) == [0] and reading.from_cut
    assert reading.left(PART) == Part(frozenset({Aspect.USEFULNESS}), (1,))
    assert "no valid verdict for context indices [1]" in error


def test_a_key_given_twice_is_not_read_at_all() -> None:
    reading, error = read_reply('{"contexts": {"0": {"reason": "a", "useful": true}, "0": {}}}', PART, 2)
    assert not reading.progress() and "twice" in error


def test_reasoning_without_an_answer_and_an_empty_reply_are_told_apart() -> None:
    _, thinking = read_reply("<think>first I will", PART, 2)
    _, apart = read_reply("", PART, 2, reasoned=True)
    _, empty = read_reply("   ", PART, 2)
    assert "only reasoning" in thinking and "only reasoning" in apart
    assert empty == "the reply was empty; reply with a JSON object"


def test_prose_that_is_not_json_is_the_error_shown_back() -> None:
    reading, error = read_reply("I think context 0 is useful.", PART, 2)
    assert not reading.progress() and "not JSON" in error and not reading.from_cut
