"""Which traces get judged, and how many judgings the budget allows.

Two separate questions, answered in two places:

- *sampling* is a pure function of the trace id (the low 64 bits, exactly as OpenTelemetry's
  `TraceIdRatioBased` sampler reads them), so every process and every gateway replica makes the same
  decision, and the traces sampled at a lower rate are a subset of those sampled at a higher one;
- *admission* (throttle and daily budget) is stateful and local: it protects the judge's bill, not the
  statistics, so an admitted-but-not-sampled trace never exists and a throttled one is counted, not retried.
"""

from __future__ import annotations

import fnmatch
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Literal

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.sampling import TraceIdRatioBased

from ragtrace._checks import fraction
from ragtrace._logs import ragtrace_logger
from ragtrace.judges.limits import DailyBudget, RateLimiter
from ragtrace.scoring.result import JudgeUsage

__all__ = ["Allowance", "Sampler", "SamplingRule", "trace_sampled"]

_logger = ragtrace_logger(__name__)

Allowance = Literal["ok", "throttled", "over_budget"]
AttributeValue = str | int | float | bool

TRACE_ID_MASK = TraceIdRatioBased.TRACE_ID_LIMIT


def _bound(rate: float) -> int:
    return TraceIdRatioBased.get_bound_for_rate(rate)


def trace_sampled(trace_id: int, rate: float) -> bool:
    """The decision OTel's TraceIdRatioBased(rate) makes for this trace id: same everywhere, nested by rate."""
    return (trace_id & TRACE_ID_MASK) < _bound(fraction(rate, "rate"))


def _attribute_equal(actual: object, expected: AttributeValue) -> bool:
    # True == 1 in Python; a rule written for a bool must not match an int and vice versa.
    if isinstance(actual, bool) or isinstance(expected, bool):
        return isinstance(actual, bool) and isinstance(expected, bool) and actual is expected
    return actual == expected


@dataclass(frozen=True)
class SamplingRule:
    """A rate for the spans a rule selects; every given condition must hold (an empty rule matches all).

    `span_name` is an fnmatch glob, case-sensitive (`"retrieve*"`); `attributes` are exact matches on the
    span's attributes; `service_name` is compared with the resource's `service.name`.
    """

    rate: float
    span_name: str | None = None
    attributes: Mapping[str, AttributeValue] = field(default_factory=dict)
    service_name: str | None = None

    def __post_init__(self) -> None:
        fraction(self.rate, "SamplingRule.rate")

    def matches(self, span: ReadableSpan) -> bool:
        """Never raises: a span this rule cannot read does not match it."""
        try:
            if self.span_name is not None and not fnmatch.fnmatchcase(span.name, self.span_name):
                return False
            if self.service_name is not None:
                resource = span.resource
                service = resource.attributes.get("service.name") if resource is not None else None
                if service != self.service_name:
                    return False
            if self.attributes:
                attrs = span.attributes or {}
                for key, expected in self.attributes.items():
                    if key not in attrs or not _attribute_equal(attrs[key], expected):
                        return False
            return True
        except Exception:  # a foreign span type with surprising attributes
            _logger.debug("sampling rule could not read span", exc_info=True)
            return False


def _utc_now() -> datetime:
    return datetime.now(UTC)


