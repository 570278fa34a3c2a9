"""Which convention a span follows, and what it says: the one entry point over genai/openinference/openllmetry
and Haystack's own tracing.

`span_role` runs on the application's thread for every ended span, so it only does dictionary
lookups (and, for OpenLLMetry task spans, one bounded substring search). The `read_*` functions run
at assembly time, off the application's thread, and may parse JSON.
"""

from __future__ import annotations

from typing import Literal

from opentelemetry.sdk.trace import ReadableSpan

from ragtrace._sdk import has_events
from ragtrace.capture import genai, haystack, openinference, openllmetry, tools
from ragtrace.capture.rules import DEFAULT_RULES, CaptureRules
from ragtrace.capture.values import (
    Attrs,
    CaptureLimits,
    RetrievalReading,
    Skip,
    answer_text,
    attrs_of,
    maybe_json,
    query_from,
    text_leaves,
)

Role = Literal["retrieval", "generation"]
Convention = Literal["genai", "openinference", "openllmetry", "haystack"]
# OpenLLMetry LLM spans without gen_ai.operation.name say what they are here.
LLM_REQUEST_TYPE = "llm.request.type"
LLM_REQUEST_TYPES = frozenset({"chat", "completion"})
DB_SYSTEMS = frozenset({openllmetry.DB_SYSTEM, openllmetry.DB_SYSTEM_NAME})
_OUTPUTS = frozenset({"gen_ai.completion.0.content", genai.OUTPUT_MESSAGES})
_MARKERS = frozenset(
    {genai.OPERATION, openinference.KIND, openllmetry.SPAN_KIND, LLM_REQUEST_TYPE} | DB_SYSTEMS | _OUTPUTS
    | haystack.MARKERS
)
# A span without any of these keys is no retrieval, whatever the convention.
RETRIEVAL_MARKERS = frozenset(
    {genai.OPERATION, openinference.KIND, openllmetry.SPAN_KIND, haystack.COMPONENT_TYPE, haystack.TOOL_NAME}
    | DB_SYSTEMS
)


def _text(value: object) -> str:
    return value if isinstance(value, str) else ""


def classify(
    span: ReadableSpan, rules: CaptureRules = DEFAULT_RULES, attrs: Attrs | None = None
) -> tuple[Role, Convention, str] | None:
    """(role, convention, shape) of a span, or None when it is neither retrieval nor generation.

    `shape` names the reader: "genai", "openinference", "task", "vector_db", or "<convention>_tool" for a
    tool call taken as a retrieval (`tools.is_retrieval`). Conventions are tried in a fixed order, so a
    span carrying several is read by the first that claims it. `attrs`: the span's, when the caller has them.
    """
    if attrs is None:
        attrs = attrs_of(span)
    # One C-level pass over the keys finds which markers exist, so absent keys cost no lookup
    # (the SDK's attribute mapping raises KeyError internally on every missed `get`).
    present = _MARKERS.intersection(attrs)
    if not present:
        return None
    if genai.OPERATION in present:
        operation = attrs[genai.OPERATION]
        operation = operation if isinstance(operation, str) else ""  # a list value is not hashable
        if operation in genai.RETRIEVAL_OPERATIONS:
            return "retrieval", "genai", "genai"
        if operation in genai.GENERATION_OPERATIONS:
            return "generation", "genai", "genai"
        if operation == tools.GENAI_OPERATION and tools.is_retrieval(span, attrs, "genai", rules):
            return "retrieval", "genai", "genai_tool"
    if openinference.KIND in present:
        kind = attrs[openinference.KIND]
        kind = kind.upper() if isinstance(kind, str) else kind
        if kind == "RETRIEVER":
            return "retrieval", "openinference", "openinference"
        if kind == "LLM" and not openinference.is_prompt_step(attrs):
            return "generation", "openinference", "openinference"
        if kind == tools.OPENINFERENCE_KIND and tools.is_retrieval(span, attrs, "openinference", rules):
            return "retrieval", "openinference", "openinference_tool"
    traceloop = _text(attrs[openllmetry.SPAN_KIND]) if openllmetry.SPAN_KIND in present else ""
    if traceloop in openllmetry.TASK_KINDS:
        tool = traceloop == tools.OPENLLMETRY_KIND
        if tool and tools.is_retrieval(span, attrs, "openllmetry", rules):
            return "retrieval", "openllmetry", "openllmetry_tool"
        excluded = tool and tools.excluded(span, attrs, "openllmetry", rules)
        if not excluded and openllmetry.is_retriever_task(span, attrs):
            return "retrieval", "openllmetry", "task"
    if present & DB_SYSTEMS and openllmetry.db_system(attrs) is not None and openllmetry.is_vector_query(span, attrs):
        return "retrieval", "openllmetry", "vector_db"
    if LLM_REQUEST_TYPE in present and _text(attrs[LLM_REQUEST_TYPE]) in LLM_REQUEST_TYPES:
        return "generation", "openllmetry", "genai"
    if present & _OUTPUTS:
        return "generation", "genai", "genai"
    if not present.isdisjoint(haystack.MARKERS):
        return _haystack(span, attrs, present, rules)
    return None


