"""The shapes real instrumentation libraries write, read back: a LangChain RAG chain (fake retriever and
fake chat model, no network) traced by OpenInference and by OpenLLMetry; a DSPy RAG program traced by
OpenInference, its LM answering from a local OpenAI-compatible server.

Skipped where the instrumentation packages are not installed (they are not ragtrace dependencies).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from ragtrace.capture import CaptureStats, extract_samples, span_role

QUESTION = "How long is the warranty?"
CONTEXTS = ["The warranty lasts two years.", "Returns are accepted within 30 days."]


@contextmanager
def _traced(instrumentor: Any) -> Iterator[tuple[TracerProvider, list[ReadableSpan]]]:
    """A provider exporting to memory, instrumented by `instrumentor` for the block and uninstrumented after
    it (even when it raised); the list holds the finished spans once the block has ended."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    finished: list[ReadableSpan] = []
    instrumentor.instrument(tracer_provider=provider)
    try:
        yield provider, finished
    finally:
        instrumentor.uninstrument()
    finished.extend(exporter.get_finished_spans())


def _run_chain(
    instrumentor: Any, model: Any = None, parser: Any = None, output: Any = "Two years."
) -> list[ReadableSpan]:
    """Instrument, run a retriever | prompt | chat model | parser chain once (by default a model that says
    "Two years." and a string parser), uninstrument; the finished spans."""
    from langchain_core.callbacks import CallbackManagerForRetrieverRun
    from langchain_core.documents import Document
    from langchain_core.language_models.fake_chat_models import FakeListChatModel
    from langchain_core.output_parsers import StrOutputParser
    from langchain_core.prompts import ChatPromptTemplate
    from langchain_core.retrievers import BaseRetriever
    from langchain_core.runnables import RunnablePassthrough

    class Handbook(BaseRetriever):
        def _get_relevant_documents(
            self, query: str, *, run_manager: CallbackManagerForRetrieverRun
        ) -> list[Document]:
            return [Document(page_content=text, metadata={"source": f"{i}.md"}) for i, text in enumerate(CONTEXTS)]

    with _traced(instrumentor) as (_, spans):
        prompt = ChatPromptTemplate.from_template("Context: {context}\nQuestion: {question}")
        chain = (
            {"context": Handbook(), "question": RunnablePassthrough()}
            | prompt
            | (model if model is not None else FakeListChatModel(responses=["Two years."]))
            | (parser if parser is not None else StrOutputParser())
        )
        assert chain.invoke(QUESTION) == output
    return spans


@pytest.fixture
def openinference_spans() -> Iterator[list[ReadableSpan]]:
    pytest.importorskip("langchain_core")
    module = pytest.importorskip("openinference.instrumentation.langchain")
    yield _run_chain(module.LangChainInstrumentor())


@pytest.fixture
def openllmetry_spans() -> Iterator[list[ReadableSpan]]:
    pytest.importorskip("langchain_core")
    module = pytest.importorskip("opentelemetry.instrumentation.langchain")
    yield _run_chain(module.LangchainInstrumentor())


def _by_name(spans: list[ReadableSpan], name: str) -> ReadableSpan:
    return next(s for s in spans if s.name == name)


def test_openinference_langchain_chain(openinference_spans: list[ReadableSpan]) -> None:
    spans = openinference_spans
    retriever, llm = _by_name(spans, "Handbook"), _by_name(spans, "FakeListChatModel")
    assert (span_role(retriever), span_role(llm)) == ("retrieval", "generation")
    stats = CaptureStats()
    [captured] = extract_samples(spans, stats=stats)
    assert captured.sample.context_texts == CONTEXTS
    assert captured.sample.query == QUESTION
    assert captured.sample.response == "Two years."
    assert captured.convention == "openinference"
    assert captured.retriever == "Handbook"
    assert retriever.context is not None and llm.context is not None
    ids = (retriever.context.span_id, llm.context.span_id)
    assert (captured.retrieval_span_id, captured.generation_span_id) == ids
    assert not stats.counts


