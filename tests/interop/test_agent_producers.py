"""Agentic RAG, one test per real producer: an agent whose retrieval is a tool, its model (a scripted
OpenAI-compatible server on 127.0.0.1) first calling the search tool with a rewritten query, then answering.
The spans go through `ragtrace.live` (in front of the exporting processors, or behind the batching) and the
SDK's OTLP/gRPC exporter to a real receiver. Asserted for every producer, as for the retriever producers in
test_producers.py: exactly one span of the trace is scored, the retrieval (the tool span, or the retriever
span the tool ran), and its scores equal `ragtrace.evaluate()` on the right sample: the user's question (not
the model's rewrite of it), the tool's documents in rank order, the agent's final answer. No other span
carries a sample's score (the agent's own span may carry the roll-up of what it retrieved).

The frameworks' span shapes are written up in docs/troubleshooting.md ("Agents").
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider

import ragtrace
from ragtrace.judges.base import Judge
from ragtrace.scoring import RagSample
from tests.interop.conftest import load_example
from tests.interop.test_producers import SCORERS, assert_scored_as_evaluate
from tests.servers.judge import Behaviour, CallTool, JudgeServer, Say, Status
from tests.servers.otlp import OtlpReceiver, ReceivedSpan

_pipeline = load_example("_pipeline")
_handbook = load_example("_handbook")
QUESTION: str = _handbook.QUESTION  # "How long is the warranty on the X200 kettle?"
ANSWER: str = _handbook.ANSWER
HANDBOOK: list[str] = _handbook.HANDBOOK
CONTEXTS = HANDBOOK[:3]  # what the search tools return, in rank order
SEARCH_QUERY = "X200 kettle warranty"  # the model's rewrite of the question: the tool's argument
# Haystack 3's BM25 leaves out texts sharing no term with the query: this rewrite also finds a third, off-topic
# one, so that the question and the rewrite score the documents differently (they do not on two).
HAYSTACK_QUERY = "warranty of the X200 kettle"
SESSION = "conv-1"
ROLLUP = "ragtrace.agent."  # the agent roll-up's attributes
SYSTEM = "Answer the customer's question from the product handbook."


@pytest.fixture(params=["processor", "exporter"])
def placement(request: pytest.FixtureRequest) -> str:
    """ragtrace in front of the exporting processors (install), or behind the batching."""
    return str(request.param)


@pytest.fixture
def model() -> Iterator[JudgeServer]:
    """The agent's model: answers only what a test scripts; an unscripted request is a 500 the agent raises."""
    server = JudgeServer().start()
    server.default = Status(500, "unscripted model request")
    try:
        yield server
    finally:
        server.stop()


@contextmanager
def scored(name: str, receiver: OtlpReceiver, judge: Judge, placement: str) -> Iterator[TracerProvider]:
    """A provider scoring every trace with `judge` and exporting over OTLP/gRPC to `receiver`; flushed and shut
    down when the block ends."""
    provider, _ = _pipeline.scored_provider(name, endpoint=receiver.grpc_endpoint, judge=judge, placement=placement)
    try:
        yield provider
    finally:
        provider.force_flush(30_000)
        provider.shutdown()


def search_then_answer(tool: str = "search_handbook", argument: str = "query") -> tuple[Behaviour, ...]:
    return CallTool(tool, {argument: SEARCH_QUERY}), Say(ANSWER)