def _haystack(
    span: ReadableSpan, attrs: Attrs, present: frozenset[str], rules: CaptureRules
) -> tuple[Role, Convention, str] | None:
    """Haystack's own tracing: a retriever or generator component, an agent's model call or tool call."""
    found = haystack.role(attrs, present)
    if found == "tool":
        taken = tools.is_retrieval(span, attrs, "haystack", rules)
        return ("retrieval", "haystack", "haystack_tool") if taken else None
    if found == "retrieval":
        return "retrieval", "haystack", "haystack"
    return ("generation", "haystack", "haystack") if found == "generation" else None


def span_role(span: ReadableSpan, rules: CaptureRules = DEFAULT_RULES) -> Role | None:
    """"retrieval", "generation" or None; constant-time and never raises (any error means None)."""
    try:
        found = classify(span, rules)
    except Exception:
        return None
    return found[0] if found is not None else None


def read_retrieval(
    span: ReadableSpan, shape: str, limits: CaptureLimits, notes: set[str], rules: CaptureRules = DEFAULT_RULES
) -> RetrievalReading:
    """Documents, query and retriever name of a retrieval span; raises Skip to pass the span over."""
    attrs = attrs_of(span)
    if shape.endswith("_tool"):
        return tools.read(span, attrs, shape, rules, limits, notes)
    if shape == "genai":
        return genai.read_retrieval(span, attrs, limits, notes)
    if shape == "openinference":
        return openinference.read_retrieval(span, attrs, limits, notes)
    if shape == "task":
        return openllmetry.read_task(span, attrs, limits, notes)
    if shape == "vector_db":
        return openllmetry.read_vector_db(span, attrs, limits, notes)
    if shape == "haystack":
        return haystack.read_retrieval(span, attrs, limits, notes)
    raise Skip("not_rag")


def read_response(span: ReadableSpan, shape: str, limits: CaptureLimits, notes: set[str]) -> str:
    """The answer a generation span gave ("" when it recorded none); out of a structured completion
    (JSON, DSPy's `[[ ## answer ## ]]` fields), the answer field the app was handed."""
    attrs = attrs_of(span)
    if shape == "openinference":
        return answer_text(openinference.read_response(span, attrs, limits, notes), limits)
    if shape == "haystack":
        return answer_text(haystack.read_response(attrs, limits), limits)
    return answer_text(genai.read_response(span, attrs, limits, notes), limits)


def read_user_message(span: ReadableSpan, shape: str, limits: CaptureLimits, notes: set[str]) -> str | None:
    """The last thing the user asked a generation span; read only when its retrieval has no query."""
    attrs = attrs_of(span)
    if shape == "openinference":
        return openinference.user_message(attrs)
    if shape == "haystack":
        return haystack.user_message(attrs, limits)
    return genai.user_message(span, attrs, limits, notes)


def read_input(span: ReadableSpan, limits: CaptureLimits, notes: set[str], attrs: Attrs | None = None) -> str | None:
    """The user's question as a trace's root span records it, whatever the convention (`attrs`: the span's,
    when the caller has them)."""
    if attrs is None:
        attrs = attrs_of(span)
    if not attrs and not has_events(span):
        return None
    found = openinference.input_query(attrs, limits, notes)
    if found is None and has_events(span):
        found = genai.user_message(span, attrs, limits, notes)
    if found is None:
        raw = attrs.get(openllmetry.ENTITY_INPUT)
        if isinstance(raw, str):
            found = query_from(maybe_json(raw, limits))
    if found is None:
        found = genai.user_message(span, attrs, limits, notes)
    if found is None:
        found = openinference.user_message(attrs)
    if found is None:
        found = haystack.input_query(attrs, limits)
    return found


# Where a generation's input says what it was given: prompts, messages, template variables.
_INPUT_KEYS = frozenset({
    openinference.INPUT_VALUE, genai.INPUT_MESSAGES, "gen_ai.system_instructions", openllmetry.ENTITY_INPUT,
    "llm.prompts", "llm.prompt_template.variables",
})
_INPUT_PREFIXES = (openinference.INPUT_MESSAGES_PREFIX, "gen_ai.prompt.")
# A flattened message's role says who spoke ("system", "user"), not what the model was given to read.
_ROLE_SUFFIX = ".role"


