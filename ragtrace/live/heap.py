"""The heap of a long-running process that ragtrace owns: the scoring process and `ragtrace serve`."""

from __future__ import annotations

import gc

from ragtrace.judges.base import Judge
from ragtrace.judges.llm.judge import LLMJudge
from ragtrace.judges.llm.transport import load_litellm
from ragtrace.judges.resolve import is_local_judge


def freeze_startup_heap(judge: str | Judge | None) -> None:
    """Load what the judge will load anyway, then exempt everything alive from the collector's full passes.

    litellm's import leaves ~380,000 objects that live as long as the process, and every full collection
    walks them: 240 ms on a 2-core machine, a pause for each of the 16 judge calls in flight, several times
    in a process's first minutes. `gc.freeze()` moves them to the permanent generation, as Python's docs
    advise for long-running servers. Never called in the app's process: its heap is not ours to freeze.
    """
    if isinstance(judge, LLMJudge) or (isinstance(judge, str) and not is_local_judge(judge)):
        load_litellm()
    gc.collect()  # the start's garbage is freed, not frozen
    gc.freeze()
