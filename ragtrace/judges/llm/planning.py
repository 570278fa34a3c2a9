"""Which calls a request takes: one when its prompt and answer fit the model's context window, else one
per aspect, then chunks of contexts halved until each fits (`contexts_per_call` forces chunks of that
size: small local models answer short questions faster and better)."""

from __future__ import annotations

from collections.abc import Callable

from ragtrace.judges.base import JudgeRequest
from ragtrace.judges.llm.part import Part, asks, whole
from ragtrace.judges.llm.prompt import Prompting, surely_fits
from ragtrace.judges.llm.schema import Mode
from ragtrace.judges.llm.transport import conversation_text, load_litellm


def known_window(model: str) -> int | None:
    """The model's input context length as litellm's bundled model map knows it, or None (any
    self-hosted model: then no automatic split unless `context_window` is given)."""
    known = load_litellm().model_cost
    for name in (model, model.split("/", 1)[-1]):
        info = known.get(name)
        if isinstance(info, dict):
            window = info.get("max_input_tokens") or info.get("max_tokens")
            return int(window) if window else None
    return None


class Planner:
    """Plans the calls of one request to `model`. Its context window is `context_window`, else what
    litellm knows of the model (looked up on first use), else unknown: then any prompt fits.
    `note` counts the paths taken (`split_per_aspect`, `chunked_requests`)."""

    def __init__(
        self,
        model: str,
        prompting: Prompting,
        *,
        context_window: int | None,
        contexts_per_call: int | None,
        note: Callable[[str], None],
    ) -> None:
        self.model = model
        self.prompting = prompting
        self.contexts_per_call = contexts_per_call
        self._window = context_window
        self._window_known = context_window is not None
        self._note = note

    @property
    def window(self) -> int | None:
        if not self._window_known:
            self._window, self._window_known = known_window(self.model), True
        return self._window

    def plan(self, request: JudgeRequest, version: str, mode: Mode) -> list[Part]:
        """The calls a request takes: one, or per aspect and per chunk of contexts when one is too long."""
        n = len(request.sample.contexts)
        full = whole(request.aspects, n)
        size = self.contexts_per_call
        if size is None and self.fits(request, full, version, mode):
            return [p for p in [full] if asks(p)]
        groups = [request.aspects]
        if size is None and len(request.aspects) > 1:  # too long fused: one aspect at a time first
            groups = [frozenset({a}) for a in sorted(request.aspects)]
            self._note("split_per_aspect")
        parts: list[Part] = []
        for group in groups:
            part = whole(group, n)
            if size is None and self.fits(request, part, version, mode):
                parts.append(part)
                continue
            chunk = size or self._chunk_size(request, part, version, mode)
            if part.per_context and chunk < len(part.indices):
                self._note("chunked_requests")
            for start in range(0, len(part.indices) if part.per_context else 0, chunk):
                parts.append(Part(part.per_context, part.indices[start : start + chunk]))
            if part.sample_level:
                parts.append(Part(frozenset(), (), part.missing, part.claims))
        return [p for p in parts if asks(p)]

    def fits(self, request: JudgeRequest, part: Part, version: str, mode: Mode) -> bool:
        """Whether the prompt of `part` and its longest answer fit the window."""
        window = self.window
        if window is None:
            return True
        prompting = self.prompting
        prompt = prompting.prompt(request, part, mode, version)
        text, room = conversation_text(prompt.messages), window - prompting.max_tokens_for(request, part)
        return surely_fits(text, room) or prompting.count(text) <= room

    def _chunk_size(self, request: JudgeRequest, part: Part, version: str, mode: Mode) -> int:
        size = len(part.indices)
        while size > 1 and not self.fits(request, Part(part.per_context, part.indices[:size]), version, mode):
            size = (size + 1) // 2
        return max(1, size)