def test_openllmetry_langchain_chain(openllmetry_spans: list[ReadableSpan]) -> None:
    spans = openllmetry_spans
    retriever = next(s for s in spans if (s.attributes or {}).get("traceloop.entity.name") == "Handbook")
    chat = next(s for s in spans if (s.attributes or {}).get("gen_ai.operation.name") == "chat")
    assert (span_role(retriever), span_role(chat)) == ("retrieval", "generation")
    stats = CaptureStats()
    [captured] = extract_samples(spans, stats=stats)
    assert captured.sample.context_texts == CONTEXTS
    assert captured.sample.query == QUESTION
    assert captured.sample.response == "Two years."
    assert captured.convention == "openllmetry"
    assert captured.retriever == "Handbook"
    assert retriever.context is not None and chat.context is not None
    ids = (retriever.context.span_id, chat.context.span_id)
    assert (captured.retrieval_span_id, captured.generation_span_id) == ids
    # RunnableParallel<context,question> repeats the documents in its output: one sample, not two.
    assert stats.counts == {"nested_retrieval": 1}


# What the model writes for a ChainOfThought("context, question -> answer") under each DSPy adapter: its
# reasoning field (quoting a context it then does not use) and its answer field, in the adapter's format.
DSPY_COMPLETIONS = {
    "chat": "[[ ## reasoning ## ]]\nReturns are accepted within 30 days, but the warranty lasts two years."
            "\n\n[[ ## answer ## ]]\nTwo years.\n\n[[ ## completed ## ]]",
    "json": json.dumps({"reasoning": "Returns are accepted within 30 days, but the warranty lasts two years.",
                        "answer": "Two years."}),
    "xml": "<reasoning>\nReturns are accepted within 30 days, but the warranty lasts two years.\n</reasoning>"
           "\n\n<answer>\nTwo years.\n</answer>",
}


def _run_dspy(adapter: str) -> list[ReadableSpan]:
    """A dspy.Module that retrieves (dspy.Retrieve over an in-memory corpus) and answers with
    ChainOfThought, its LM (through litellm) answering from the local chat server; the finished spans."""
    dspy = pytest.importorskip("dspy")
    module = pytest.importorskip("openinference.instrumentation.dspy")
    from dspy.dsp.utils import dotdict

    from examples._chat_server import local_chat_server

    def handbook(query: str, k: int = 3, **_: Any) -> list[Any]:
        return [dotdict(long_text=text) for text in CONTEXTS[:k]]

    class Rag(dspy.Module):  # type: ignore[misc]
        def __init__(self) -> None:
            self.retrieve = dspy.Retrieve(k=2)
            self.answer = dspy.ChainOfThought("context, question -> answer")

        def forward(self, question: str) -> Any:
            return self.answer(context=self.retrieve(question).passages, question=question)

    adapters = {"chat": dspy.ChatAdapter, "json": dspy.JSONAdapter, "xml": dspy.XMLAdapter}
    with (
        _traced(module.DSPyInstrumentor()) as (_, spans),
        local_chat_server({QUESTION: DSPY_COMPLETIONS[adapter]}) as base_url,
    ):
        lm = dspy.LM("openai/local-model", api_base=base_url, api_key="not-needed", cache=False, num_retries=0)
        with dspy.context(lm=lm, rm=handbook, adapter=adapters[adapter]()):
            assert Rag()(question=QUESTION).answer == "Two years."
    return spans


