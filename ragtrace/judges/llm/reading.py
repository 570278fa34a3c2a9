"""Reading an answer: the JSON object of a reply (`read_reply`), then every well-formed verdict in it for
what its call asked and what was wrong with the rest (`read_answer`), so that a partial answer can be
completed by a smaller follow-up call."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from ragtrace.judges.llm.parsing import RepeatedKey, parse_cut_json, parse_json, without_reasoning
from ragtrace.judges.llm.part import LEVELS, MAX_MISSING, REASON_CHARS, Part, shown_keys
from ragtrace.scoring import Aspect


@dataclass
class Reading:
    """The well-formed pieces of one answer, and what was wrong with the rest."""

    verdicts: dict[int, dict[str, Any]] = field(default_factory=dict)
    missing: list[str] | None = None
    claims: list[dict[str, Any]] | None = None
    problems: list[str] = field(default_factory=list)
    from_cut: bool = False  # read from a reply cut off mid-way, up to its cut

    def left(self, part: Part) -> Part | None:
        """The part still unanswered (context indices, sample-level fields); None when all is answered."""
        indices = tuple(i for i in part.indices if i not in self.verdicts)
        missing = part.missing and self.missing is None
        claims = part.claims and self.claims is None
        if not indices and not missing and not claims:
            return None
        return Part(part.per_context if indices else frozenset(), indices, missing, claims)

    def merge(self, other: Reading) -> None:
        """Take what `other` answered that this reading does not have yet."""
        for index, verdict in other.verdicts.items():  # another aspect's fields for the same context join
            mine = self.verdicts.setdefault(index, {})
            for name, value in verdict.items():
                if mine.get(name) in (None, ""):
                    mine[name] = value
        if self.missing is None:
            self.missing = other.missing
        if self.claims is None:
            self.claims = other.claims

    def progress(self) -> bool:
        return bool(self.verdicts) or self.missing is not None or self.claims is not None


_YES = frozenset({"true", "yes", "1"})
_NO = frozenset({"false", "no", "0"})


def _flag(value: Any) -> bool | None:
    """A yes/no as models write it: a boolean, 1 or 0, or the words true/false, yes/no, "1"/"0"."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return value == 1
    if isinstance(value, str):
        word = value.strip().lower()
        return True if word in _YES else False if word in _NO else None
    return None


def _index(key: Any) -> int | None:
    """A context index as an integer or a string of digits; anything else (1.5, true, "c1") is none."""
    if isinstance(key, int) and not isinstance(key, bool):
        return key
    if isinstance(key, str) and key.strip().isdigit():
        return int(key.strip())
    return None


def _entries(contexts: Any) -> list[tuple[Any, Any]]:
    """(index, entry) pairs from the schema's object keyed by index, or from a list of entries with "index"."""
    if isinstance(contexts, dict):
        return list(contexts.items())
    if isinstance(contexts, list):
        return [(e.get("index") if isinstance(e, dict) else None, e) for e in contexts]
    return []


def read_reply(
    content: str, part: Part, n_contexts: int, reason_chars: int = REASON_CHARS, reasoned: bool = False
) -> tuple[Reading, str]:
    """The usable verdicts of a reply's text, and what to tell the judge about the rest.
    `reasoned` says the server sent the model's thinking apart from this text."""
    answer = without_reasoning(content)
    if not answer.strip():
        if reasoned or answer != content:  # a reasoning model that never got to its answer
            return Reading(), (
                "the reply holds only reasoning and no JSON object; think briefly, then reply with the "
                "JSON object (a reasoning model needs a larger max_tokens, or its thinking turned off)"
            )
        return Reading(), "the reply was empty; reply with a JSON object"
    from_cut = False
    try:
        data = parse_json(answer)
    except RepeatedKey as exc:  # a shorter reading would silently keep one of the two values
        return Reading(), str(exc)
    except ValueError as exc:
        try:
            data = parse_cut_json(answer)
        except ValueError:
            return Reading(), str(exc)
        from_cut = True
    reading = read_answer(data, part, n_contexts, reason_chars)
    reading.from_cut = from_cut
    return reading, "; ".join(reading.problems[:10])


