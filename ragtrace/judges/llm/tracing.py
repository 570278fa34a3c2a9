"""Opt-in traces of the judge's own work: each judgement a span `ragtrace.judge`, each call to the model a
child span `chat <model>` with the GenAI conventions' attributes (tokens, finish reason, cost; latency is the
span's duration), the messages too when content capture is on (redacted first).

Off by default (`RAGTRACE_TRACE_JUDGE`). The spans go to a tracer provider of their own, never the app's:
the pipeline that scores the app's traces never sees them, so a judge span is never scored nor can it
loop. By default that provider exports over OTLP as the `OTEL_EXPORTER_OTLP_*` variables say, under the
service name `ragtrace-judge`. The scored span names its judgement's trace (`ragtrace.judge.trace_id`), so a
strange score can be followed into the judge's reasoning.

`TracedTransport` wraps any `Transport` (one method), so it composes with the litellm transport or any other.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, ClassVar

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import SpanKind, Status, StatusCode, Tracer, TracerProvider

from ragtrace._state import PerProcessState
from ragtrace.judges.llm.transport import Answer, Call, Transport

__all__ = ["CONTENT_ENV", "TRACE_ENV", "JudgeTraces", "TracedTransport", "judge_traces_from_env"]

#: Turns judge traces on ("true", "1", "yes").
TRACE_ENV = "RAGTRACE_TRACE_JUDGE"
#: The GenAI instrumentations' switch for recording message content; off unless set true.
CONTENT_ENV = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
_TRUE = ("1", "true", "yes", "on")

_default_lock = threading.Lock()
_default_provider: TracerProvider | None = None


def _own_provider() -> TracerProvider:
    """This process's judge tracer provider: OTLP as the standard variables say, service `ragtrace-judge`."""
    global _default_provider
    with _default_lock:
        if _default_provider is None:
            from opentelemetry.sdk.resources import Resource
            from opentelemetry.sdk.trace import TracerProvider as SdkTracerProvider
            from opentelemetry.sdk.trace.export import BatchSpanProcessor

            provider = SdkTracerProvider(resource=Resource.create({"service.name": "ragtrace-judge"}))
            provider.add_span_processor(BatchSpanProcessor(_otlp_exporter()))
            _default_provider = provider
        return _default_provider


def _otlp_exporter() -> Any:
    protocol = os.environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL")
    if protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as Grpc

        return Grpc()
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as Http

    return Http()


class JudgeTraces(PerProcessState):
    """Where and how judge spans are recorded. `provider`: a tracer provider that is NOT the app's (default:
    one of ragtrace's own exporting over OTLP, made per process); `capture_content` records the messages
    (default: `OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`), each through `redact` first."""

    _per_process: ClassVar[dict[str, Callable[[Any], Any]]] = {"_tracer": lambda traces: None}

    def __init__(
        self,
        provider: TracerProvider | None = None,
        *,
        capture_content: bool | None = None,
        redact: Callable[[str], str] | None = None,
    ) -> None:
        if provider is not None and provider is trace.get_tracer_provider():
            raise ValueError("judge traces need a tracer provider of their own, not the app's global one")
        self.provider = provider
        env_content = os.environ.get(CONTENT_ENV, "").strip().lower() in _TRUE
        self.capture_content = env_content if capture_content is None else capture_content
        self.redact = redact
        self._tracer: Tracer | None = None

    def __getstate__(self) -> dict[str, Any]:
        state = super().__getstate__()
        state["provider"] = None  # another process exports through a provider of its own
        return state

    @property
    def tracer(self) -> Tracer:
        if self._tracer is None:
            self._tracer = (self.provider or _own_provider()).get_tracer("ragtrace.judge")
        return self._tracer

    def text(self, value: str) -> str:
        return self.redact(value) if self.redact is not None else value

    @contextlib.contextmanager
    def judgement(self, model: str, prompt_version: str) -> Iterator[str]:
        """A `ragtrace.judge` root span (a trace of its own, whatever is current) around one judgement; yields
        its trace id in hex, for the scored span to name."""
        span = self.tracer.start_span(
            "ragtrace.judge", context=otel_context.Context(), kind=SpanKind.INTERNAL,
            attributes={"gen_ai.operation.name": "evaluate", "gen_ai.request.model": model,
                        "ragtrace.judge.prompt_version": prompt_version},
        )
        token = otel_context.attach(trace.set_span_in_context(span))
        try:
            yield f"{span.get_span_context().trace_id:032x}"
        except BaseException as exc:
            span.set_status(Status(StatusCode.ERROR, type(exc).__name__))
            raise
        finally:
            otel_context.detach(token)
            span.end()


def judge_traces_from_env(redact: Callable[[str], str] | None = None) -> JudgeTraces | None:
    """`JudgeTraces()` when `RAGTRACE_TRACE_JUDGE` is true, else None (the default: nothing is traced)."""
    if os.environ.get(TRACE_ENV, "").strip().lower() in _TRUE:
        return JudgeTraces(redact=redact)
    return None


def _provider_of(model: str) -> str:
    provider, slash, _ = model.partition("/")
    return provider if slash else "unknown"


class TracedTransport:
    """A `Transport` whose every call is a `chat <model>` span (kind CLIENT) of the judge's trace."""

    def __init__(self, inner: Transport, traces: JudgeTraces, model: str) -> None:
        self.inner, self.traces, self.model = inner, traces, model

    def __repr__(self) -> str:
        return f"TracedTransport({self.inner!r})"

    async def complete(self, call: Call) -> Answer:
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": _provider_of(self.model),
            "gen_ai.request.model": self.model,
            "gen_ai.request.temperature": call.temperature,
            "gen_ai.request.max_tokens": call.max_tokens,
        }
        if call.response_format is not None:
            attributes["gen_ai.output.type"] = "json"
        if self.traces.capture_content:
            messages = [{"role": m["role"], "parts": [{"type": "text", "content": self.traces.text(m["content"])}]}
                        for m in call.messages]
            attributes["gen_ai.input.messages"] = json.dumps(messages)
        tracer = self.traces.tracer
        with tracer.start_as_current_span(f"chat {self.model}", kind=SpanKind.CLIENT, attributes=attributes,
                                          record_exception=True, set_status_on_exception=True) as span:
            started = time.perf_counter()
            answer = await self.inner.complete(call)
            span.set_attributes({
                "gen_ai.usage.input_tokens": answer.input_tokens,
                "gen_ai.usage.output_tokens": answer.output_tokens,
                "gen_ai.response.finish_reasons": [answer.finish_reason or "unknown"],
                "ragtrace.judge.latency_ms": (time.perf_counter() - started) * 1000.0,
            })
            if answer.cost is not None:
                span.set_attribute("ragtrace.judge.cost_usd", answer.cost)
            if self.traces.capture_content:
                reply = [{"role": "assistant", "parts": [{"type": "text", "content": self.traces.text(answer.content)}],
                          "finish_reason": answer.finish_reason or "unknown"}]
                span.set_attribute("gen_ai.output.messages", json.dumps(reply))
            return answer