@pytest.mark.parametrize("adapter", sorted(DSPY_COMPLETIONS))
def test_openinference_dspy_program(adapter: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The response is the answer field DSPy parsed out of the completion and handed the program, not
    the completion with its reasoning (which mentions the return policy the answer does not use)."""
    monkeypatch.setenv("DSPY_CACHEDIR", str(tmp_path))  # dspy opens its disk cache when first imported
    spans = _run_dspy(adapter)
    retriever, lm = _by_name(spans, "Retrieve.forward"), _by_name(spans, "LM.__call__")
    assert (span_role(retriever), span_role(lm)) == ("retrieval", "generation")
    written = (lm.attributes or {})["llm.output_messages.0.message.content"]
    assert written == DSPY_COMPLETIONS[adapter] and "30 days" in written
    stats = CaptureStats()
    [captured] = extract_samples(spans, stats=stats)
    assert captured.sample.context_texts == CONTEXTS
    assert captured.sample.query == QUESTION
    assert captured.sample.response == "Two years."
    assert (captured.convention, captured.retriever, captured.pairing) == ("openinference", "Retrieve.forward",
                                                                           "contexts")
    assert retriever.context is not None and lm.context is not None
    assert (captured.retrieval_span_id, captured.generation_span_id) == (retriever.context.span_id,
                                                                         lm.context.span_id)
    assert not stats.counts


# Structured output through a tool call: the model answers by calling an `Answer` tool (LangChain's
# `with_structured_output`, instructor, a forced tool choice) and writes no text of its own.
ANSWER_ARGUMENTS = {"answer": "Two years.", "citations": [0]}


@contextmanager
def _model_server(reply: dict[str, Any]) -> Iterator[str]:
    """A model API on 127.0.0.1 that answers every POST with `reply`; yields its base URL (…/v1)."""
    from examples._chat_server import reply_json, serve

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            reply_json(self, reply)

    with serve(Handler) as base_url:
        yield base_url


_TOOL_CALL = {"id": "call_1", "type": "function",
              "function": {"name": "Answer", "arguments": json.dumps(ANSWER_ARGUMENTS)}}
OPENAI_TOOL_ANSWER = {  # a chat completion whose only output is an `Answer` tool call
    "id": "chatcmpl-1", "object": "chat.completion", "created": 0, "model": "local-model",
    "choices": [{"index": 0, "finish_reason": "tool_calls",
                 "message": {"role": "assistant", "content": None, "tool_calls": [_TOOL_CALL]}}],
    "usage": {"prompt_tokens": 40, "completion_tokens": 9, "total_tokens": 49},
}


# producer -> (module, instrumentor class, the scope its chat spans come from)
OPENAI_INSTRUMENTORS = {
    "openinference": ("openinference.instrumentation.openai", "OpenAIInstrumentor",
                      "openinference.instrumentation.openai"),
    "openllmetry": ("opentelemetry.instrumentation.openai", "OpenAIInstrumentor",
                    "opentelemetry.instrumentation.openai.v1"),
    "openai-v2": ("opentelemetry.instrumentation.openai_v2", "OpenAIInstrumentor",
                  "opentelemetry.util.genai.handler"),  # openai-v2 records through util-genai
}


@pytest.mark.parametrize("producer", sorted(OPENAI_INSTRUMENTORS))
def test_openai_client_structured_answer_through_a_tool_call(producer: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The OpenAI client under each OpenAI instrumentor, the retrieval recorded by ragtrace's helper: the
    response is the `answer` argument of the model's tool call (each instrumentor writes it its own way)."""
    openai = pytest.importorskip("openai")
    package, name, scope = OPENAI_INSTRUMENTORS[producer]
    instrumentor = getattr(pytest.importorskip(package), name)()
    from ragtrace.instrument import retrieval_span

    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "span_only")  # openai-v2's content
    with _traced(instrumentor) as (provider, spans), _model_server(OPENAI_TOOL_ANSWER) as base_url:
        tracer = provider.get_tracer("rag-app")
        with tracer.start_as_current_span("answer"):
            with retrieval_span(QUESTION, data_source="handbook", tracer=tracer) as retrieval:
                retrieval.record(CONTEXTS)
            answer_tool = {"type": "function", "function": {
                "name": "Answer", "parameters": {"type": "object", "properties": {"answer": {"type": "string"}}}}}
            completion = openai.OpenAI(base_url=base_url, api_key="not-needed", max_retries=0).chat.completions.create(
                model="local-model",
                messages=[{"role": "system", "content": "Context:\n" + "\n".join(CONTEXTS)},
                          {"role": "user", "content": QUESTION}],
                tools=[answer_tool], tool_choice={"type": "function", "function": {"name": "Answer"}},
            )
            assert completion.choices[0].message.content is None
    _assert_answered_after_helper_retrieval(spans, scope, "Two years.")