def assert_scored_retrieval(
    spans: list[ReceivedSpan], is_retrieval: Callable[[ReceivedSpan], bool], expected: RagSample, judge: Judge,
    *, retrieval_query: str | None = SEARCH_QUERY,
) -> ReceivedSpan:
    """Exactly one span is scored, the retrieval, as `evaluate(expected)`; the agent span it runs under (an
    `invoke_agent` or OpenInference AGENT span; where there is none, at most a span above it) carries the
    roll-up of that one retrieval; no other span carries ragtrace's attributes or evaluation events.
    `retrieval_query`: the retrieval's own query, kept on the span."""
    assert all(n == 1 for n in Counter(s.span_id for s in spans).values()), "every span exported once"
    assert len({s.trace_id for s in spans}) == 1, "one trace"
    scored = [s for s in spans if "ragtrace.eval.status" in s.attributes]
    [retrieval] = [s for s in spans if is_retrieval(s)]
    assert [s.name for s in scored] == [retrieval.name], f"only the retrieval is scored; the trace: {outline(spans)}"
    attrs = retrieval.attributes
    assert_scored_as_evaluate(attrs, expected, judge)
    if retrieval_query is not None:
        assert attrs.get("ragtrace.retrieval.query") == retrieval_query
        # the right sample is not the rewrite's: scored with the model's query, the scores differ
        rewritten = RagSample(query=retrieval_query, contexts=expected.context_texts, response=expected.response)
        [as_rewritten] = ragtrace.evaluate([rewritten], scorers=sorted(SCORERS), judge=judge).items
        assert any(attrs[f"ragtrace.{n}.score"] != pytest.approx(r.score) for n, r in as_rewritten.results.items())
    assert {e["gen_ai.evaluation.name"] for e in retrieval.event("gen_ai.evaluation.result")} == SCORERS
    rollups = [s for s in spans if any(k.startswith(ROLLUP) for k in s.attributes)]
    above = ancestors(retrieval, spans)
    agents = [s for s in above if s.attributes.get("gen_ai.operation.name") == "invoke_agent"
              or s.attributes.get("openinference.span.kind") == "AGENT"]
    where = f"roll-ups on {[s.name for s in rollups]}; the trace: {outline(spans)}"
    assert len(rollups) <= 1 and set(map(id, rollups)) <= set(map(id, agents or above)), where
    assert bool(rollups) or not agents, f"a span the retrieval runs under is an agent's: {where}"
    agent = rollups[0] if rollups else None
    if agent is not None:
        assert agent.attributes[f"{ROLLUP}retrievals"] == 1
        for name in SCORERS:
            assert agent.attributes[f"{ROLLUP}{name}.max"] == pytest.approx(attrs[f"ragtrace.{name}.score"])
    for span in spans:
        if span.span_id == retrieval.span_id:
            continue
        unexpected = [k for k in span.attributes if k.startswith("ragtrace.")
                      and not (span is agent and k.startswith(ROLLUP))]
        assert not unexpected, span.name
        assert not span.event("gen_ai.evaluation.result"), span.name
    return retrieval


def ancestors(span: ReceivedSpan, spans: list[ReceivedSpan]) -> list[ReceivedSpan]:
    """The spans `span` runs under, nearest first."""
    by_id = {s.span_id: s for s in spans}
    chain = []
    while span.parent_span_id in by_id:
        span = by_id[span.parent_span_id]
        chain.append(span)
    return chain


def outline(spans: list[ReceivedSpan]) -> list[str]:
    """The trace as "name<parent name" lines, in start order: what a failure message shows."""
    names = {s.span_id: s.name for s in spans}
    ordered = sorted(spans, key=lambda s: s.start_time_unix_nano)
    return [f"{s.name}<{names.get(s.parent_span_id or 0, '')}" for s in ordered]


def assert_session(span: ReceivedSpan, session: str = SESSION) -> None:
    """The conversation reaches the attributes the scores are written with, and their evaluation events."""
    assert span.attributes.get("ragtrace.session.id") == session
    assert {e.get("gen_ai.conversation.id") for e in span.event("gen_ai.evaluation.result")} == {session}


def expected_sample(contexts: list[str] = CONTEXTS) -> RagSample:
    return RagSample(query=QUESTION, contexts=contexts, response=ANSWER)


# --- Pydantic AI: native OTel instrumentation (GenAI execute_tool spans) -------------------------------------


