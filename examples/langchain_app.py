"""A small LangChain RAG app that runs offline: an in-memory vector store with deterministic embeddings,
a prompt, and a fake chat model. The OpenInference and OpenLLMetry examples trace this same app.
"""

from __future__ import annotations

from _handbook import ANSWER, HANDBOOK, QUESTION
from langchain_core.embeddings import DeterministicFakeEmbedding
from langchain_core.language_models.fake_chat_models import FakeListChatModel
from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.runnables import Runnable, RunnablePassthrough
from langchain_core.vectorstores import InMemoryVectorStore, VectorStoreRetriever


def build_retriever(k: int = 3) -> VectorStoreRetriever:
    """The handbook in memory; the fake embedding is a hash of the text, so ranking is deterministic."""
    store = InMemoryVectorStore(DeterministicFakeEmbedding(size=64))
    store.add_texts(HANDBOOK, metadatas=[{"source": f"handbook-{i}.md"} for i in range(len(HANDBOOK))])
    return store.as_retriever(search_kwargs={"k": k})


def build_chain(retriever: VectorStoreRetriever | None = None) -> Runnable[str, str]:
    """retriever | prompt | chat model, answering `ANSWER` whatever it is asked."""

    def join(docs: list) -> str:  # type: ignore[type-arg]
        return "\n".join(d.page_content for d in docs)

    prompt = ChatPromptTemplate.from_template("Answer from the context.\nContext:\n{context}\nQuestion: {question}")
    return (
        {"context": (retriever or build_retriever()) | join, "question": RunnablePassthrough()}
        | prompt
        | FakeListChatModel(responses=[ANSWER])
        | StrOutputParser()
    )


def expected_contexts() -> list[str]:
    """What the retriever returns for QUESTION, in rank order (run without any tracing)."""
    return [d.page_content for d in build_retriever().invoke(QUESTION)]
