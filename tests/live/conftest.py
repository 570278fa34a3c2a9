"""The `rig` fixture: processors on real providers, shut down after the test."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.live.fakes import Rig, ScriptedJudge


@pytest.fixture
def rig() -> Iterator[Callable[..., Rig]]:
    rigs: list[Rig] = []

    def make(judge: ScriptedJudge | None = None, **options: Any) -> Rig:
        rigs.append(Rig(judge, **options))
        return rigs[-1]

    yield make
    for r in rigs:
        r.close()
