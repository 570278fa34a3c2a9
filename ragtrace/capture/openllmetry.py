"""OpenLLMetry (Traceloop): retriever task spans and vector-DB client spans.

Two shapes carry retrieved documents:
- a `traceloop.span.kind = task` (or `tool`) span whose `traceloop.entity.output` JSON holds
  documents: LangChain's serialized Documents (`{"lc": 1, ..., "kwargs": {"page_content": ...}}`),
  plain `{"page_content": ...}` objects, LlamaIndex `NodeWithScore` / `TextNode` JSON, Haystack
  `Document` dicts, or, for a span named like a retriever, a list of strings;
- a vector-DB client span (`db.system` chroma, pinecone, qdrant, ...) with one `db.query.result`
  event per hit (`db.query.result.document`, `.id`, `.score`, `.distance`, `.metadata`).
LLM spans use the GenAI attributes (`gen_ai.completion.{i}.content`, `gen_ai.output.messages`), read by
`genai.read_generation`.
"""

from __future__ import annotations

from typing import Any

from opentelemetry.sdk.trace import ReadableSpan

from ragtrace.capture.values import (
    Attrs,
    CaptureLimits,
    RetrievalReading,
    Skip,
    as_id,
    as_number,
    attrs_of,
    maybe_json,
    parse_json,
    query_from,
)
from ragtrace.scoring import Document

SPAN_KIND = "traceloop.span.kind"
ENTITY_NAME = "traceloop.entity.name"
ENTITY_INPUT = "traceloop.entity.input"
ENTITY_OUTPUT = "traceloop.entity.output"
TASK_KINDS = frozenset({"task", "tool"})
RETRIEVER_WORDS = ("retriev", "vectorstore", "vector_store", "similarity_search")
# How far into an entity output the cheap role check looks for a serialized document (LangChain
# writes `page_content` in the first few hundred characters); bounded: it runs on the app thread.
SNIFF_CHARS = 4_096

DB_SYSTEM = "db.system"
DB_SYSTEM_NAME = "db.system.name"  # the newer database semconv name
DB_OPERATION = "db.operation"
DB_OPERATION_NAME = "db.operation.name"
VECTOR_DBS = frozenset(
    {"chroma", "chromadb", "pinecone", "qdrant", "weaviate", "milvus", "lancedb", "marqo", "pgvector"}
)
QUERY_OPERATIONS = frozenset(
    {"query", "search", "query_points", "search_batch", "hybrid_search", "similarity_search", "near_text"}
)
RESULT_EVENT = "db.query.result"
_DOC_LIST_KEYS = (
    "documents", "docs", "source_documents", "input_documents", "context", "contexts", "results",
    "outputs", "output", "result",
)
_TEXT_KEYS = ("page_content", "text", "content", "document", "chunk")
_MAX_DEPTH = 6


def _names(span: ReadableSpan, attrs: Attrs) -> str:
    entity = attrs.get(ENTITY_NAME)
    return f"{span.name or ''} {entity if isinstance(entity, str) else ''}".lower()


# OpenLLMetry 0.62's operation for a graph node or chain step: named after the app's node ("retrieve"), which
# says nothing about whether the step is the retriever (its retriever callback is `vector_db_retrieve`).
NODE_OPERATION = "execute_task"


def is_named_retriever(span: ReadableSpan, attrs: Attrs) -> bool:
    """A span or entity named like a retriever (`VectorIndexRetriever.task`, `vector_db_retrieve ...`); not
    a graph node the app happened to call `retrieve`."""
    if attrs.get("gen_ai.operation.name") == NODE_OPERATION:
        return False
    return any(word in _names(span, attrs) for word in RETRIEVER_WORDS)


def is_retriever_task(span: ReadableSpan, attrs: Attrs) -> bool:
    """A task/tool span named like a retriever, or whose output JSON starts with a `"page_content"` key.

    The quoted key, not the bare word: prompt spans quote documents as `page_content='...'` reprs.
    """
    if is_named_retriever(span, attrs):
        return True
    output = attrs.get(ENTITY_OUTPUT)
    return isinstance(output, str) and output.find('"page_content"', 0, SNIFF_CHARS) >= 0


