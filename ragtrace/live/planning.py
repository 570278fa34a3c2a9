"""Which samples of a closed trace are judged, by which scorers, and on which span the scores land."""

from __future__ import annotations

from collections.abc import Sequence

from opentelemetry.sdk.trace import ReadableSpan

from ragtrace._logs import ragtrace_logger
from ragtrace._sdk import is_local_root
from ragtrace.capture import CapturedSample
from ragtrace.live.redaction import Redactor
from ragtrace.live.sampling import Sampler
from ragtrace.scoring import ContextRecall, JudgeUsage, RagSample, Scorer

logger = ragtrace_logger(__name__)

Planned = tuple[RagSample, tuple[Scorer, ...]]


class Planner:
    """Per-scorer sampling, admission (rate and budget limits) and redaction for one sample at a time."""

    def __init__(self, scorers: Sequence[Scorer], sampler: Sampler, redactor: Redactor | None, target: str) -> None:
        self._scorers = tuple(scorers)
        self._by_name = {s.name: s for s in self._scorers}
        self._sampler = sampler
        self._redactor = redactor
        self._target = target

    def plan(self, trace_id: int, captured: CapturedSample, span: ReadableSpan) -> Planned | str:
        """The sample to judge and its scorers, or the decision it counts as instead."""
        names = [
            s.name for s in self._scorers
            if not (isinstance(s, ContextRecall) and captured.sample.ground_truth is None)
        ]
        chosen = self._sampler.scorers_for(trace_id, span, names) if names else ()
        if not chosen:
            return "not_sampled"
        allowance = self._sampler.admit()
        if allowance != "ok":
            return allowance
        sample = captured.sample
        if self._redactor is not None:
            try:
                sample = self._redactor.redact_sample(sample)
            except Exception:  # never send an unredacted sample to the judge
                logger.exception("ragtrace: redaction failed; sample not judged")
                return "error"
        return sample, tuple(self._by_name[n] for n in chosen if n in self._by_name)

    def charge(self, usage: JudgeUsage) -> None:
        """Bill a judged sample's usage to the sampler's budget."""
        self._sampler.charge(usage)

    def target_of(
        self, captured: CapturedSample, by_id: dict[int, ReadableSpan], spans: Sequence[ReadableSpan]
    ) -> int:
        """The span id the scores are written to; falls back to the retrieval span."""
        if self._target == "generation" and captured.generation_span_id in by_id:
            return captured.generation_span_id  # type: ignore[return-value]
        if self._target == "root":
            if captured.root_span_id in by_id:
                return captured.root_span_id  # type: ignore[return-value]
            root = next((s for s in spans if is_local_root(s) and s.context is not None), None)
            if root is not None and root.context is not None:
                return int(root.context.span_id)
        return captured.retrieval_span_id
