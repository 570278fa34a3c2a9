"""Sampling is a pure, nested function of the trace id; admission throttles and budgets per UTC day."""

from __future__ import annotations

import functools
import random
import subprocess
import sys
import threading
from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import Decision, TraceIdRatioBased

from ragtrace.live.sampling import Sampler, SamplingRule, trace_sampled
from ragtrace.scoring import JudgeUsage

trace_ids = st.integers(min_value=1, max_value=(1 << 128) - 1)
rates = st.floats(min_value=0.0, max_value=1.0, allow_nan=False)
SCORERS = ("context_precision", "context_relevance", "context_recall")


def span(name: str = "retrieve", attributes: dict[str, object] | None = None, service: str = "app") -> ReadableSpan:
    return ReadableSpan(
        name=name,
        attributes=attributes or {},  # type: ignore[arg-type]
        resource=_resource(service),
    )


@functools.cache
def _resource(service: str) -> Resource:
    return Resource({"service.name": service})


def trace_id_at(fraction: float) -> int:
    """A trace id whose hash position is `fraction` of the way through the 64-bit space (random high bits)."""
    return (random.getrandbits(64) << 64) | int(fraction * (1 << 64))


# -- the pure decision -------------------------------------------------------------------------------


@given(trace_ids, rates)
def test_same_decision_as_the_sdk_sampler(trace_id: int, rate: float) -> None:
    sdk = TraceIdRatioBased(rate).should_sample(None, trace_id, "x").decision is Decision.RECORD_AND_SAMPLE
    assert trace_sampled(trace_id, rate) is sdk


@given(trace_ids, rates, rates)
def test_lower_rate_sample_is_subset_of_higher(trace_id: int, a: float, b: float) -> None:
    low, high = sorted((a, b))
    if trace_sampled(trace_id, low):
        assert trace_sampled(trace_id, high)
    sampler_low, sampler_high = Sampler(low), Sampler(high)
    if sampler_low.scorers_for(trace_id, span(), SCORERS):
        assert sampler_high.scorers_for(trace_id, span(), SCORERS) == SCORERS


def test_rate_zero_and_one() -> None:
    ids = [random.getrandbits(128) for _ in range(500)] + [0, 1, (1 << 128) - 1, (1 << 64) - 1]
    assert not any(trace_sampled(t, 0.0) for t in ids)
    assert all(trace_sampled(t, 1.0) for t in ids)
    assert not any(Sampler(0.0).might_sample(t) for t in ids)
    retrieval = span()
    assert all(Sampler(1.0).scorers_for(t, retrieval, SCORERS) == SCORERS for t in ids)


def test_rate_is_roughly_the_sampled_share() -> None:
    rng = random.Random(7)
    hits = sum(trace_sampled(rng.getrandbits(128), 0.1) for _ in range(20_000))
    assert 1_800 < hits < 2_200


def test_same_decision_in_another_process() -> None:
    rng = random.Random(11)
    ids = [rng.getrandbits(128) for _ in range(200)]
    here = [trace_sampled(t, 0.3) for t in ids]
    code = (
        "import sys; from ragtrace.live.sampling import trace_sampled;"
        "ids=[int(x) for x in sys.argv[1:]]; print(''.join('1' if trace_sampled(t, 0.3) else '0' for t in ids))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, *map(str, ids)], capture_output=True, text=True, check=True, timeout=30
    )
    assert out.stdout.strip() == "".join("1" if h else "0" for h in here)
    assert 0 < sum(here) < len(here)


def test_only_low_64_bits_count() -> None:
    low = trace_id_at(0.05)
    for high in (0, 1, (1 << 64) - 1):
        assert trace_sampled((high << 64) | (low & ((1 << 64) - 1)), 0.1)
        assert not trace_sampled((high << 64) | int(0.2 * (1 << 64)), 0.1)