class Sampler:
    """Sampling by trace-id hash (base rate, per-rule rates, per-scorer caps) plus throttle and daily budget.

    `might_sample` is the pre-filter on every span (one AND and one compare against `trace_id_bound`, which
    the processor's `on_end` inlines); `scorers_for` is the decision at
    trace close; `admit` / `charge` guard the judge's throughput and bill. The budget is soft: a judging
    admitted under the limit may overshoot it by its own cost, because that cost is known only afterwards.
    """

    def __init__(
        self,
        rate: float = 0.1,
        *,
        scorer_rates: Mapping[str, float] | None = None,
        rules: Sequence[SamplingRule] = (),
        evaluations_per_minute: float | None = None,
        daily_token_budget: int | None = None,
        daily_usd_budget: float | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], datetime] = _utc_now,
    ) -> None:
        self.rate = fraction(rate, "rate")
        self.scorer_rates: dict[str, float] = {
            name: fraction(r, f"scorer_rates[{name!r}]") for name, r in (scorer_rates or {}).items()
        }
        self.rules: tuple[SamplingRule, ...] = tuple(rules)
        for rule in self.rules:
            if not isinstance(rule, SamplingRule):
                raise ValueError(f"rules must be SamplingRule instances, got {rule!r}")
        if evaluations_per_minute is not None and not evaluations_per_minute > 0:
            raise ValueError(f"evaluations_per_minute must be > 0 or None, got {evaluations_per_minute!r}")
        if daily_token_budget is not None and daily_token_budget < 0:
            raise ValueError(f"daily_token_budget must be >= 0 or None, got {daily_token_budget!r}")
        if daily_usd_budget is not None and not daily_usd_budget >= 0:
            raise ValueError(f"daily_usd_budget must be >= 0 or None, got {daily_usd_budget!r}")
        self.evaluations_per_minute = evaluations_per_minute
        self.daily_token_budget = daily_token_budget
        self.daily_usd_budget = daily_usd_budget
        self._clock = clock
        self._wall_clock = wall_clock

        # A per-scorer rate only ever lowers the effective rate, so the widest possible net is the
        # highest of the base and rule rates.
        self._base_bound = _bound(self.rate)
        self._rule_bounds = tuple(_bound(rule.rate) for rule in self.rules)
        self._scorer_bounds = {name: _bound(r) for name, r in self.scorer_rates.items()}
        self._max_bound = max((self._base_bound, *self._rule_bounds))

        # `admit` uses the judges' own limiters: a non-blocking token bucket holding one minute's worth
        # of evaluations, and daily budgets (an unset budget still counts, so spend is always reported).
        self._throttle = (
            RateLimiter(evaluations_per_minute, burst=max(1.0, evaluations_per_minute), clock=clock)
            if evaluations_per_minute
            else None
        )
        no_limit = math.inf
        self._token_budget = DailyBudget(
            no_limit if daily_token_budget is None else daily_token_budget, clock=wall_clock
        )
        self._usd_budget = DailyBudget(no_limit if daily_usd_budget is None else daily_usd_budget, clock=wall_clock)
        self._unpriced_warned = False

    # -- sampling (pure in the trace id) ------------------------------------------------------------

    @property
    def trace_id_bound(self) -> int:
        """A trace may be sampled only if `trace_id & TRACE_ID_MASK` is below this (`might_sample`)."""
        return self._max_bound

    def might_sample(self, trace_id: int) -> bool:
        """Could any rule or rate sample this trace? O(1), for every span."""
        try:
            return (trace_id & TRACE_ID_MASK) < self._max_bound
        except TypeError:
            return False

    def effective_rate(self, span: ReadableSpan) -> float:
        """The first matching rule's rate, else the base rate."""
        for rule in self.rules:
            if rule.matches(span):
                return rule.rate
        return self.rate

    def scorers_for(self, trace_id: int, span: ReadableSpan, scorer_names: Sequence[str]) -> tuple[str, ...]:
        """The scorers that run on this retrieval span, in the given order; empty means not sampled."""
        try:
            bound = self._base_bound
            for rule, rule_bound in zip(self.rules, self._rule_bounds, strict=True):
                if rule.matches(span):
                    bound = rule_bound
                    break
            position = trace_id & TRACE_ID_MASK
            return tuple(name for name in scorer_names if position < min(bound, self._scorer_bounds.get(name, bound)))
        except Exception:
            _logger.warning("sampling decision failed; trace not sampled", exc_info=True)
            return ()

    # -- admission (stateful: throttle and budget) --------------------------------------------------

    def admit(self) -> Allowance:
        """Take one evaluation from the per-minute bucket unless the day's budget is spent. Thread-safe."""
        if self._token_budget.exhausted() or self._usd_budget.exhausted():
            return "over_budget"  # checked first, so a spent budget does not use up the throttle
        if self._throttle is None or self._throttle.try_acquire():
            return "ok"
        return "throttled"

    def charge(self, usage: JudgeUsage) -> None:
        """Add what a judging cost to today's spend. An unknown price (cost None) adds no USD."""
        self._token_budget.spend(max(0, usage.input_tokens) + max(0, usage.output_tokens))
        if usage.cost_usd is not None:
            self._usd_budget.spend(usage.cost_usd)
        elif self.daily_usd_budget is not None and usage.calls and not self._unpriced_warned:
            self._unpriced_warned = True
            _logger.warning("judge model %r has no known price; the USD budget cannot count its calls", usage.model)

    @property
    def tokens_spent_today(self) -> int:
        return int(self._token_budget.spent())

    @property
    def usd_spent_today(self) -> float:
        return float(self._usd_budget.spent())