def read_answer(data: Any, part: Part, n_contexts: int, reason_chars: int = REASON_CHARS) -> Reading:
    """Every well-formed verdict of `data` for the indices `part` asks; the rest as problems."""
    reading = Reading()
    if not isinstance(data, dict):
        reading.problems.append("the reply must be a JSON object")
        return reading
    if part.per_context:
        _read_contexts(data.get("contexts"), part, reason_chars, reading)
        absent = sorted(set(part.indices) - set(reading.verdicts))
        if absent:
            reading.problems.append(f"no valid verdict for context indices {absent}")
    if part.missing:
        reading.missing = _missing(data.get("missing"), reason_chars, reading.problems)
    if part.claims:
        reading.claims = _claims(data.get("claims"), n_contexts, reading.problems)
    return reading


def _read_contexts(contexts: Any, part: Part, reason_chars: int, reading: Reading) -> None:
    """The per-context verdicts, trusted only when the answer's numbering is: a key that is not an asked
    index (a model counting from 1, or judging a context it was not shown) means the other keys may be
    shifted too, so none of them is kept; a context judged twice keeps neither verdict."""
    asked = set(part.indices)
    entries = _entries(contexts)
    keys = [_index(key) for key, _ in entries]
    strays = [key for (key, _), index in zip(entries, keys, strict=True) if index not in asked]
    for key in strays:
        reading.problems.append(
            f"context key {key!r} is not an index" if _index(key) is None else f"context {key} was not asked for"
        )
    if strays:
        reading.problems.append(
            f"the keys must be exactly {shown_keys(part.indices)}; no verdict of this answer is used"
        )
        return
    repeated = {index for index, n in Counter(keys).items() if n > 1}
    for twice in sorted(i for i in repeated if i is not None):
        reading.problems.append(f"context {twice} was judged more than once")
    for (_, entry), index in zip(entries, keys, strict=True):
        if index is None or index in repeated:
            continue
        if not isinstance(entry, dict):
            reading.problems.append(f"context {index}: not an object")
            continue
        verdict, wrong = _verdict(entry, index, part.per_context, reason_chars)
        if wrong:
            reading.problems.append(f"context {index}: " + "; ".join(wrong))
        else:
            reading.verdicts[index] = verdict


def _verdict(
    entry: dict[str, Any], index: int, aspects: frozenset[Aspect], reason_chars: int
) -> tuple[dict[str, Any], list[str]]:
    """One context's verdict as read, and what is wrong with it."""
    verdict: dict[str, Any] = {"index": index, "reason": str(entry.get("reason", ""))[:reason_chars]}
    wrong = []
    if Aspect.USEFULNESS in aspects:
        verdict["useful"] = _flag(entry.get("useful"))
        if verdict["useful"] is None:
            wrong.append("'useful' must be true or false")
    if Aspect.RELEVANCE in aspects:
        level = str(entry.get("level", "")).strip().lower()
        verdict["level"] = level if level in LEVELS else None
        verdict["used"] = _flag(entry.get("used"))
        if verdict["level"] is None:
            wrong.append("'level' must be one of high, medium, low, none")
        if verdict["used"] is None:
            wrong.append("'used' must be true or false")
    return verdict, wrong


def _missing(value: Any, reason_chars: int, problems: list[str]) -> list[str] | None:
    if not isinstance(value, list):
        problems.append("'missing' must be a list of strings")
        return None
    # Each piece counts once against the score: a model that names it twice does not double it.
    pieces: dict[str, str] = {}
    for piece in value:
        pieces.setdefault(" ".join(str(piece).split()).casefold(), str(piece)[:reason_chars])
    return [piece for key, piece in pieces.items() if key][:MAX_MISSING]


def _claims(value: Any, n_contexts: int, problems: list[str]) -> list[dict[str, Any]] | None:
    if not isinstance(value, list):
        problems.append("'claims' is required: split the ground truth into atomic claims")
        return None
    claims = []
    for i, claim in enumerate(value):
        supported = _flag(claim.get("supported")) if isinstance(claim, dict) else None
        indices = claim.get("context_indices") if isinstance(claim, dict) else None
        if supported is None or not isinstance(indices, list) or not str(claim.get("claim", "")).strip():
            problems.append(f"claim {i}: needs 'claim', 'supported' (true/false) and 'context_indices'")
            return None
        numbers = [_index(j) for j in indices]
        bad = [j for j, k in zip(indices, numbers, strict=True) if k is None or not 0 <= k < n_contexts]
        if bad:
            problems.append(f"claim {i}: context_indices {bad} out of range 0..{n_contexts - 1}")
            return None
        claims.append({"claim": str(claim["claim"]), "supported": supported, "context_indices": numbers})
    return claims