def pydantic_ai_agent(provider: TracerProvider, model_url: str, search: Callable[[str], list[str]]) -> Any:
    """A Pydantic AI agent on the local model, traced by its own instrumentation through `provider`, with
    `search` as its `search_handbook` tool."""
    from pydantic_ai import Agent, InstrumentationSettings
    from pydantic_ai.capabilities import Instrumentation
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    chat = OpenAIChatModel("local-model", provider=OpenAIProvider(base_url=model_url + "/v1", api_key="sk-test"))
    agent = Agent(chat, instructions=SYSTEM,
                  capabilities=[Instrumentation(InstrumentationSettings(tracer_provider=provider))])

    @agent.tool_plain
    def search_handbook(query: str) -> list[str]:
        """Search the product handbook."""
        return search(query)

    return agent


def test_pydantic_ai_tool_retrieval(
    otlp_receiver: OtlpReceiver, local_judge: Judge, placement: str, model: JudgeServer
) -> None:
    """`@agent.tool_plain` search tool: the `execute_tool search_handbook` span (arguments and result as
    GenAI attributes) is the retrieval."""
    model.script(*search_then_answer())
    with scored("pydantic-ai", otlp_receiver, local_judge, placement) as provider:
        agent = pydantic_ai_agent(provider, model.url, lambda query: CONTEXTS)
        assert agent.run_sync(QUESTION, conversation_id=SESSION).output == ANSWER
    spans = otlp_receiver.wait_for_spans(lambda got: any(s.name == "invoke_agent agent" for s in got))
    tool = assert_scored_retrieval(spans, lambda s: s.name == "execute_tool search_handbook", expected_sample(),
                                   local_judge)
    assert json.loads(str(tool.attributes["gen_ai.tool.call.result"])) == CONTEXTS
    assert_session(tool)


def test_pydantic_ai_agent_searching_twice(
    otlp_receiver: OtlpReceiver, local_judge: Judge, placement: str, model: JudgeServer
) -> None:
    """An agent loop: the model searches, searches again with another query, then answers. Each search is
    a sample of its own (the user's question, that search's documents, the final answer); the agent span
    gets the roll-up of both: how many, and per scorer the best and the mean."""
    found = {"kettle returns": [HANDBOOK[1], HANDBOOK[3]], SEARCH_QUERY: [HANDBOOK[0], HANDBOOK[2]]}
    model.script(*(CallTool("search_handbook", {"query": query}) for query in found), Say(ANSWER))
    with scored("pydantic-ai-loop", otlp_receiver, local_judge, placement) as provider:
        agent = pydantic_ai_agent(provider, model.url, found.__getitem__)
        assert agent.run_sync(QUESTION).output == ANSWER
    spans = otlp_receiver.wait_for_spans(lambda got: any(s.name == "invoke_agent agent" for s in got))
    searches = sorted((s for s in spans if s.name == "execute_tool search_handbook"),
                      key=lambda s: s.start_time_unix_nano)
    scored_spans = {s.span_id for s in spans if "ragtrace.eval.status" in s.attributes}
    assert scored_spans == {s.span_id for s in searches}, outline(spans)
    scores: dict[str, list[float]] = {name: [] for name in SCORERS}
    for search, query in zip(searches, found, strict=True):
        assert search.attributes["ragtrace.retrieval.query"] == query
        assert_scored_as_evaluate(search.attributes, expected_sample(found[query]), local_judge)
        for name in SCORERS:
            scores[name].append(float(search.attributes[f"ragtrace.{name}.score"]))
    [agent_span] = [s for s in spans if s.name == "invoke_agent agent"]
    assert agent_span.attributes[f"{ROLLUP}retrievals"] == 2
    for name, values in scores.items():
        assert agent_span.attributes[f"{ROLLUP}{name}.max"] == pytest.approx(max(values))
        assert agent_span.attributes[f"{ROLLUP}{name}.mean"] == pytest.approx(sum(values) / 2, abs=0.01)
    for span in spans:
        if span not in searches and span is not agent_span:
            assert not [k for k in span.attributes if k.startswith("ragtrace.")], span.name


# --- OpenAI Agents SDK under OpenInference (function tools) --------------------------------------------------


