"""Objects that cross to the scoring process (`worker="process"`) pickle without their per-process state.

A lock, a weak registry of event loops or a cache of loaded models means nothing in another process
(and a lock does not pickle at all). Classes list such attributes in `_per_process`, each with a
function that makes a fresh one from the instance; everything else travels as it is.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, ClassVar


def fresh_lock(_owner: object) -> threading.Lock:
    return threading.Lock()


class PerProcessState:
    """Mixin: pickles `__dict__` minus the attributes named in `_per_process`, remade on unpickling."""

    _per_process: ClassVar[dict[str, Callable[[Any], Any]]] = {"_lock": fresh_lock}

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        for name in self._per_process:
            state.pop(name, None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        for name, make in self._per_process.items():
            setattr(self, name, make(self))
