"""The judge's one way to a model: litellm, imported on first use with its offline price map."""

from __future__ import annotations

import os
from typing import Any


def load_litellm() -> Any:
    """Import litellm on first use (it takes seconds) with its offline price map: no fetch at run time.

    Its "Give Feedback / Get Help" banners are print() calls on stdout, where they would corrupt the
    output of a program that prints JSON; the judge reports each failure itself, so they are turned off.
    """
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    import litellm

    litellm.suppress_debug_info = True
    return litellm


class TokenCounter:
    """Counts tokens with litellm's offline tokenizer for `model`."""

    def __init__(self, model: str) -> None:
        self.model = model

    def __call__(self, text: str) -> int:
        return int(load_litellm().token_counter(model=self.model, text=text))