def test_openai_agents_function_tool(
    otlp_receiver: OtlpReceiver, local_judge: Judge, placement: str, model: JudgeServer
) -> None:
    """A `@function_tool` search: its OpenInference TOOL span (input.value / output.value JSON) is the retrieval."""
    from agents import Agent, OpenAIChatCompletionsModel, Runner, function_tool
    from openai import AsyncOpenAI
    from openinference.instrumentation import using_session
    from openinference.instrumentation.openai_agents import OpenAIAgentsInstrumentor

    @function_tool
    def search_handbook(query: str) -> list[str]:
        """Search the product handbook."""
        return CONTEXTS

    model.script(*search_then_answer())
    instrumentor = OpenAIAgentsInstrumentor()
    with scored("openai-agents", otlp_receiver, local_judge, placement) as provider:
        # exclusive: the SDK's own trace exporter (to api.openai.com) is replaced, nothing leaves loopback
        instrumentor.instrument(tracer_provider=provider, exclusive_processor=True)
        try:
            client = AsyncOpenAI(base_url=model.url + "/v1", api_key="sk-test", max_retries=0)
            agent = Agent(name="support", instructions=SYSTEM, tools=[search_handbook],
                          model=OpenAIChatCompletionsModel(model="local-model", openai_client=client))
            with using_session(SESSION):
                assert Runner.run_sync(agent, QUESTION).final_output == ANSWER
        finally:
            instrumentor.uninstrument()
    spans = otlp_receiver.wait_for_spans(lambda got: any(s.name == "Agent workflow" and s.parent_span_id is None
                                                         for s in got))
    tool = assert_scored_retrieval(
        spans, lambda s: s.attributes.get("openinference.span.kind") == "TOOL", expected_sample(), local_judge)
    assert tool.name == "search_handbook"
    assert_session(tool)


# --- smolagents under OpenInference --------------------------------------------------------------------------


def test_smolagents_tool_calling_agent(
    otlp_receiver: OtlpReceiver, local_judge: Judge, placement: str, model: JudgeServer
) -> None:
    """A ToolCallingAgent: the model searches, then answers through the built-in `final_answer` tool (no model
    turn has text). The search tool's TOOL span is the retrieval; `final_answer` is no retrieval; the
    response is the final answer."""
    from openinference.instrumentation.smolagents import SmolagentsInstrumentor
    from smolagents import OpenAIServerModel, ToolCallingAgent, tool

    @tool
    def search_handbook(query: str) -> list[str]:
        """Search the product handbook.

        Args:
            query: what to look for.
        """
        return CONTEXTS

    model.script(CallTool("search_handbook", {"query": SEARCH_QUERY}), CallTool("final_answer", {"answer": ANSWER}))
    instrumentor = SmolagentsInstrumentor()
    with scored("smolagents", otlp_receiver, local_judge, placement) as provider:
        instrumentor.instrument(tracer_provider=provider)
        try:
            agent = ToolCallingAgent(
                tools=[search_handbook], max_steps=3, verbosity_level=0,
                model=OpenAIServerModel(model_id="local-model", api_base=model.url + "/v1", api_key="sk-test"))
            assert agent.run(QUESTION) == ANSWER
        finally:
            instrumentor.uninstrument()
    spans = otlp_receiver.wait_for_spans(lambda got: any(s.name == "ToolCallingAgent.run" for s in got))
    assert_scored_retrieval(spans, lambda s: s.attributes.get("tool.name") == "search_handbook", expected_sample(),
                            local_judge)


# --- LangGraph under OpenInference and OpenLLMetry -----------------------------------------------------------

LANGCHAIN_INSTRUMENTORS = {
    "openinference": ("openinference.instrumentation.langchain", "LangChainInstrumentor", "Handbook"),
    "openllmetry": ("opentelemetry.instrumentation.langchain", "LangchainInstrumentor", "vector_db_retrieve Handbook"),
}
LANGGRAPH_ROOTS = {"openinference": "LangGraph", "openllmetry": "invoke_agent LangGraph"}


