"""How much the judge may spend: a request-rate limiter and a daily token budget.

Both are thread-safe and cheap to ask, so the live processor can check `DailyTokenBudget.exhausted()`
on every sampled trace and drop work before it queues a job. Clocks are injectable for tests.
"""

from __future__ import annotations

import asyncio
import math
import threading
import time
from collections.abc import Callable
from datetime import UTC, date, datetime

from ragtrace._logs import ragtrace_logger
from ragtrace._state import PerProcessState

logger = ragtrace_logger(__name__)


class RateLimiter(PerProcessState):
    """A token bucket of `requests_per_minute`, holding at most `burst` requests (default: 1).

    `acquire()` reserves the next free slot and sleeps until it, so waiters are served in arrival order
    and a burst of callers never exceeds the rate; `try_acquire()` takes a slot only if one is free now
    (the live sampler's throttle). Reservations are made under a lock, so one limiter may be shared by
    several event loops or threads.
    """

    def __init__(
        self,
        requests_per_minute: float,
        *,
        burst: float = 1,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not requests_per_minute > 0:
            raise ValueError(f"requests_per_minute must be > 0, got {requests_per_minute!r}")
        if not burst >= 1:
            raise ValueError(f"burst must be >= 1, got {burst!r}")
        self.rate = requests_per_minute / 60.0
        self.burst = float(burst)
        self._clock = clock
        self._tokens = float(burst)
        self._updated = clock()
        self._lock = threading.Lock()

    def _refill(self) -> None:
        now = self._clock()
        self._tokens = min(self.burst, self._tokens + max(0.0, now - self._updated) * self.rate)
        self._updated = now

    def reserve(self) -> float:
        """Take one request slot now; return how many seconds the caller must wait before using it."""
        with self._lock:
            self._refill()
            self._tokens -= 1.0
            return 0.0 if self._tokens >= 0 else -self._tokens / self.rate

    def try_acquire(self) -> bool:
        """Take one slot if one is free now; never waits and never goes into debt."""
        with self._lock:
            self._refill()
            if self._tokens >= 1.0:
                self._tokens -= 1.0
                return True
            return False

    async def acquire(self) -> float:
        """Wait for a request slot; returns the seconds waited."""
        wait = self.reserve()
        if wait > 0:
            await asyncio.sleep(wait)
        return wait


def _utc_now() -> datetime:
    return datetime.now(UTC)


class DailyBudget(PerProcessState):
    """At most `limit` of something (judge tokens, USD) per UTC day; the count restarts at UTC midnight.

    Spend is recorded after each call (`spend`), so concurrent calls in flight may overshoot by what they
    use; `exhausted()` then stops new calls until the day rolls over. A clock stepping back never refunds
    the day, and a failing clock keeps the current day.
    """

    def __init__(self, limit: float, *, clock: Callable[[], datetime] = _utc_now) -> None:
        if not limit >= 0:
            raise ValueError(f"limit must be >= 0, got {limit!r}")
        self.limit = limit
        self._clock = clock
        self._day = self._today() or date.min
        self._spent: float = 0
        self._lock = threading.Lock()

    def _today(self) -> date | None:
        try:
            now = self._clock()
            return (now.astimezone(UTC) if now.tzinfo else now).date()
        except Exception:
            logger.warning("wall clock failed; keeping the current budget day", exc_info=True)
            return None

    def _roll(self) -> None:
        today = self._today()
        if today is not None and today > self._day:
            self._day, self._spent = today, 0

    def spend(self, amount: float) -> None:
        with self._lock:
            self._roll()
            self._spent += max(0, amount)

    def spent(self) -> float:
        with self._lock:
            self._roll()
            return self._spent

    def remaining(self) -> float:
        with self._lock:
            self._roll()
            return max(0, self.limit - self._spent)

    def exhausted(self) -> bool:
        if self.limit == math.inf:  # no budget set: spend is still counted, but nothing to check per call
            return False
        return self.remaining() <= 0

    def can_afford(self, amount: float) -> bool:
        """Whether a call expected to cost `amount` fits in what is left today."""
        return self.remaining() >= amount


# The judge's budget counts tokens (input + output); the name says what it counts.
DailyTokenBudget = DailyBudget