def db_system(attrs: Attrs) -> str | None:
    system = attrs.get(DB_SYSTEM)
    if system is None:
        system = attrs.get(DB_SYSTEM_NAME)
    return system.lower() if isinstance(system, str) and system.lower() in VECTOR_DBS else None


def is_vector_query(span: ReadableSpan, attrs: Attrs) -> bool:
    """A vector-DB span that searched: a query operation, or a result event among its first few."""
    operation = attrs.get(DB_OPERATION)
    if operation is None:
        operation = attrs.get(DB_OPERATION_NAME)
    if isinstance(operation, str) and operation.lower() in QUERY_OPERATIONS:
        return True
    return any(event.name == RESULT_EVENT for event in (span.events or ())[:4])


def _node_text(node: dict[str, Any]) -> str | None:
    """A LlamaIndex node's text: `text`, or `text_resource.text` in newer node schemas."""
    if isinstance(node.get("text"), str):
        return str(node["text"])
    resource = node.get("text_resource")
    return resource["text"] if isinstance(resource, dict) and isinstance(resource.get("text"), str) else None


def document_fields(item: Any, limits: CaptureLimits) -> dict[str, Any] | None:
    """One serialized document as `{page_content, metadata, id, score}`, whatever framework wrote it:
    LangChain `Document` (plain or its `Serializable.to_json()` `kwargs`), LlamaIndex `NodeWithScore`
    (`{node: {id_, text}, score}`) or bare `TextNode`, Haystack `Document.to_dict()` (`{id, content, meta,
    score}`). Items may be JSON strings (an encoder dumped a pydantic model); None for anything else."""
    if isinstance(item, str) and item.lstrip().startswith("{"):
        item = maybe_json(item, limits)
    if not isinstance(item, dict):
        return None
    if isinstance(item.get("page_content"), str):
        return item
    kwargs = item.get("kwargs")  # LangChain's Serializable.to_json() form
    if isinstance(kwargs, dict) and isinstance(kwargs.get("page_content"), str):
        return kwargs
    node = item.get("node")
    if isinstance(node, dict) and "id_" in node and (text := _node_text(node)) is not None:  # NodeWithScore
        return {"page_content": text, "id": node.get("id_"), "score": item.get("score"),
                "metadata": node.get("metadata")}
    if "id_" in item and (text := _node_text(item)) is not None:  # a bare TextNode
        return {"page_content": text, "id": item.get("id_"), "metadata": item.get("metadata")}
    if isinstance(item.get("content"), str) and "meta" in item and "role" not in item:  # Haystack Document
        return {"page_content": item["content"], "id": item.get("id"), "score": item.get("score"),
                "metadata": item.get("meta")}
    return None


def _is_document_list(value: list[Any], strings_ok: bool, limits: CaptureLimits) -> bool:
    if not value:
        return False
    first = value[0]
    if isinstance(first, list | tuple) and first:  # (document, score) pairs
        first = first[0]
    if document_fields(first, limits) is not None:
        return True
    return strings_ok and all(isinstance(v, str) for v in value[:20])


def find_documents(value: Any, limits: CaptureLimits, strings_ok: bool, depth: int = 0) -> list[Any] | None:
    """The first list of documents inside parsed entity JSON, searching document-ish keys first."""
    if depth > _MAX_DEPTH:
        return None
    if isinstance(value, str):
        parsed = maybe_json(value, limits)
        return None if parsed is value else find_documents(parsed, limits, strings_ok, depth + 1)
    if isinstance(value, list):
        if _is_document_list(value, strings_ok, limits):
            return value
        for item in value[:20]:
            found = find_documents(item, limits, False, depth + 1)
            if found is not None:
                return found
        return None
    if isinstance(value, dict):
        keys = [k for k in _DOC_LIST_KEYS if k in value] + [k for k in value if k not in _DOC_LIST_KEYS]
        for key in keys[:50]:
            found = find_documents(value[key], limits, strings_ok and key in _DOC_LIST_KEYS, depth + 1)
            if found is not None:
                return found
    return None