def _handbook_retriever() -> Any:
    from langchain_core.callbacks import CallbackManagerForRetrieverRun
    from langchain_core.documents import Document
    from langchain_core.retrievers import BaseRetriever

    class Handbook(BaseRetriever):
        def _get_relevant_documents(
            self, query: str, *, run_manager: CallbackManagerForRetrieverRun
        ) -> list[Document]:
            return [Document(page_content=text, metadata={"source": f"handbook-{i}"})
                    for i, text in enumerate(CONTEXTS)]

    return Handbook()


@contextmanager
def _langchain_instrumented(producer: str, provider: TracerProvider) -> Iterator[None]:
    import importlib

    module, name, _ = LANGCHAIN_INSTRUMENTORS[producer]
    instrumentor = getattr(importlib.import_module(module), name)()
    instrumentor.instrument(tracer_provider=provider)
    try:
        yield
    finally:
        instrumentor.uninstrument()


@pytest.mark.parametrize("producer", sorted(LANGCHAIN_INSTRUMENTORS))
def test_langgraph_react_agent_with_a_retriever_tool(
    otlp_receiver: OtlpReceiver, local_judge: Judge, placement: str, model: JudgeServer, producer: str
) -> None:
    """`create_react_agent` with `create_retriever_tool`: the retriever span under the tool span is the
    retrieval (the tool span, holding the same documents joined, is not a second one); its query is the
    model's rewrite, the sample's is the user's question."""
    from langchain_core.tools import create_retriever_tool
    from langchain_openai import ChatOpenAI
    from langgraph.prebuilt import create_react_agent

    model.script(*search_then_answer())
    with scored(f"langgraph-react-{producer}", otlp_receiver, local_judge, placement) as provider, \
            _langchain_instrumented(producer, provider):
        llm = ChatOpenAI(model="local-model", base_url=model.url + "/v1", api_key="sk-test", max_retries=0)
        search = create_retriever_tool(_handbook_retriever(), "search_handbook", "Search the product handbook.")
        agent = create_react_agent(llm, [search])
        state = agent.invoke({"messages": [("user", QUESTION)]}, config={"configurable": {"thread_id": SESSION}})
        assert state["messages"][-1].content == ANSWER
    root = LANGGRAPH_ROOTS[producer]
    spans = otlp_receiver.wait_for_spans(lambda got: any(s.name == root for s in got))
    run = [s for s in spans if s.trace_id == next(r.trace_id for r in spans if r.name == root)]
    retriever = LANGCHAIN_INSTRUMENTORS[producer][2]
    scored_span = assert_scored_retrieval(run, lambda s: s.name == retriever, expected_sample(), local_judge)
    assert_session(scored_span)


