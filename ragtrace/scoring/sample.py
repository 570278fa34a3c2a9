"""The one input every scorer reads: a query, the ranked contexts, the response and maybe a ground truth."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator


class Document(BaseModel):
    """A retrieved context. Only `content` is judged; `id` and `score` travel into details."""

    model_config = ConfigDict(frozen=True)

    content: str
    id: str | None = None
    score: float | None = None


class RagSample(BaseModel):
    """One retrieval and what was made of it. `contexts` are in rank order (rank 1 first)."""

    model_config = ConfigDict(frozen=True)

    query: str
    contexts: tuple[Document, ...] = Field(default_factory=tuple)
    response: str = ""
    ground_truth: str | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)

    @field_validator("contexts", mode="before")
    @classmethod
    def _coerce_contexts(cls, value: Any) -> Any:
        if value is None:
            return ()
        if isinstance(value, str | bytes | dict):
            raise ValueError("contexts must be a list of strings or documents, not a single value")
        return tuple(Document(content=v) if isinstance(v, str) else v for v in value)

    @field_validator("ground_truth", mode="before")
    @classmethod
    def _blank_ground_truth_is_none(cls, value: Any) -> Any:
        if isinstance(value, str) and not value.strip():
            return None
        return value

    @property
    def context_texts(self) -> list[str]:
        return [d.content for d in self.contexts]
