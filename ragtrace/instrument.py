"""Helpers for apps with no GenAI instrumentation: record retrieval and generation spans in the OTel
GenAI semantic conventions, which ragtrace (and any GenAI-aware backend) reads.

    with retrieval_span(query, data_source="faq") as retrieval:
        docs = index.search(query)
        retrieval.record(docs)
    with generation_span(model="templated", query=query) as generation:
        generation.record(answer)

`traced_retrieval` / `traced_generation` are the decorator forms, for sync and async functions.
"""

from __future__ import annotations

import functools
import inspect
import json
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from typing import Any, ParamSpec, Protocol, TypeVar, cast

from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind, Tracer

from ragtrace.scoring import Document

TRACER_NAME = "ragtrace.instrument"

P = ParamSpec("P")
R = TypeVar("R")


def _document(value: Document | str | Mapping[str, Any], rank: int) -> dict[str, Any]:
    if isinstance(value, str):
        return {"id": str(rank), "content": value}
    if isinstance(value, Document):
        doc = value.model_dump(exclude_none=True)
    else:
        doc = {k: value[k] for k in ("id", "score", "content") if k in value}
        if "content" not in doc:
            text = value.get("page_content", value.get("text"))
            if isinstance(text, str):
                doc["content"] = text
    doc.setdefault("id", str(rank))
    return doc


class RetrievalRecorder:
    def __init__(self, span: Span) -> None:
        self.span = span

    def record(self, documents: Iterable[Document | str | Mapping[str, Any]]) -> None:
        """Record the retrieved documents, in rank order (id, score and content)."""
        docs = [_document(d, i) for i, d in enumerate(documents)]
        self.span.set_attribute("gen_ai.retrieval.documents", json.dumps(docs, ensure_ascii=False))


class GenerationRecorder:
    def __init__(self, span: Span) -> None:
        self.span = span

    def record(self, response: str) -> None:
        message = [{"role": "assistant", "parts": [{"type": "text", "content": response}], "finish_reason": "stop"}]
        self.span.set_attribute("gen_ai.output.messages", json.dumps(message, ensure_ascii=False))


def _tracer(tracer: Tracer | None) -> Tracer:
    return tracer or trace.get_tracer(TRACER_NAME)


@contextmanager
def retrieval_span(
    query: str, *, data_source: str | None = None, tracer: Tracer | None = None
) -> Iterator[RetrievalRecorder]:
    """A `retrieval` span (gen_ai.operation.name=retrieval) carrying the query and, once recorded, documents."""
    attributes: dict[str, str] = {"gen_ai.operation.name": "retrieval", "gen_ai.retrieval.query.text": query}
    if data_source:
        attributes["gen_ai.data_source.id"] = data_source
    name = f"retrieval {data_source}" if data_source else "retrieval"
    with _tracer(tracer).start_as_current_span(name, kind=SpanKind.INTERNAL, attributes=attributes) as span:
        yield RetrievalRecorder(span)


@contextmanager
def generation_span(
    *,
    model: str = "",
    query: str | None = None,
    operation: str = "chat",
    tracer: Tracer | None = None,
) -> Iterator[GenerationRecorder]:
    """A generation span (chat by default) with the user message as input, when given."""
    attributes: dict[str, str] = {"gen_ai.operation.name": operation}
    if model:
        attributes["gen_ai.request.model"] = model
    if query is not None:
        attributes["gen_ai.input.messages"] = json.dumps(
            [{"role": "user", "parts": [{"type": "text", "content": query}]}], ensure_ascii=False
        )
    name = f"{operation} {model}" if model else operation
    with _tracer(tracer).start_as_current_span(name, kind=SpanKind.CLIENT, attributes=attributes) as span:
        yield GenerationRecorder(span)


def _first_str(args: tuple[Any, ...], kwargs: dict[str, Any], names: tuple[str, ...]) -> str:
    for name in names:
        if isinstance(kwargs.get(name), str):
            return cast(str, kwargs[name])
    return next((a for a in args if isinstance(a, str)), "")


class _Recorder(Protocol):
    def record(self, value: Any, /) -> None: ...


def _traced(
    open_span: Callable[[str], AbstractContextManager[_Recorder]],
    query_names: tuple[str, ...],
    recorded: Callable[[Any], Any],
) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """A decorator that opens a span around a sync or async call and records what the call returned."""

    def decorate(fn: Callable[P, R]) -> Callable[P, R]:
        if inspect.iscoroutinefunction(fn):
            async_fn = cast(Callable[P, Awaitable[Any]], fn)

            @functools.wraps(fn)
            async def async_wrapper(*args: P.args, **kwargs: P.kwargs) -> Any:
                with open_span(_first_str(args, kwargs, query_names)) as recorder:
                    result = await async_fn(*args, **kwargs)
                    recorder.record(recorded(result))
                    return result

            return cast(Callable[P, R], async_wrapper)

        @functools.wraps(fn)
        def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
            with open_span(_first_str(args, kwargs, query_names)) as recorder:
                result = fn(*args, **kwargs)
                recorder.record(recorded(result))
                return result

        return wrapper

    return decorate


def traced_retrieval(
    *, data_source: str | None = None, tracer: Tracer | None = None
) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Decorate `search(query, ...) -> documents` (sync or async): the first str argument is the query."""
    return _traced(
        lambda query: retrieval_span(query, data_source=data_source, tracer=tracer),
        ("query", "question"),
        lambda documents: documents,
    )


def traced_generation(
    *, model: str = "", tracer: Tracer | None = None
) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Decorate `answer(query, ...) -> str` (sync or async): the first str argument is the user message."""
    return _traced(
        lambda query: generation_span(model=model, query=query, tracer=tracer),
        ("query", "question", "prompt"),
        str,
    )