@pytest.mark.parametrize("producer", sorted(LANGCHAIN_INSTRUMENTORS))
def test_langgraph_graph_with_a_query_rewrite_node(
    otlp_receiver: OtlpReceiver, local_judge: Judge, placement: str, model: JudgeServer, producer: str
) -> None:
    """A StateGraph rewrite -> retrieve -> generate: a model rewrites the question into a search query, the
    retriever runs on it, a second model call answers the question from the documents. The sample's query
    is the user's question, not the rewrite; the rewriting model call is not the paired generation."""
    from typing import TypedDict

    from langchain_openai import ChatOpenAI
    from langgraph.graph import END, START, StateGraph

    class State(TypedDict, total=False):
        question: str
        search_query: str
        documents: list[Any]  # langchain Documents (a name langgraph resolves from this module's globals)
        answer: str

    model.script(Say(SEARCH_QUERY), Say(ANSWER))
    with scored(f"langgraph-rewrite-{producer}", otlp_receiver, local_judge, placement) as provider, \
            _langchain_instrumented(producer, provider):
        llm = ChatOpenAI(model="local-model", base_url=model.url + "/v1", api_key="sk-test", max_retries=0)
        handbook = _handbook_retriever()

        def rewrite(state: State) -> State:
            reply = llm.invoke([("system", "Rewrite the question as a search query."), ("user", state["question"])])
            return {"search_query": str(reply.content)}

        def retrieve(state: State) -> State:
            return {"documents": handbook.invoke(state["search_query"])}

        def generate(state: State) -> State:
            context = "\n".join(d.page_content for d in state["documents"])
            reply = llm.invoke([("system", f"{SYSTEM}\nContext:\n{context}"), ("user", state["question"])])
            return {"answer": str(reply.content)}

        graph = StateGraph(State)
        for name, node in (("rewrite", rewrite), ("retrieve", retrieve), ("generate", generate)):
            graph.add_node(name, node)
        graph.add_edge(START, "rewrite")
        graph.add_edge("rewrite", "retrieve")
        graph.add_edge("retrieve", "generate")
        graph.add_edge("generate", END)
        assert graph.compile().invoke({"question": QUESTION})["answer"] == ANSWER
    root = LANGGRAPH_ROOTS[producer]
    spans = otlp_receiver.wait_for_spans(lambda got: any(s.name == root for s in got))
    retriever = LANGCHAIN_INSTRUMENTORS[producer][2]
    assert_scored_retrieval(spans, lambda s: s.name == retriever, expected_sample(), local_judge)


# --- Haystack under OpenInference: an Agent with a retriever as its tool -------------------------------------


def test_haystack_agent_with_a_retriever_tool(
    otlp_receiver: OtlpReceiver, local_judge: Judge, placement: str, model: JudgeServer
) -> None:
    """A Haystack `Agent` (in a Pipeline, as deployed: alone, each of its components is a trace of its own)
    whose tool is a BM25 retriever (`ComponentTool`), built before the instrumentor is on (as the example
    pipelines are): the retriever's span under the ToolInvoker is the retrieval, its query the model's
    rewrite, the sample's the user's question."""
    from haystack import Document, Pipeline
    from haystack.components.agents import Agent
    from haystack.components.generators.chat import OpenAIChatGenerator
    from haystack.components.retrievers.in_memory import InMemoryBM25Retriever
    from haystack.dataclasses import ChatMessage
    from haystack.document_stores.in_memory import InMemoryDocumentStore
    from haystack.tools import ComponentTool
    from haystack.utils import Secret
    from openinference.instrumentation.haystack import HaystackInstrumentor

    store = InMemoryDocumentStore()
    store.write_documents([Document(id=f"handbook-{i}", content=text) for i, text in enumerate(HANDBOOK)])
    retriever = InMemoryBM25Retriever(store, top_k=3)
    ranked = [str(d.content) for d in retriever.run(query=HAYSTACK_QUERY)["documents"]]
    assert ranked[0] == ANSWER and len(ranked) == 3  # BM25 ranks the useful text first
    generator = OpenAIChatGenerator(api_key=Secret.from_token("sk-test"), model="local-model",
                                    api_base_url=model.url + "/v1")
    search = ComponentTool(component=retriever, name="search_handbook", description="Search the product handbook.")
    pipeline = Pipeline()
    pipeline.add_component("agent", Agent(chat_generator=generator, tools=[search], system_prompt=SYSTEM))
    model.script(CallTool("search_handbook", {"query": HAYSTACK_QUERY}), Say(ANSWER))
    instrumentor = HaystackInstrumentor()
    with scored("haystack-agent", otlp_receiver, local_judge, placement) as provider:
        instrumentor.instrument(tracer_provider=provider)
        try:
            reply = pipeline.run({"agent": {"messages": [ChatMessage.from_user(QUESTION)]}})
            assert reply["agent"]["messages"][-1].text == ANSWER
        finally:
            instrumentor.uninstrument()
    spans = otlp_receiver.wait_for_spans(lambda got: any(s.name == "Pipeline.run" for s in got))
    assert_scored_retrieval(spans, lambda s: s.name == "InMemoryBM25Retriever.run", expected_sample(ranked),
                            local_judge, retrieval_query=HAYSTACK_QUERY)


