"""values.answer_text and tool_call_answer: the answer out of a model's structured completion or its tool call."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ragtrace.capture.values import DEFAULT_LIMITS, CaptureLimits, answer_text, tool_call_answer

REASONED = "Returns take 30 days; the warranty is two years."


@pytest.mark.parametrize(
    ("completion", "answer"),
    [
        # DSPy ChatAdapter: header-marked fields, the reasoning first, an end marker last
        (f"[[ ## reasoning ## ]]\n{REASONED}\n\n[[ ## answer ## ]]\nTwo years.\n\n[[ ## completed ## ]]\n",
         "Two years."),
        # a field not named for the answer: what is left without the reasoning and the end marker
        (f"[[ ## rationale ## ]]\n{REASONED}\n\n[[ ## summary ## ]]\nTwo years.\n\n[[ ## completed ## ]]",
         "Two years."),
        ("[[ ## title ## ]]\nWarranty\n\n[[ ## body ## ]]\nTwo years.", "Warranty\n\nTwo years."),
        ("[[ ## analysis ## ]]\nTwo years.\n\n[[ ## completed ## ]]", "Two years."),  # a field, not working
        # JSON mode: the answer field, or what is left once the reasoning is set apart
        (json.dumps({"reasoning": REASONED, "answer": "Two years."}), "Two years."),
        (json.dumps({"Answer": "Two years.", "sources": [1, 2]}), "Two years."),
        (json.dumps({"thinking": REASONED, "summary": "Two years."}), "Two years."),
        # tagged fields (DSPy XMLAdapter, prompts that ask for <answer>), XML escapes undone
        (f"<thinking>{REASONED}</thinking>\n<answer>\nTwo years &amp; no fee.\n</answer>", "Two years & no fee."),
        (f"<reasoning>{REASONED}</reasoning><summary>Two years.</summary>", "Two years."),
    ],
)
def test_answer_field_of_structured_output(completion: str, answer: str) -> None:
    assert answer_text(completion, DEFAULT_LIMITS) == answer


@pytest.mark.parametrize(
    "completion",
    [
        "Two years.",
        "",
        json.dumps({"name": "Ada", "city": "London"}),  # JSON data that is itself the answer
        json.dumps({"answer": 2, "reasoning": REASONED}),  # no text left to answer with
        "<p>Two <b>years</b>.</p>",  # HTML, not named fields
        "See <answer>Two years.</answer> above.",  # tags inside prose
        "The header is [[ ## answer ## ]] in DSPy.",  # a marker inside prose
        "[[ ## answer ## ]]\n\n[[ ## completed ## ]]",  # fields, all empty
        "{not json",
    ],
)
def test_other_text_is_kept_as_written(completion: str) -> None:
    assert answer_text(completion, DEFAULT_LIMITS) == completion


def test_json_over_the_parse_limit_is_kept() -> None:
    completion = json.dumps({"reasoning": REASONED, "answer": "Two years."})
    assert answer_text(completion, CaptureLimits(max_json_chars=10)) == completion


FRAGMENTS = ["[[ ## ", " ## ]]", "answer", "reasoning", "completed", "<answer>", "</answer>", "<thinking>",
             "</thinking>", "{", "}", '"answer": ', '"x"', "\n", " ", "&amp;", "Two years."]


@given(st.lists(st.sampled_from(FRAGMENTS) | st.text(max_size=8), max_size=20).map("".join))
def test_any_text_gives_text(completion: str) -> None:
    found = answer_text(completion, DEFAULT_LIMITS)
    assert isinstance(found, str)
    assert found == completion or found.strip()  # an extracted answer is never blank


@pytest.mark.parametrize(
    ("arguments", "answer"),
    [
        ([json.dumps({"answer": "Two years.", "citations": [0]})], "Two years."),  # JSON text (OpenAI, OpenInference)
        ([{"Response": "Two years."}], "Two years."),  # an object (GenAI `tool_call` parts)
        ([{"query": "warranty"}, {"final_answer": "Two years."}], "Two years."),  # the first call naming an answer
        ([{"query": "warranty length"}], None),  # an agent asking a search tool: no answer given
        ([{"thought": "search first", "query": "warranty"}], None),  # working set apart still names no answer
        (["not json", None, 3, {"answer": 2}], None),
    ],
)
def test_tool_call_answer(arguments: list[object], answer: str | None) -> None:
    assert tool_call_answer(arguments, DEFAULT_LIMITS) == answer
