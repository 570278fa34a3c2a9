"""Checks of settings fields, shared so that every settings class means the same by a count or a duration."""

from __future__ import annotations


def count(value: object, what: str, minimum: int = 1) -> int:
    """`value` if it is an integer (a bool is not one) of at least `minimum`; `what` names it."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{what} must be an integer >= {minimum}, got {value!r}")
    return value


def counts(owner: object, *names: str, minimum: int = 1) -> None:
    """Each named field is an integer of at least `minimum`."""
    for name in names:
        count(getattr(owner, name), name, minimum)


def positive(owner: object, *names: str, unit: str = "") -> None:
    """Each named field is a number above 0 (NaN, a bool or a string is not); `unit` names it in the error."""
    for name in names:
        value = getattr(owner, name)
        if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
            raise ValueError(f"{name} must be a number > 0{unit}, got {value!r}")


def fraction(value: object, what: str) -> float:
    """`value` as a float if it is a number in [0, 1] (NaN, a bool or a string is not); `what` names it."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0.0 <= value <= 1.0:
        raise ValueError(f"{what} must be a number in [0, 1], got {value!r}")
    return float(value)


def fractions(owner: object, *names: str) -> None:
    """Each named field is a number in [0, 1]."""
    for name in names:
        fraction(getattr(owner, name), name)


def non_negative(owner: object, *names: str) -> None:
    """Each named field is a number of at least 0 (NaN, a bool or a string is not)."""
    for name in names:
        value = getattr(owner, name)
        if isinstance(value, bool) or not isinstance(value, int | float) or not value >= 0:
            raise ValueError(f"{name} must be a number >= 0, got {value!r}")
