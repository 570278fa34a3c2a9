"""Which convention a span follows, and what it says: the one entry point over genai/openinference/openllmetry.

`span_role` runs on the application's thread for every ended span, so it only does dictionary
lookups (and, for OpenLLMetry task spans, one bounded substring search). The `read_*` functions run
at assembly time, off the application's thread, and may parse JSON.
"""

from __future__ import annotations

from typing import Literal

from opentelemetry.sdk.trace import ReadableSpan

from ragtrace.capture import genai, openinference, openllmetry
from ragtrace.capture.values import (
    CaptureLimits,
    GenerationReading,
    RetrievalReading,
    Skip,
    attrs_of,
    maybe_json,
    query_from,
)

Role = Literal["retrieval", "generation"]
Convention = Literal["genai", "openinference", "openllmetry"]
# OpenLLMetry LLM spans without gen_ai.operation.name say what they are here.
LLM_REQUEST_TYPE = "llm.request.type"
LLM_REQUEST_TYPES = frozenset({"chat", "completion"})


def classify(span: ReadableSpan) -> tuple[Role, Convention, str] | None:
    """(role, convention, shape) of a span, or None when it is neither retrieval nor generation.

    `shape` names the reader: "genai", "openinference", "task" or "vector_db". Conventions are
    tried in a fixed order, so a span carrying several is read by the first that claims it.
    """
    attrs = attrs_of(span)
    if not attrs:
        return None
    operation = attrs.get(genai.OPERATION)
    if isinstance(operation, str):
        if operation in genai.RETRIEVAL_OPERATIONS:
            return "retrieval", "genai", "genai"
        if operation in genai.GENERATION_OPERATIONS:
            return "generation", "genai", "genai"
    kind = attrs.get(openinference.KIND)
    if isinstance(kind, str):
        kind = kind.upper()
        if kind == "RETRIEVER":
            return "retrieval", "openinference", "openinference"
        if kind == "LLM":
            return "generation", "openinference", "openinference"
    task = attrs.get(openllmetry.SPAN_KIND)
    if isinstance(task, str) and task in openllmetry.TASK_KINDS and openllmetry.is_retriever_task(span, attrs):
        return "retrieval", "openllmetry", "task"
    if openllmetry.db_system(attrs) is not None and openllmetry.is_vector_query(span, attrs):
        return "retrieval", "openllmetry", "vector_db"
    request_type = attrs.get(LLM_REQUEST_TYPE)
    if isinstance(request_type, str) and request_type in LLM_REQUEST_TYPES:
        return "generation", "openllmetry", "genai"
    if "gen_ai.completion.0.content" in attrs or genai.OUTPUT_MESSAGES in attrs:
        return "generation", "genai", "genai"
    return None


def span_role(span: ReadableSpan) -> Role | None:
    """"retrieval", "generation" or None; constant-time and never raises (any error means None)."""
    try:
        found = classify(span)
    except Exception:
        return None
    return found[0] if found is not None else None


def read_retrieval(span: ReadableSpan, shape: str, limits: CaptureLimits, notes: set[str]) -> RetrievalReading:
    """Documents, query and retriever name of a retrieval span; raises Skip to pass the span over."""
    attrs = attrs_of(span)
    if shape == "genai":
        return genai.read_retrieval(span, attrs, limits, notes)
    if shape == "openinference":
        return openinference.read_retrieval(span, attrs, limits, notes)
    if shape == "task":
        return openllmetry.read_task(span, attrs, limits, notes)
    if shape == "vector_db":
        return openllmetry.read_vector_db(span, attrs, limits, notes)
    raise Skip("not_rag")


def read_generation(span: ReadableSpan, shape: str, limits: CaptureLimits, notes: set[str]) -> GenerationReading:
    attrs = attrs_of(span)
    if shape == "openinference":
        return openinference.read_generation(span, attrs, limits, notes)
    return genai.read_generation(span, attrs, limits, notes)


def read_input(span: ReadableSpan, limits: CaptureLimits, notes: set[str]) -> str | None:
    """The user's question as a trace's root span records it, whatever the convention."""
    attrs = attrs_of(span)
    found = openinference.input_query(attrs, limits, notes)
    if found is None:
        raw = attrs.get(openllmetry.ENTITY_INPUT)
        if isinstance(raw, str):
            found = query_from(maybe_json(raw, limits))
    if found is None:
        found = genai.user_message(span, attrs, limits, notes)
    if found is None:
        found = openinference.user_message(attrs)
    return found