def _to_document(item: Any, limits: CaptureLimits) -> Document | None:
    score: float | None = None
    if isinstance(item, list | tuple) and len(item) == 2:
        item, score = item[0], as_number(item[1])
    fields = document_fields(item, limits)
    if fields is None:
        return Document(content=item, score=score) if isinstance(item, str) else None
    raw_metadata = fields.get("metadata")
    metadata: dict[str, Any] = raw_metadata if isinstance(raw_metadata, dict) else {}
    doc_id = as_id(fields.get("id")) or as_id(metadata.get("id"))
    if score is None:
        score = next(
            (s for s in (as_number(fields.get("score")), as_number(metadata.get("score")),
                         as_number(metadata.get("relevance_score"))) if s is not None),
            None,
        )
    return Document(content=fields["page_content"], id=doc_id, score=score)


def read_task(span: ReadableSpan, attrs: Attrs, limits: CaptureLimits, notes: set[str]) -> RetrievalReading:
    raw = attrs.get(ENTITY_OUTPUT)
    strings_ok = any(word in _names(span, attrs) for word in RETRIEVER_WORDS)
    items = find_documents(parse_json(raw, limits, "invalid_documents_json"), limits, strings_ok) if raw else None
    documents: list[Document] = []
    if items:
        if len(items) > limits.max_documents:
            notes.add("too_many_documents")
            items = items[: limits.max_documents]
        for item in items:
            document = _to_document(item, limits)
            if document is None:
                notes.add("invalid_document")
            else:
                documents.append(document)
    query: str | None = None
    raw_input = attrs.get(ENTITY_INPUT)
    if isinstance(raw_input, str):
        query = query_from(maybe_json(raw_input, limits))
    elif raw_input is not None:
        notes.add("wrong_attribute_type")
    if not documents:  # a task that only looked like a retriever
        raise Skip("no_documents")
    entity = attrs.get(ENTITY_NAME)
    return RetrievalReading(
        convention="openllmetry",
        retriever=entity if isinstance(entity, str) and entity else span.name or "",
        documents=documents,
        query=query,
        explicit=False,
    )


def _event_text(event_attrs: Attrs, limits: CaptureLimits) -> str | None:
    document = event_attrs.get(f"{RESULT_EVENT}.document")
    if isinstance(document, str):
        return document
    metadata = event_attrs.get(f"{RESULT_EVENT}.metadata")  # Pinecone-style hits keep the text here
    if isinstance(metadata, str):
        parsed = maybe_json(metadata, limits)
        if isinstance(parsed, dict):
            return next((parsed[k] for k in _TEXT_KEYS if isinstance(parsed.get(k), str)), None)
    return None


def read_vector_db(span: ReadableSpan, attrs: Attrs, limits: CaptureLimits, notes: set[str]) -> RetrievalReading:
    reading = RetrievalReading(convention="openllmetry", retriever=db_system(attrs) or span.name or "", explicit=False)
    hits = [event for event in (span.events or ()) if event.name == RESULT_EVENT]
    if len(hits) > limits.max_documents:
        notes.add("too_many_documents")
        hits = hits[: limits.max_documents]
    for event in hits:
        event_attrs = attrs_of(event)
        text = _event_text(event_attrs, limits)
        if text is None:
            notes.add("document_without_content")
            continue
        reading.documents.append(
            Document(
                content=text,
                id=as_id(event_attrs.get(f"{RESULT_EVENT}.id")),
                score=as_number(event_attrs.get(f"{RESULT_EVENT}.score")),
            )
        )
        reading.distances.append(as_number(event_attrs.get(f"{RESULT_EVENT}.distance")))
    if not reading.documents:  # no query text is recorded either: nothing to judge
        raise Skip("no_documents")
    return reading
