"""The shared settings checks, through the settings classes that use them."""

from __future__ import annotations

import math
from typing import Any

import pytest

from ragtrace.capture.explain import DecisionLog
from ragtrace.capture.values import CaptureLimits
from ragtrace.gateway.receivers import ReceiverLimits
from ragtrace.live.drift import DriftConfig
from ragtrace.live.sampling import SamplingRule, trace_sampled


@pytest.mark.parametrize("bad", [0, -1, 2.5, True, "10", None])
def test_a_count_is_an_integer_of_at_least_its_minimum(bad: Any) -> None:
    with pytest.raises(ValueError, match=r"window must be an integer >= 1"):
        DriftConfig(window=bad)
    with pytest.raises(ValueError, match=r"max_connections must be an integer >= 1"):
        ReceiverLimits(max_connections=bad)
    with pytest.raises(ValueError, match=r"size must be an integer >= 1"):
        DecisionLog(size=bad)


@pytest.mark.parametrize("bad", [-1, 2.5, True, "10"])
def test_a_cap_may_be_zero_but_not_negative_or_fractional(bad: Any) -> None:
    assert CaptureLimits(max_documents=0).max_documents == 0
    with pytest.raises(ValueError, match=r"max_documents must be an integer >= 0"):
        CaptureLimits(max_documents=bad)


@pytest.mark.parametrize("bad", [0, -0.5, math.nan, True, "5"])
def test_a_threshold_or_duration_is_a_number_above_zero(bad: Any) -> None:
    with pytest.raises(ValueError, match=r"cusum_h must be a number > 0, got"):
        DriftConfig(cusum_h=bad)
    with pytest.raises(ValueError, match=r"read_timeout must be a number > 0 seconds"):
        ReceiverLimits(read_timeout=bad)


@pytest.mark.parametrize("bad", [-0.01, math.nan, False, "0"])
def test_an_allowance_is_a_number_of_at_least_zero(bad: Any) -> None:
    assert DriftConfig(min_delta=0).min_delta == 0
    with pytest.raises(ValueError, match=r"min_delta must be a number >= 0"):
        DriftConfig(min_delta=bad)


@pytest.mark.parametrize("bad", [-0.01, 1.5, math.nan, True, "0.5", None])
def test_a_rate_is_a_number_in_zero_to_one(bad: Any) -> None:
    assert SamplingRule(rate=0).rate == 0 and SamplingRule(rate=1).rate == 1
    with pytest.raises(ValueError, match=r"SamplingRule.rate must be a number in \[0, 1\]"):
        SamplingRule(rate=bad)
    with pytest.raises(ValueError, match=r"rate must be a number in \[0, 1\]"):
        trace_sampled(1, bad)
