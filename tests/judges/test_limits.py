"""The rate limiter and the daily token budget, on injected clocks (and one real wait)."""

from __future__ import annotations

import asyncio
import threading
import time
from datetime import UTC, datetime, timedelta, timezone

import pytest

from ragtrace.judges.limits import DailyTokenBudget, RateLimiter


class FakeClock:
    def __init__(self, start: float = 100.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now


def test_rate_limiter_spaces_reservations_at_the_rate() -> None:
    clock = FakeClock()
    limiter = RateLimiter(60, clock=clock)  # one per second
    waits = [limiter.reserve() for _ in range(4)]
    assert waits == pytest.approx([0.0, 1.0, 2.0, 3.0])


def test_rate_limiter_refills_with_time_up_to_the_burst() -> None:
    clock = FakeClock()
    limiter = RateLimiter(120, burst=3, clock=clock)  # two per second, three at once
    assert [limiter.reserve() for _ in range(3)] == [0.0, 0.0, 0.0]
    assert limiter.reserve() == pytest.approx(0.5)
    clock.now += 100.0  # a long idle refills only up to the burst
    assert [limiter.reserve() for _ in range(3)] == [0.0, 0.0, 0.0]
    assert limiter.reserve() == pytest.approx(0.5)


def test_rate_limiter_rejects_nonsense() -> None:
    with pytest.raises(ValueError):
        RateLimiter(0)
    with pytest.raises(ValueError):
        RateLimiter(10, burst=0)


def test_rate_limiter_acquire_really_waits() -> None:
    limiter = RateLimiter(1200)  # one every 50 ms

    async def five() -> float:
        started = time.perf_counter()
        await asyncio.gather(*(limiter.acquire() for _ in range(5)))
        return time.perf_counter() - started

    assert asyncio.run(five()) >= 0.19


def test_rate_limiter_is_safe_across_threads() -> None:
    clock = FakeClock()
    limiter = RateLimiter(60, clock=clock)
    waits: list[float] = []
    lock = threading.Lock()

    def take() -> None:
        for _ in range(50):
            w = limiter.reserve()
            with lock:
                waits.append(w)

    threads = [threading.Thread(target=take) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(waits) == pytest.approx([float(i) for i in range(200)])


def test_budget_counts_down_and_is_exhausted() -> None:
    day = datetime(2026, 3, 1, 10, tzinfo=UTC)
    budget = DailyTokenBudget(1000, clock=lambda: day)
    assert budget.remaining() == 1000 and not budget.exhausted()
    budget.spend(600)
    assert budget.remaining() == 400 and budget.can_afford(400) and not budget.can_afford(401)
    budget.spend(500)
    assert budget.remaining() == 0 and budget.exhausted()
    assert budget.spent() == 1100


def test_budget_rolls_over_at_utc_midnight() -> None:
    now = [datetime(2026, 3, 1, 23, 59, 59, tzinfo=UTC)]
    budget = DailyTokenBudget(100, clock=lambda: now[0])
    budget.spend(100)
    assert budget.exhausted()
    now[0] += timedelta(seconds=2)
    assert not budget.exhausted() and budget.remaining() == 100


def test_budget_day_is_the_utc_day_whatever_the_clock_zone() -> None:
    plus_two = timezone(timedelta(hours=2))
    now = [datetime(2026, 3, 2, 1, 0, tzinfo=plus_two)]  # still 1 March in UTC
    budget = DailyTokenBudget(100, clock=lambda: now[0])
    budget.spend(100)
    now[0] = datetime(2026, 3, 2, 1, 59, tzinfo=plus_two)  # 23:59 UTC, same UTC day
    assert budget.exhausted()
    now[0] = datetime(2026, 3, 2, 2, 1, tzinfo=plus_two)  # 00:01 UTC, a new day
    assert not budget.exhausted()


def test_budget_spend_is_thread_safe() -> None:
    budget = DailyTokenBudget(10**9)
    threads = [threading.Thread(target=lambda: [budget.spend(1) for _ in range(2000)]) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert budget.spent() == 8000