# --- Haystack 3's own tracing (opentelemetry-haystack): a pipeline, and an Agent with a retrieval tool ------


@contextmanager
def haystack_traced(provider: TracerProvider) -> Iterator[None]:
    """Haystack's own tracer on `provider`, content tracing on (HAYSTACK_CONTENT_TRACING_ENABLED=true does it
    at import); both as they were when the block ends."""
    from haystack import tracing
    from haystack_integrations.tracing.opentelemetry import OpenTelemetryTracer

    content = tracing.tracer.is_content_tracing_enabled
    tracing.enable_tracing(OpenTelemetryTracer(provider.get_tracer("haystack")))
    tracing.tracer.is_content_tracing_enabled = True
    try:
        yield
    finally:
        tracing.disable_tracing()
        tracing.tracer.is_content_tracing_enabled = content


def _is_component(kind: str) -> Callable[[ReceivedSpan], bool]:
    return lambda span: span.name == "haystack.component.run" and span.attributes.get(
        "haystack.component.type") == kind


def test_haystack_tracer_pipeline(
    otlp_receiver: OtlpReceiver, local_judge: Judge, placement: str, model: JudgeServer
) -> None:
    """retriever -> ChatPromptBuilder -> OpenAIChatGenerator, each component a `haystack.component.run` span:
    the retriever's is the retrieval (its output's documents), the generator's the generation (its replies);
    the prompt builder's, holding the same documents, is neither."""
    haystack_app = load_example("haystack_app")
    model.script(Say(ANSWER))
    with scored("haystack-tracer-pipeline", otlp_receiver, local_judge, placement) as provider:
        pipeline = haystack_app.build_pipeline(model.url + "/v1", "chat")
        with haystack_traced(provider):
            reply = haystack_app.ask(pipeline, QUESTION)
        assert reply["llm"]["replies"][0].text == ANSWER
    spans = otlp_receiver.wait_for_spans(lambda got: any(s.name == "haystack.pipeline.run" for s in got))
    assert_scored_retrieval(spans, _is_component("InMemoryBM25Retriever"),
                            expected_sample(haystack_app.expected_contexts(QUESTION)), local_judge,
                            retrieval_query=None)


def test_haystack_tracer_agent_with_a_retrieval_tool(
    otlp_receiver: OtlpReceiver, local_judge: Judge, placement: str, model: JudgeServer
) -> None:
    """A Haystack 3 `Agent` (on its own: its run is one trace) whose tool is a BM25 retriever: the
    `haystack.agent.step.tool` span (its output the retriever's documents) is the retrieval, its query the
    model's rewrite, the sample's the user's question, the response the last model call's; the
    `haystack.agent.run` span gets the roll-up."""
    from haystack import Document
    from haystack.components.agents import Agent
    from haystack.components.generators.chat import OpenAIChatGenerator
    from haystack.components.retrievers.in_memory import InMemoryBM25Retriever
    from haystack.dataclasses import ChatMessage
    from haystack.document_stores.in_memory import InMemoryDocumentStore
    from haystack.tools import ComponentTool
    from haystack.utils import Secret

    store = InMemoryDocumentStore()
    store.write_documents([Document(id=f"handbook-{i}", content=text) for i, text in enumerate(HANDBOOK)])
    retriever = InMemoryBM25Retriever(store, top_k=3)
    ranked = [str(d.content) for d in retriever.run(query=HAYSTACK_QUERY)["documents"]]
    generator = OpenAIChatGenerator(api_key=Secret.from_token("sk-test"), model="local-model",
                                    api_base_url=model.url + "/v1")
    search = ComponentTool(component=retriever, name="search_handbook", description="Search the product handbook.")
    agent = Agent(chat_generator=generator, tools=[search], system_prompt=SYSTEM)
    model.script(CallTool("search_handbook", {"query": HAYSTACK_QUERY}), Say(ANSWER))
    with scored("haystack-tracer-agent", otlp_receiver, local_judge, placement) as provider:
        with haystack_traced(provider):
            reply = agent.run(messages=[ChatMessage.from_user(QUESTION)])
        assert reply["messages"][-1].text == ANSWER
    spans = otlp_receiver.wait_for_spans(lambda got: any(s.name == "haystack.agent.run" for s in got))
    tool = assert_scored_retrieval(spans, lambda s: s.name == "haystack.agent.step.tool", expected_sample(ranked),
                                   local_judge, retrieval_query=HAYSTACK_QUERY)
    assert tool.attributes["haystack.tool.name"] == "search_handbook"
    [run] = [s for s in spans if s.name == "haystack.agent.run"]
    assert run.attributes[f"{ROLLUP}retrievals"] == 1