def _assert_answered_after_helper_retrieval(spans: list[ReadableSpan], scope: str, response: str) -> None:
    """One sample: the helper's retrieval, paired by its texts with the one model call (from `scope`),
    whose response is `response`; nothing counted."""
    [model_call] = [s for s in spans if span_role(s) == "generation"]
    assert model_call.instrumentation_scope is not None and model_call.instrumentation_scope.name == scope
    stats = CaptureStats()
    [captured] = extract_samples(spans, stats=stats)
    assert (captured.sample.query, captured.sample.context_texts) == (QUESTION, CONTEXTS)
    assert captured.sample.response == response
    assert model_call.context is not None and captured.generation_span_id == model_call.context.span_id
    assert captured.pairing == "contexts"
    assert not stats.counts


@pytest.mark.parametrize("producer", ["openinference", "openllmetry"])
def test_langchain_structured_answer_through_a_tool_call(producer: str) -> None:
    """A LangChain chain whose chat model answers with an `Answer` tool call, parsed by a tools output
    parser: the response is the call's `answer` argument, under either LangChain instrumentor."""
    pytest.importorskip("langchain_core")
    from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
    from langchain_core.messages import AIMessage
    from langchain_core.output_parsers.openai_tools import JsonOutputKeyToolsParser

    module, name = {"openinference": ("openinference.instrumentation.langchain", "LangChainInstrumentor"),
                    "openllmetry": ("opentelemetry.instrumentation.langchain", "LangchainInstrumentor")}[producer]
    call = {"name": "Answer", "args": ANSWER_ARGUMENTS, "id": "call_1"}
    model = FakeMessagesListChatModel(responses=[AIMessage(content="", tool_calls=[call])])
    parser = JsonOutputKeyToolsParser(key_name="Answer", first_tool_only=True)
    spans = _run_chain(getattr(pytest.importorskip(module), name)(), model, parser, ANSWER_ARGUMENTS)
    [captured] = extract_samples(spans)
    assert (captured.sample.query, captured.sample.context_texts) == (QUESTION, CONTEXTS)
    assert captured.sample.response == "Two years."
    assert captured.convention == producer


LANGCHAIN_INSTRUMENTORS = {
    "openinference": ("openinference.instrumentation.langchain", "LangChainInstrumentor"),
    "openllmetry": ("opentelemetry.instrumentation.langchain", "LangchainInstrumentor"),
}
WARRANTY = ["The warranty lasts two years from purchase.", "Warranty claims need the original receipt."]
VARIANTS = ["warranty length?", "warranty receipt?"]