def read_input_texts(span: ReadableSpan, limits: CaptureLimits) -> list[str]:
    """Every text in a generation's input (messages, prompt, template variables), JSON unpacked: the
    evidence of which retrieved texts or question it was given, whatever the convention."""
    attrs = attrs_of(span)
    texts: list[str] = []
    for key, value in attrs.items():
        if isinstance(key, str) and (
            key in _INPUT_KEYS or (key.startswith(_INPUT_PREFIXES) and not key.endswith(_ROLE_SUFFIX))
        ):
            text_leaves(value, limits, texts)
    if not haystack.MARKERS.isdisjoint(attrs):  # the messages, not the tool definitions beside them
        haystack.input_texts(attrs, limits, texts)
    if has_events(span):  # GenAI instrumentations that record content on events
        for event in span.events:
            if event.name == genai.DETAILS_EVENT:
                text_leaves(attrs_of(event).get(genai.INPUT_MESSAGES), limits, texts)
        text_leaves(genai.event_messages(span, False, limits, set()), limits, texts)
    return texts


AGENT_OPERATIONS = frozenset({"invoke_agent"})
AGENT_KINDS = frozenset({"AGENT"})
_AGENT_MARKERS = frozenset({genai.OPERATION, openinference.KIND, openllmetry.SPAN_KIND}) | haystack.AGENT_MARKERS
# Where a trace says which conversation it belongs to, best first (OpenInference, GenAI, OpenLLMetry).
SESSION_KEYS = ("session.id", "gen_ai.conversation.id", "traceloop.association.properties.session_id",
                "traceloop.association.properties.conversation_id")
SESSION_MARKERS = frozenset(SESSION_KEYS)


def is_agent(attrs: Attrs) -> bool:
    """Whether a span with these attributes is an agent's run: GenAI `invoke_agent`, OpenInference `AGENT`,
    OpenLLMetry `agent`, Haystack's `haystack.agent.run`."""
    if _AGENT_MARKERS.isdisjoint(attrs):
        return False
    if haystack.is_agent(attrs):
        return True
    operation, kind = attrs.get(genai.OPERATION), attrs.get(openinference.KIND)
    traceloop = attrs.get(openllmetry.SPAN_KIND)
    return (
        (isinstance(operation, str) and operation in AGENT_OPERATIONS)
        or (isinstance(kind, str) and kind.upper() in AGENT_KINDS)
        or traceloop == "agent"
    )


def read_session(span: ReadableSpan) -> str | None:
    """The conversation a span belongs to, when it says."""
    attrs = attrs_of(span)
    if SESSION_MARKERS.isdisjoint(attrs):  # one C-level pass: most spans say nothing
        return None
    for key in SESSION_KEYS:
        value = attrs.get(key)
        if isinstance(value, str) and value.strip():
            return value
        if isinstance(value, int) and not isinstance(value, bool):
            return str(value)
    return None


def read_user_turns(span: ReadableSpan, shape: str, limits: CaptureLimits, notes: set[str]) -> int:
    """How many user messages a generation's input holds: more than one replays a conversation."""
    attrs = attrs_of(span)
    if shape == "openinference":
        return openinference.user_turns(attrs)
    if shape == "haystack":
        return haystack.user_turns(attrs, limits)
    return genai.user_turns(span, attrs, limits, notes)


def describe_unclassified(span: ReadableSpan, rules: CaptureRules = DEFAULT_RULES) -> str | None:
    """Why a span that looks like a model call or a tool is not a generation or a retrieval, in words;
    None when nothing to say."""
    attrs = attrs_of(span)
    kind = attrs.get(openinference.KIND)
    if attrs.get(genai.OPERATION) == tools.GENAI_OPERATION:
        return tools.describe(span, attrs, "genai", rules)
    if isinstance(kind, str) and kind.upper() == tools.OPENINFERENCE_KIND:
        return tools.describe(span, attrs, "openinference", rules)
    if attrs.get(openllmetry.SPAN_KIND) == tools.OPENLLMETRY_KIND:
        return tools.describe(span, attrs, "openllmetry", rules)
    if haystack.TOOL_NAME in attrs:
        return tools.describe(span, attrs, "haystack", rules)
    component = attrs.get(haystack.COMPONENT_TYPE)
    if isinstance(component, str):
        return f"haystack component {component}: not a retriever or a generator"
    if isinstance(kind, str) and kind.upper() == "LLM" and openinference.is_prompt_step(attrs):
        return "tagged LLM (openinference) but built a prompt: a prompt template and no model output"
    if isinstance(kind, str):
        return f"openinference {kind}: not a retrieval or a generation"
    traceloop = attrs.get(openllmetry.SPAN_KIND)
    if isinstance(traceloop, str):
        return f"openllmetry {traceloop}: not a retrieval (no retriever name, no documents) or a generation"
    return None
