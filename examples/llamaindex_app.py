"""A small LlamaIndex RAG app that runs offline: a `VectorStoreIndex` in memory with a deterministic
embedding, and LiteLLM (llama-index-llms-litellm) asking a local OpenAI-compatible server. The
OpenInference and OpenLLMetry examples trace this same app.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Iterator
from contextlib import contextmanager

from _chat_server import local_chat_server
from _handbook import ANSWER, HANDBOOK, QUESTION
from llama_index.core import Document, Settings, VectorStoreIndex
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.query_engine import BaseQueryEngine
from llama_index.core.retrievers import BaseRetriever
from llama_index.llms.litellm import LiteLLM

SECOND_QUESTION = "Within how many days are returns accepted?"
SECOND_ANSWER = "Returns are accepted within 30 days."
ANSWERS = {QUESTION: ANSWER, SECOND_QUESTION: SECOND_ANSWER}
TOP_K = 2


class WordHashEmbedding(BaseEmbedding):
    """Bag of hashed words: deterministic, offline, and good enough to rank by shared words."""

    def _vector(self, text: str) -> list[float]:
        vector = [0.0] * 64
        for word in re.findall(r"[a-z0-9]+", text.lower()):
            vector[int(hashlib.sha1(word.encode()).hexdigest(), 16) % 64] += 1.0
        norm = math.sqrt(sum(v * v for v in vector)) or 1.0
        return [v / norm for v in vector]

    def _get_query_embedding(self, query: str) -> list[float]:
        return self._vector(query)

    def _get_text_embedding(self, text: str) -> list[float]:
        return self._vector(text)

    async def _aget_query_embedding(self, query: str) -> list[float]:
        return self._vector(query)


@contextmanager
def llm_settings() -> Iterator[None]:
    """Point LlamaIndex's global Settings at the local model and embedding for the block."""
    with local_chat_server(ANSWERS) as base_url:
        Settings.embed_model = WordHashEmbedding()
        Settings.llm = LiteLLM(model="openai/local-model", api_base=base_url, api_key="not-needed", max_retries=0)
        try:
            yield
        finally:
            Settings.llm = None  # type: ignore[assignment]
            Settings.embed_model = None  # type: ignore[assignment]


def build_index() -> VectorStoreIndex:
    return VectorStoreIndex.from_documents(
        [Document(text=text, id_=f"handbook-{i}") for i, text in enumerate(HANDBOOK)]
    )


def build_query_engine(index: VectorStoreIndex) -> BaseQueryEngine:
    return index.as_query_engine(similarity_top_k=TOP_K)


def build_retriever(index: VectorStoreIndex) -> BaseRetriever:
    return index.as_retriever(similarity_top_k=TOP_K)


def expected_contexts(question: str = QUESTION) -> list[str]:
    """What the retriever returns for `question`, in rank order (run without any tracing)."""
    Settings.embed_model = WordHashEmbedding()
    try:
        return [n.node.get_content() for n in build_retriever(build_index()).retrieve(question)]
    finally:
        Settings.embed_model = None  # type: ignore[assignment]