@pytest.mark.parametrize("producer", sorted(LANGCHAIN_INSTRUMENTORS))
def test_langchain_multi_query_retriever(producer: str) -> None:
    """A multi-query retriever (what LangChain's MultiQueryRetriever does): a model writes query variants,
    an inner retriever runs once per variant, the union goes to the answer model. Under either
    instrumentor, the same three samples: the outer retrieval with the user's question and each inner one
    with its variant, all paired with the answer model, none with the model that wrote the variants."""
    pytest.importorskip("langchain_core")
    from langchain_core.callbacks import CallbackManagerForRetrieverRun
    from langchain_core.documents import Document
    from langchain_core.language_models.fake_chat_models import FakeListChatModel
    from langchain_core.output_parsers import StrOutputParser
    from langchain_core.prompts import ChatPromptTemplate
    from langchain_core.retrievers import BaseRetriever
    from langchain_core.runnables import RunnableLambda, RunnablePassthrough

    rewriter = ChatPromptTemplate.from_template("Rewrite: {question}") | FakeListChatModel(
        responses=["\n".join(VARIANTS)]) | StrOutputParser()

    class Warranty(BaseRetriever):
        def _get_relevant_documents(
            self, query: str, *, run_manager: CallbackManagerForRetrieverRun
        ) -> list[Document]:
            return [Document(page_content=text) for text in WARRANTY]

    class MultiQuery(BaseRetriever):
        def _get_relevant_documents(
            self, query: str, *, run_manager: CallbackManagerForRetrieverRun
        ) -> list[Document]:
            config = {"callbacks": run_manager.get_child()}
            union: dict[str, Document] = {}
            for variant in rewriter.invoke({"question": query}, config=config).splitlines():
                for document in Warranty().invoke(variant, config=config):
                    union.setdefault(document.page_content, document)
            return list(union.values())

    module, name = LANGCHAIN_INSTRUMENTORS[producer]
    with _traced(getattr(pytest.importorskip(module), name)()) as (_, spans):
        chain = (
            {"context": MultiQuery() | RunnableLambda(lambda docs: "\n".join(d.page_content for d in docs)),
             "question": RunnablePassthrough()}
            | ChatPromptTemplate.from_template("Context: {context}\nQuestion: {question}")
            | FakeListChatModel(responses=["Two years."])
            | StrOutputParser()
        )
        assert chain.invoke(QUESTION) == "Two years."
    generations = [s for s in spans if span_role(s) == "generation"]
    assert len(generations) == 2  # the rewriter and the answer model
    answer_model = max(generations, key=lambda s: s.start_time or 0)
    assert answer_model.context is not None
    stats = CaptureStats()
    samples = extract_samples(spans, stats=stats)
    # Each variant is judged against what the user asked; the variant itself stays on the sample.
    assert [(c.retriever.split()[-1], c.sample.query, c.sample.metadata.get("retrieval_query")) for c in samples] == [
        ("MultiQuery", QUESTION, None), ("Warranty", QUESTION, VARIANTS[0]), ("Warranty", QUESTION, VARIANTS[1])]
    for captured in samples:
        assert captured.sample.context_texts == WARRANTY
        assert (captured.generation_span_id, captured.pairing) == (answer_model.context.span_id, "contexts")
        assert captured.sample.response == "Two years."
        assert captured.convention == producer


ANTHROPIC_INSTRUMENTORS = {
    "openinference": ("openinference.instrumentation.anthropic", "AnthropicInstrumentor"),
    "openllmetry": ("opentelemetry.instrumentation.anthropic", "AnthropicInstrumentor"),
}
# Claude's content blocks: extended thinking (mentioning the return policy) before the text answer, or an
# answer given as a tool_use block.
ANTHROPIC_CONTENT = {
    "thinking": [{"type": "thinking", "signature": "sig",
                  "thinking": "Returns are accepted within 30 days, but the warranty lasts two years."},
                 {"type": "text", "text": "Two years."}],
    "tool_use": [{"type": "tool_use", "id": "toolu_1", "name": "Answer", "input": ANSWER_ARGUMENTS}],
}


@pytest.mark.parametrize("content", sorted(ANTHROPIC_CONTENT))
@pytest.mark.parametrize("producer", sorted(ANTHROPIC_INSTRUMENTORS))
def test_anthropic_client_thinking_and_tool_use_answers(producer: str, content: str) -> None:
    """The Anthropic client under OpenInference and OpenLLMetry against a local Messages API: the response
    is the text block, not the thinking before it, or the `answer` input of a tool_use block."""
    anthropic = pytest.importorskip("anthropic")
    package, name = ANTHROPIC_INSTRUMENTORS[producer]
    instrumentor = getattr(pytest.importorskip(package), name)()
    from ragtrace.instrument import retrieval_span

    reply = {"id": "msg_1", "type": "message", "role": "assistant", "model": "local-model",
             "content": ANTHROPIC_CONTENT[content], "stop_reason": "end_turn", "stop_sequence": None,
             "usage": {"input_tokens": 40, "output_tokens": 9}}
    with _traced(instrumentor) as (provider, spans), _model_server(reply) as base_url:
        tracer = provider.get_tracer("rag-app")
        with tracer.start_as_current_span("answer"):
            with retrieval_span(QUESTION, data_source="handbook", tracer=tracer) as retrieval:
                retrieval.record(CONTEXTS)
            client = anthropic.Anthropic(base_url=base_url.removesuffix("/v1"), api_key="not-needed", max_retries=0)
            message = client.messages.create(model="local-model", max_tokens=64, messages=[
                {"role": "user", "content": "Context:\n" + "\n".join(CONTEXTS) + "\nQuestion: " + QUESTION}])
            assert [block.type for block in message.content] == [b["type"] for b in ANTHROPIC_CONTENT[content]]
    _assert_answered_after_helper_retrieval(spans, package, "Two years.")


