"""A small Haystack 3 RAG pipeline that runs offline: BM25 over an in-memory document store, a prompt
builder, and an OpenAI chat generator asking a local OpenAI-compatible server. Two shapes: `PromptBuilder`
(a text prompt, which Haystack 3's chat generators take as one user message; 3.x removed the text-only
`OpenAIGenerator`) and `ChatPromptBuilder` (chat messages), each feeding `OpenAIChatGenerator`.
"""

from __future__ import annotations

from typing import Any, Literal

from _handbook import ANSWER, HANDBOOK, QUESTION
from haystack import Document, Pipeline
from haystack.components.builders import ChatPromptBuilder, PromptBuilder
from haystack.components.generators.chat import OpenAIChatGenerator
from haystack.components.retrievers.in_memory import InMemoryBM25Retriever
from haystack.dataclasses import ChatMessage
from haystack.document_stores.in_memory import InMemoryDocumentStore
from haystack.utils import Secret

ANSWERS = {QUESTION: ANSWER}
TOP_K = 2
TEMPLATE = """Answer from the context.
Context:
{% for document in documents %}{{ document.content }}
{% endfor %}Question: {{ question }}
Answer:"""
Shape = Literal["prompt", "chat"]


def build_store() -> InMemoryDocumentStore:
    store = InMemoryDocumentStore()
    store.write_documents([Document(id=f"handbook-{i}", content=text) for i, text in enumerate(HANDBOOK)])
    return store


def build_pipeline(base_url: str, shape: Shape = "prompt") -> Pipeline:
    """retriever -> prompt builder -> generator; `shape` picks the text or the chat pair."""
    pipeline = Pipeline()
    pipeline.add_component("retriever", InMemoryBM25Retriever(build_store(), top_k=TOP_K))
    key = Secret.from_token("not-needed")
    if shape == "prompt":
        pipeline.add_component("prompt_builder", PromptBuilder(template=TEMPLATE, required_variables="*"))
    else:
        template = [ChatMessage.from_user(TEMPLATE)]
        pipeline.add_component("prompt_builder", ChatPromptBuilder(template=template, required_variables="*"))
    pipeline.add_component("llm", OpenAIChatGenerator(api_key=key, model="local-model", api_base_url=base_url))
    pipeline.connect("retriever.documents", "prompt_builder.documents")
    pipeline.connect("prompt_builder.prompt", "llm.messages")
    return pipeline


def ask(pipeline: Pipeline, question: str = QUESTION) -> dict[str, Any]:
    return pipeline.run({"retriever": {"query": question}, "prompt_builder": {"question": question}})


def expected_contexts(question: str = QUESTION) -> list[str]:
    """What the retriever returns for `question`, in rank order (run without any tracing)."""
    retriever = InMemoryBM25Retriever(build_store(), top_k=TOP_K)
    return [d.content or "" for d in retriever.run(query=question)["documents"]]