@pytest.mark.parametrize("bad", [-0.01, 1.01, float("nan"), float("inf"), True, "0.5"])
def test_invalid_rates_are_rejected_clearly(bad: object) -> None:
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        Sampler(bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="scorer_rates"):
        Sampler(0.5, scorer_rates={"context_precision": bad})  # type: ignore[dict-item]
    with pytest.raises(ValueError, match=r"SamplingRule\.rate"):
        SamplingRule(rate=bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        trace_sampled(1, bad)  # type: ignore[arg-type]


def test_invalid_limits_are_rejected() -> None:
    with pytest.raises(ValueError, match="evaluations_per_minute"):
        Sampler(evaluations_per_minute=0)
    with pytest.raises(ValueError, match="daily_token_budget"):
        Sampler(daily_token_budget=-1)
    with pytest.raises(ValueError, match="daily_usd_budget"):
        Sampler(daily_usd_budget=-0.5)


# -- rules and per-scorer rates ----------------------------------------------------------------------


def test_rules_by_name_attributes_and_service() -> None:
    sampler = Sampler(
        0.0,
        rules=[
            SamplingRule(rate=1.0, span_name="vector_search*", service_name="checkout"),
            SamplingRule(rate=0.5, attributes={"db.system": "qdrant", "canary": True}),
            SamplingRule(rate=0.2, span_name="retrieve"),
        ],
    )
    at_30 = trace_id_at(0.3)
    assert sampler.scorers_for(at_30, span("vector_search.query", service="checkout"), SCORERS) == SCORERS
    assert sampler.scorers_for(at_30, span("vector_search.query", service="billing"), SCORERS) == ()
    assert sampler.scorers_for(at_30, span("x", {"db.system": "qdrant", "canary": True}), SCORERS) == SCORERS
    # a bool rule never matches an int that happens to equal it
    assert sampler.scorers_for(at_30, span("x", {"db.system": "qdrant", "canary": 1}), SCORERS) == ()
    assert sampler.scorers_for(at_30, span("x", {"db.system": "qdrant"}), SCORERS) == ()
    assert sampler.scorers_for(at_30, span("retrieve"), SCORERS) == ()  # 0.3 is above the 0.2 rule
    assert sampler.scorers_for(trace_id_at(0.1), span("retrieve"), SCORERS) == SCORERS
    assert sampler.scorers_for(trace_id_at(0.1), span("Retrieve"), SCORERS) == ()  # case-sensitive glob
    assert sampler.might_sample(trace_id_at(0.99))  # the 1.0 rule could apply


def test_first_matching_rule_wins() -> None:
    sampler = Sampler(1.0, rules=[SamplingRule(rate=0.0, span_name="noisy*"), SamplingRule(rate=1.0)])
    assert sampler.scorers_for(trace_id_at(0.01), span("noisy.retrieve"), SCORERS) == ()
    assert sampler.scorers_for(trace_id_at(0.01), span("retrieve"), SCORERS) == SCORERS
    assert sampler.effective_rate(span("noisy.x")) == 0.0


def test_rule_on_real_sdk_span() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "rag"}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    with provider.get_tracer("t").start_as_current_span("retriever", attributes={"k": 3}):
        pass
    (finished,) = exporter.get_finished_spans()
    assert SamplingRule(rate=1.0, span_name="retr*", attributes={"k": 3}, service_name="rag").matches(finished)
    assert not SamplingRule(rate=1.0, attributes={"k": 4}).matches(finished)
    assert not SamplingRule(rate=1.0, service_name="other").matches(finished)


def test_per_scorer_rates_cap_the_effective_rate() -> None:
    sampler = Sampler(0.5, scorer_rates={"context_relevance": 0.1, "context_recall": 0.9})
    assert sampler.scorers_for(trace_id_at(0.05), span(), SCORERS) == SCORERS
    assert sampler.scorers_for(trace_id_at(0.3), span(), SCORERS) == ("context_precision", "context_recall")
    # a scorer rate above the base rate does not widen the sample
    assert sampler.scorers_for(trace_id_at(0.7), span(), SCORERS) == ()
    assert not sampler.might_sample(trace_id_at(0.7))


@given(trace_ids, rates, st.lists(rates, max_size=3), st.dictionaries(st.sampled_from(SCORERS), rates))
def test_might_sample_is_a_sound_prefilter(
    trace_id: int, base: float, rule_rates: list[float], scorer_rates: dict[str, float]
) -> None:
    rules = [SamplingRule(rate=r, span_name=f"s{i}") for i, r in enumerate(rule_rates)]
    sampler = Sampler(base, rules=rules, scorer_rates=scorer_rates)
    for name in ["s0", "s1", "s2", "other"]:
        if sampler.scorers_for(trace_id, span(name), SCORERS):
            assert sampler.might_sample(trace_id)


def test_broken_span_is_not_sampled_and_does_not_raise() -> None:
    rules = [SamplingRule(rate=1.0, attributes={"a": 1}, span_name="*", service_name="app")]
    assert not rules[0].matches(object())  # type: ignore[arg-type]
    # the rule cannot read it, so the base rate decides
    assert Sampler(0.0, rules=rules).scorers_for(1, object(), SCORERS) == ()  # type: ignore[arg-type]
    assert Sampler(1.0, rules=rules).scorers_for(1, object(), SCORERS) == SCORERS  # type: ignore[arg-type]
    assert Sampler(1.0).scorers_for("nope", span(), SCORERS) == ()  # type: ignore[arg-type]
    assert Sampler(1.0).might_sample("not an id") is False  # type: ignore[arg-type]