# --- LlamaIndex FunctionAgent / AgentWorkflow under OpenInference --------------------------------------------


def _llamaindex_retriever() -> Any:
    from llama_index.core.retrievers import BaseRetriever
    from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode

    class Handbook(BaseRetriever):
        def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
            return [NodeWithScore(node=TextNode(text=text, id_=f"handbook-{i}"), score=1.0 - i / 10)
                    for i, text in enumerate(CONTEXTS)]

    return Handbook()


def _search_handbook(query: str) -> list[str]:
    """Search the product handbook."""
    return CONTEXTS


@pytest.mark.parametrize("shape", ["FunctionAgent+FunctionTool", "AgentWorkflow+RetrieverTool"])
def test_llamaindex_agent_with_a_search_tool(
    otlp_receiver: OtlpReceiver, local_judge: Judge, placement: str, model: JudgeServer, shape: str
) -> None:
    """A FunctionAgent with a function tool returning the texts, and an AgentWorkflow whose tool is a
    retriever (`RetrieverTool`, whose retriever span records an empty query): one retrieval each, scored
    with the user's question."""
    from llama_index.core.agent.workflow import AgentWorkflow, FunctionAgent
    from llama_index.core.tools import FunctionTool, RetrieverTool
    from llama_index.llms.litellm import LiteLLM
    from openinference.instrumentation.llama_index import LlamaIndexInstrumentor

    runner, kind = shape.split("+")
    if kind == "FunctionTool":
        search: Any = FunctionTool.from_defaults(_search_handbook, name="search_handbook")
        argument, retrieval_span, retrieval_query = "query", "FunctionTool.acall", SEARCH_QUERY
    else:
        search = RetrieverTool.from_defaults(retriever=_llamaindex_retriever(), name="search_handbook",
                                             description="Search the product handbook.")
        argument, retrieval_span, retrieval_query = "input", "Handbook.aretrieve", None
    model.script(*search_then_answer(argument=argument))
    instrumentor = LlamaIndexInstrumentor()
    with scored(f"llamaindex-{runner}", otlp_receiver, local_judge, placement) as provider:
        instrumentor.instrument(tracer_provider=provider)
        try:
            # FunctionAgent needs a function-calling model: LiteLLM takes that from litellm's model map, so the
            # model is named as one that calls functions; every request still goes to the local server.
            llm = LiteLLM(model="openai/gpt-4o-mini", api_base=model.url + "/v1", api_key="sk-test")
            agent: Any = FunctionAgent(name="support", tools=[search], llm=llm, system_prompt=SYSTEM,
                                       streaming=False)
            if runner == "AgentWorkflow":
                agent = AgentWorkflow(agents=[agent], root_agent="support")

            async def ask() -> Any:
                return await agent.run(user_msg=QUESTION)

            assert str(asyncio.run(ask())) == ANSWER
        finally:
            instrumentor.uninstrument()
    root = f"{runner}.run"
    spans = otlp_receiver.wait_for_spans(lambda got: any(s.name == root for s in got))
    assert_scored_retrieval(spans, lambda s: s.name == retrieval_span, expected_sample(), local_judge,
                            retrieval_query=retrieval_query)