@pytest.mark.parametrize("producer", sorted(LANGCHAIN_INSTRUMENTORS))
def test_langchain_agent_searching_twice_with_a_retriever_tool(producer: str) -> None:
    """An agent loop (what LangGraph's prebuilt agent runs): the model calls a retriever tool
    (`create_retriever_tool`), reads the result, calls it again with another query, then answers. The step
    that searched again quotes the first search's texts as fully as the answer does; both retrievals are
    paired with the answer, the generation that used them, not with a step that only called a tool, and
    judged against the user's question rather than the tool's arguments."""
    pytest.importorskip("langchain_core")
    from langchain_core.callbacks import CallbackManagerForRetrieverRun
    from langchain_core.documents import Document
    from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
    from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
    from langchain_core.retrievers import BaseRetriever
    from langchain_core.runnables import RunnableLambda
    from langchain_core.tools import create_retriever_tool

    handbook = {"warranty length": WARRANTY[0], "warranty claim": WARRANTY[1]}

    class Handbook(BaseRetriever):
        def _get_relevant_documents(
            self, query: str, *, run_manager: CallbackManagerForRetrieverRun
        ) -> list[Document]:
            return [Document(page_content=handbook[query])]

    searches = [AIMessage(content="", tool_calls=[{"name": "search_handbook", "args": {"query": q}, "id": f"call_{i}"}])
                for i, q in enumerate(handbook)]
    final = "Two years, and keep the receipt."
    model = FakeMessagesListChatModel(responses=[*searches, AIMessage(content=final)])
    search = create_retriever_tool(Handbook(), "search_handbook", "Search the product handbook.")

    def agent(question: str) -> str:
        messages: list[BaseMessage] = [HumanMessage(question)]
        while True:
            reply = model.invoke(messages)
            messages.append(reply)
            if not isinstance(reply, AIMessage) or not reply.tool_calls:
                return str(reply.content)
            messages.extend(search.invoke({**call, "type": "tool_call"}) for call in reply.tool_calls)

    module, name = LANGCHAIN_INSTRUMENTORS[producer]
    with _traced(getattr(pytest.importorskip(module), name)()) as (_, spans):
        assert RunnableLambda(agent).invoke("How long is the warranty and how do I claim it?") == final
    steps = sorted((s for s in spans if span_role(s) == "generation"), key=lambda s: s.start_time or 0)
    assert len(steps) == 3  # search, search again, answer
    answer = steps[-1]
    assert answer.context is not None
    stats = CaptureStats()
    samples = extract_samples(spans, stats=stats)
    # Judged against the user's question (the answer's own user message), the tool arguments kept aside.
    question = "How long is the warranty and how do I claim it?"
    assert [(c.sample.query, c.sample.metadata["retrieval_query"], c.sample.context_texts) for c in samples] == [
        (question, "warranty length", [WARRANTY[0]]), (question, "warranty claim", [WARRANTY[1]])]
    for captured in samples:
        assert (captured.generation_span_id, captured.pairing) == (answer.context.span_id, "contexts")
        assert captured.sample.response == final
    assert not stats.counts
