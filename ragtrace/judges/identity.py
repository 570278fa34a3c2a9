"""Which judge gave a score: `judge_identity(judge)`, a short stable digest of what makes verdicts differ.

Two judges with the same id give the same verdicts on the same sample (up to a model's own sampling);
two that may not, differ in id. The digest covers the judge's kind, model, prompt version and the
settings a judge lists in `identity_settings()` (the LLM judge: temperature, answer and context caps,
sampling keywords, and the text of its prompt; the local judge: its `fingerprint()`, which covers its
code, tuned constants and the model files' bytes). Timeouts, retries, concurrency, the endpoint and keys
are not verdicts and are left out, so moving a judge to another server or raising its timeout keeps its
id. It is written beside `ragtrace.judge.model` and `ragtrace.judge.prompt_version` on every score
(`JUDGE_ID`), and its cardinality is one value per judge, so metrics may carry it.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ragtrace.judges.base import Judge

__all__ = ["JUDGE_ID", "JudgeIdentity", "file_digest", "judge_id", "judge_identity"]

#: The attribute (span, event, metric, report) that names the judge behind a score.
JUDGE_ID = "ragtrace.judge.id"
#: Hex characters kept of the sha256: 48 bits, no collision in any realistic count of judges.
ID_CHARS = 12


@dataclass(frozen=True)
class JudgeIdentity:
    """A judge as a score names it: `id` digests `kind`, `model`, `prompt_version` and `settings`."""

    id: str
    kind: str
    model: str
    prompt_version: str
    settings: Mapping[str, Any] = field(default_factory=dict)

    def describe(self) -> str:
        """One line for a log: `llm openai/gpt-4o-mini prompt fused-v2 (id 3f2a9c0e1b7d)`."""
        return f"{self.kind} {self.model} prompt {self.prompt_version} (id {self.id})"


def _kind(judge: Judge) -> str:
    kind = getattr(judge, "identity_kind", None)
    if isinstance(kind, str) and kind:
        return kind
    cls = type(judge)
    return f"{cls.__module__}.{cls.__qualname__}"


def judge_identity(judge: Judge) -> JudgeIdentity:
    """The identity of `judge`: its kind (`identity_kind`, else its class), model, prompt version, fused or
    not, and what its `identity_settings()` returns (JSON-able values; any other is taken by its repr), or
    else its `fingerprint()`.

    A judge with neither is identified by its class, model and prompt version alone.
    """
    kind = _kind(judge)
    model = str(getattr(judge, "model", ""))
    prompt_version = str(getattr(judge, "prompt_version", ""))
    settings_of = getattr(judge, "identity_settings", None)
    fingerprint = getattr(judge, "fingerprint", None)
    settings: dict[str, Any] = {}
    if callable(settings_of):
        settings = dict(settings_of())
    elif callable(fingerprint):  # a judge that digests itself (the local judge: code, constants, model files)
        settings = {"fingerprint": fingerprint()}
    settings.setdefault("fused", bool(getattr(judge, "fused", True)))
    payload = {"kind": kind, "model": model, "prompt_version": prompt_version, "settings": settings}
    text = json.dumps(payload, sort_keys=True, default=repr, separators=(",", ":"))
    digest = hashlib.sha256(text.encode()).hexdigest()[:ID_CHARS]
    return JudgeIdentity(digest, kind, model, prompt_version, settings)


def judge_id(judge: Judge) -> str:
    """`judge_identity(judge).id`: the value of `ragtrace.judge.id`."""
    return judge_identity(judge).id


_digests: dict[tuple[str, int, int], str] = {}
_digest_lock = threading.Lock()


def file_digest(path: str | os.PathLike[str]) -> str:
    """sha256 of a file's bytes, read once per (path, size, mtime) in this process: a model file of
    90 MB is hashed when it is first asked about and again only when it changes on disk."""
    name = os.path.abspath(os.fspath(path))
    stat = os.stat(name)
    key = (name, stat.st_size, stat.st_mtime_ns)
    cached = _digests.get(key)
    if cached is not None:
        return cached
    digest = hashlib.sha256()
    with open(name, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    value = digest.hexdigest()
    with _digest_lock:
        _digests[key] = value
    return value