# -- throttle ----------------------------------------------------------------------------------------


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_throttle_refills_per_minute() -> None:
    clock = FakeClock()
    sampler = Sampler(1.0, evaluations_per_minute=6, clock=clock)
    assert [sampler.admit() for _ in range(7)] == ["ok"] * 6 + ["throttled"]
    clock.now += 9.0  # 0.9 of a token
    assert sampler.admit() == "throttled"
    clock.now += 1.5  # now > 1 token
    assert sampler.admit() == "ok"
    assert sampler.admit() == "throttled"
    clock.now += 3600  # a long pause refills only up to one minute's worth
    assert [sampler.admit() for _ in range(7)] == ["ok"] * 6 + ["throttled"]


def test_fractional_rate_allows_one_then_waits() -> None:
    clock = FakeClock()
    sampler = Sampler(1.0, evaluations_per_minute=0.5, clock=clock)
    assert sampler.admit() == "ok"
    clock.now += 60
    assert sampler.admit() == "throttled"
    clock.now += 61
    assert sampler.admit() == "ok"


def test_no_limits_always_admits() -> None:
    sampler = Sampler()
    assert all(sampler.admit() == "ok" for _ in range(1000))


def test_admit_is_thread_safe() -> None:
    clock = FakeClock()
    sampler = Sampler(1.0, evaluations_per_minute=100, clock=clock)
    results: list[str] = []
    lock = threading.Lock()

    def work() -> None:
        for _ in range(50):
            r = sampler.admit()
            with lock:
                results.append(r)

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results.count("ok") == 100 and results.count("throttled") == 300


# -- daily budget ------------------------------------------------------------------------------------


class FakeWallClock:
    def __init__(self, moment: datetime) -> None:
        self.moment = moment

    def __call__(self) -> datetime:
        return self.moment


def test_token_budget_exhaustion_and_midnight_rollover() -> None:
    wall = FakeWallClock(datetime(2026, 3, 1, 23, 59, 0, tzinfo=UTC))
    sampler = Sampler(1.0, daily_token_budget=1000, wall_clock=wall)
    assert sampler.admit() == "ok"
    sampler.charge(JudgeUsage(calls=1, input_tokens=600, output_tokens=300))
    assert sampler.tokens_spent_today == 900
    assert sampler.admit() == "ok"  # under budget: admitted, may overshoot (soft budget)
    sampler.charge(JudgeUsage(calls=1, input_tokens=80, output_tokens=20))
    assert sampler.admit() == "over_budget"
    wall.moment += timedelta(seconds=59)  # 23:59:59, same day
    assert sampler.admit() == "over_budget"
    wall.moment += timedelta(seconds=1)  # 00:00:00 UTC next day
    assert sampler.admit() == "ok"
    assert sampler.tokens_spent_today == 0


def test_usd_budget_and_local_timezone_clock() -> None:
    # 03:30 local (UTC+2) on 2 March = 01:30 UTC on 2 March
    plus_two = datetime(2026, 3, 2, 1, 30, tzinfo=UTC).astimezone(timezone(timedelta(hours=2)))
    wall = FakeWallClock(plus_two)
    sampler = Sampler(1.0, daily_usd_budget=0.01, wall_clock=wall)
    sampler.charge(JudgeUsage(calls=1, cost_usd=0.004, model="m"))
    sampler.charge(JudgeUsage(calls=1, cost_usd=None, model="unpriced"))  # unknown price adds nothing
    assert sampler.usd_spent_today == pytest.approx(0.004)
    assert sampler.admit() == "ok"
    sampler.charge(JudgeUsage(calls=1, cost_usd=0.006, model="m"))
    assert sampler.admit() == "over_budget"
    wall.moment += timedelta(hours=21)  # 00:30 local on 3 March is still 22:30 UTC on 2 March
    assert sampler.admit() == "over_budget"
    wall.moment += timedelta(hours=2)  # 00:30 UTC on 3 March
    assert sampler.admit() == "ok"


def test_clock_stepping_back_keeps_the_spend() -> None:
    wall = FakeWallClock(datetime(2026, 3, 2, 0, 0, 5, tzinfo=UTC))
    sampler = Sampler(1.0, daily_token_budget=10, wall_clock=wall)
    sampler.charge(JudgeUsage(input_tokens=10))
    wall.moment -= timedelta(seconds=10)
    assert sampler.admit() == "over_budget"


def test_budget_check_does_not_consume_throttle_tokens() -> None:
    clock = FakeClock()
    wall = FakeWallClock(datetime(2026, 3, 2, 12, tzinfo=UTC))
    sampler = Sampler(1.0, evaluations_per_minute=1, daily_token_budget=5, clock=clock, wall_clock=wall)
    sampler.charge(JudgeUsage(input_tokens=5))
    assert sampler.admit() == "over_budget"
    wall.moment += timedelta(days=1)
    assert sampler.admit() == "ok"  # the bucket was not drained while over budget
    assert sampler.admit() == "throttled"
