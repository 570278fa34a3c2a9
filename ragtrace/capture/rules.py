"""`CaptureRules`: what an app tells capture that span shapes cannot: which tools search, and which query to judge.

Limits (`CaptureLimits`) bound what is read; rules change what a span means. Both are plain frozen values,
so they pickle to a scoring process and cost nothing to consult on the hot path.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field
from typing import Literal

QuerySource = Literal["user", "retrieval"]


@dataclass(frozen=True)
class CaptureRules:
    """retrieval_tools: tool names (or `fnmatch` patterns, `search_*`) whose calls are retrievals whatever
        their result looks like; a name with a leading `!` is never one (a tool whose list of strings is
        no documents). Tools not named are retrievals when their result is unambiguously documents.
    tool_separator: splits the plain-text result of a named tool into documents ("\\n\\n": the blank line
        LangChain's and LlamaIndex's retriever tools join documents with; "\\n": one per line).
    query_source: "user" judges each retrieval against the user's question when the trace records one
        that differs from the retrieval's own query (a rewrite, a tool argument); "retrieval" keeps the
        retrieval's own query.
    """

    retrieval_tools: tuple[str, ...] = ()
    tool_separator: str = "\n\n"
    query_source: QuerySource = "user"
    _named: frozenset[str] = field(default=frozenset(), init=False, repr=False, compare=False)
    _excluded: frozenset[str] = field(default=frozenset(), init=False, repr=False, compare=False)
    _patterns: tuple[tuple[str, bool], ...] = field(default=(), init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        tools = tuple(self.retrieval_tools)
        if isinstance(self.retrieval_tools, str) or not all(isinstance(t, str) and t.strip("! ") for t in tools):
            raise ValueError(f"retrieval_tools must be a sequence of tool names, got {self.retrieval_tools!r}")
        if not isinstance(self.tool_separator, str) or not self.tool_separator:
            raise ValueError(f"tool_separator must be a non-empty string, got {self.tool_separator!r}")
        if self.query_source not in ("user", "retrieval"):
            raise ValueError(f"query_source must be 'user' or 'retrieval', got {self.query_source!r}")
        named: set[str] = set()
        excluded: set[str] = set()
        patterns: list[tuple[str, bool]] = []
        for entry in (t.strip() for t in tools):
            negated, name = entry.startswith("!"), entry.lstrip("!").strip()
            if any(c in name for c in "*?["):
                patterns.append((name, not negated))
            else:
                (excluded if negated else named).add(name)
        object.__setattr__(self, "retrieval_tools", tools)
        object.__setattr__(self, "_named", frozenset(named))
        object.__setattr__(self, "_excluded", frozenset(excluded))
        object.__setattr__(self, "_patterns", tuple(patterns))

    def tool_named(self, name: str) -> bool | None:
        """True: the user named this tool a retrieval; False: named it not one; None: said nothing."""
        if name in self._excluded:
            return False
        if name in self._named:
            return True
        for pattern, retrieval in self._patterns:
            if fnmatch.fnmatchcase(name, pattern):
                return retrieval
        return None

    def split(self, text: str) -> list[str]:
        """A named tool's plain-text result as documents: cut at the separator, blank pieces dropped."""
        return [piece.strip() for piece in text.split(self.tool_separator) if piece.strip()]


DEFAULT_RULES = CaptureRules()
