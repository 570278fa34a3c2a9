"""A process ragtrace owns freezes its start-up heap, with litellm in it when the judge is an LLM."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

_PROBE = """
import gc, json, sys
from ragtrace.live.heap import freeze_startup_heap
freeze_startup_heap(sys.argv[1] or None)
print(json.dumps({"litellm": "litellm" in sys.modules, "frozen": gc.get_freeze_count()}))
"""


def _frozen(judge: str) -> dict[str, object]:
    out = subprocess.run(
        [sys.executable, "-c", _PROBE, judge], capture_output=True, text=True, check=True, timeout=120,
        env={**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"},
    ).stdout
    return dict(json.loads(out.splitlines()[-1]))


@pytest.mark.parametrize(("judge", "loads_litellm"), [("openai/gpt-4o-mini", True), ("local", False), ("", False)])
def test_the_start_up_heap_is_frozen_with_what_the_judge_will_load(judge: str, loads_litellm: bool) -> None:
    seen = _frozen(judge)
    assert seen["litellm"] is loads_litellm
    assert int(str(seen["frozen"])) > (100_000 if loads_litellm else 1_000)
