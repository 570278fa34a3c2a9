"""The structured-output request: the strict JSON schema of one call's answer, the `response_format`
of each mode, and the output budget (`max_tokens`) its answer needs.

The schema has one required property per asked context index and bounded strings, so a constrained
decoder (llama.cpp's grammar, vLLM's guided decoding, OpenAI's strict mode) can only produce an answer
of the right shape.
"""

from __future__ import annotations

import json
import threading
from functools import lru_cache
from typing import Any, Literal

from ragtrace.judges.llm.part import CLAIM_CHARS, LEVELS, MAX_CLAIMS, MAX_MISSING, REASON_CHARS, Part
from ragtrace.scoring import Aspect

# The structured-output modes, strongest first. `json_object_schema` is JSON mode with the schema
# alongside (`{"type": "json_object", "schema": ...}`), which llama-cpp-python turns into a grammar.
Mode = Literal["json_schema", "json_object_schema", "json_object", "text"]
MODES: tuple[Mode, ...] = ("json_schema", "json_object_schema", "json_object", "text")

# The structured-output mode each endpoint (api_base, model) was found to accept, for every judge of
# this process: a refusal learnt once is not probed again.
_ENDPOINT_MODES: dict[tuple[str, str], Mode] = {}
_ENDPOINT_LOCK = threading.Lock()


def endpoint_mode(endpoint: tuple[str, str]) -> Mode:
    """The strongest mode the endpoint (api_base, model) has not refused in this process."""
    return _ENDPOINT_MODES.get(endpoint, MODES[0])


def step_down(endpoint: tuple[str, str], rejected: Mode) -> None:
    """Remember that the endpoint refused `rejected`, so later calls (of any judge on it) start lower."""
    with _ENDPOINT_LOCK:
        if _ENDPOINT_MODES.get(endpoint, MODES[0]) == rejected:
            _ENDPOINT_MODES[endpoint] = MODES[MODES.index(rejected) + 1]


def _verdict_schema(aspects: frozenset[Aspect], reason_chars: int) -> dict[str, Any]:
    # The reason comes first: the verdict that follows is then conditioned on it.
    properties: dict[str, Any] = {"reason": {"type": "string", "maxLength": reason_chars}}
    if Aspect.USEFULNESS in aspects:
        properties["useful"] = {"type": "boolean"}
    if Aspect.RELEVANCE in aspects:
        properties["level"] = {"type": "string", "enum": list(LEVELS)}
        properties["used"] = {"type": "boolean"}
    return {"type": "object", "properties": properties, "required": list(properties), "additionalProperties": False}


@lru_cache(maxsize=64)
def schema_text(part: Part, reason_chars: int) -> str:
    properties: dict[str, Any] = {}
    if part.per_context:
        verdict = _verdict_schema(part.per_context, reason_chars)
        keys = [str(i) for i in part.indices]
        properties["contexts"] = {
            "type": "object",
            "properties": {k: verdict for k in keys},
            "required": keys,
            "additionalProperties": False,
        }
    if part.missing:
        properties["missing"] = {
            "type": "array",
            "items": {"type": "string", "maxLength": reason_chars},
            "maxItems": MAX_MISSING,
        }
    if part.claims:
        claim = {
            "type": "object",
            "properties": {
                "claim": {"type": "string", "maxLength": CLAIM_CHARS},
                "supported": {"type": "boolean"},
                "context_indices": {"type": "array", "items": {"type": "integer", "minimum": 0}},
            },
            "required": ["claim", "supported", "context_indices"],
            "additionalProperties": False,
        }
        properties["claims"] = {"type": "array", "items": claim, "maxItems": MAX_CLAIMS}
    schema = {"type": "object", "properties": properties, "required": list(properties), "additionalProperties": False}
    return json.dumps(schema, separators=(",", ":"))


def answer_schema(part: Part, reason_chars: int = REASON_CHARS) -> dict[str, Any]:
    """The strict JSON schema of one call's answer (cached by what varies: the part and the bound)."""
    schema: dict[str, Any] = json.loads(schema_text(part, reason_chars))
    return schema


def response_format(part: Part, mode: Mode, reason_chars: int = REASON_CHARS) -> dict[str, Any] | None:
    if mode == "json_schema":
        return {
            "type": "json_schema",
            "json_schema": {"name": "verdicts", "strict": True, "schema": answer_schema(part, reason_chars)},
        }
    if mode == "json_object_schema":
        return {"type": "json_object", "schema": answer_schema(part, reason_chars)}
    if mode == "json_object":
        return {"type": "json_object"}
    return None


def output_budget(part: Part, ground_truth_tokens: int, reason_chars: int = REASON_CHARS) -> int:
    """`max_tokens` for one call: what a complete answer of this shape needs, with room to spare.

    A verdict is its key, the field names and values (about 6 tokens a field) and a reason of at most
    `reason_chars` characters (about 3 characters a token); claims restate the ground truth once.
    """
    reason = reason_chars // 3 + 1
    per_verdict = 8 + 6 * (len(part.per_context) + (1 if Aspect.RELEVANCE in part.per_context else 0)) + reason
    tokens = 16 + len(part.indices if part.per_context else ()) * per_verdict
    if part.missing:
        tokens += MAX_MISSING * reason
    if part.claims:
        tokens += int(ground_truth_tokens * 1.5) + MAX_CLAIMS * 16
    return int(tokens * 1.25) + 16
