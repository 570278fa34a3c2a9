"""The dialogue that gets one part of a request answered: the usable verdicts of each answer are kept
and only the rest is asked again (a follow-up, in a smaller call); an answer with nothing usable is
retried with something changed: the error and a stricter rule are shown, and from the second retry (or
when the same text comes back) the temperature steps up. It ends answered, or in `JudgeInvalidOutput`.
"""

from __future__ import annotations

from dataclasses import dataclass

from ragtrace.judges.base import JudgeRequest
from ragtrace.judges.errors import JudgeInvalidOutput
from ragtrace.judges.llm.calls import ModelCaller, Note, Tally
from ragtrace.judges.llm.failures import short
from ragtrace.judges.llm.part import Part
from ragtrace.judges.llm.prompt import Prompt, Prompting, retry_messages
from ragtrace.judges.llm.reading import Reading, read_reply
from ragtrace.judges.llm.schema import Mode
from ragtrace.judges.llm.transport import REPEATED, Answer


@dataclass(frozen=True)
class Persistence:
    """How hard the dialogue tries: follow-ups for what a partial answer left out, retries of an unusable
    answer, and the temperature it starts at and steps up by."""

    max_followups: int = 3
    max_invalid_retries: int = 2
    temperature: float = 0.0
    temperature_step: float = 0.3


class _Question:
    """The prompt asking `part`, rendered once per mode it is sent in (the schema travels in the prompt
    in some modes). Every mode cuts the same contexts."""

    def __init__(self, prompting: Prompting, request: JudgeRequest, part: Part, version: str) -> None:
        self._prompting, self._request, self._part, self._version = prompting, request, part, version
        self._prompts: dict[Mode, Prompt] = {}

    def __call__(self, mode: Mode) -> Prompt:
        if mode not in self._prompts:
            self._prompts[mode] = self._prompting.prompt(self._request, self._part, mode, self._version)
        return self._prompts[mode]

    @property
    def truncated(self) -> tuple[int, ...]:
        return next(iter(self._prompts.values())).truncated if self._prompts else ()


@dataclass
class _Tries:
    """Where one part's dialogue stands."""

    temperature: float
    followups: int = 0
    invalid: int = 0
    previous: str | None = None


class Dialogue:
    """Asks `caller` until a part is answered, with `prompting`'s prompts and `persistence`'s limits."""

    def __init__(self, caller: ModelCaller, prompting: Prompting, persistence: Persistence, note: Note) -> None:
        self.caller = caller
        self.prompting = prompting
        self.persistence = persistence
        self._note = note

    async def answer(
        self, request: JudgeRequest, part: Part, version: str, tally: Tally, collected: Reading, truncated: set[int]
    ) -> None:
        """Ask for `part` until every verdict in it is in `collected`; the contexts cut go to `truncated`."""
        n = len(request.sample.contexts)
        pending: Part | None = part
        history: list[dict[str, str]] = []
        tries = _Tries(self.persistence.temperature)
        while pending is not None:
            asked = pending
            question = _Question(self.prompting, request, asked, version)
            answer = await self.caller.complete(
                question, history, asked, tally, tries.temperature, self.prompting.max_tokens_for(request, asked)
            )
            truncated.update(question.truncated)
            reading, error = self._read(answer, asked, n)
            collected.merge(reading)
            pending = reading.left(asked)
            if pending is not None:
                history = self._next(tries, reading, answer.content, error, pending, tally)

    def _read(self, answer: Answer, part: Part, n: int) -> tuple[Reading, str]:
        reading, error = read_reply(answer.content, part, n, self.prompting.reason_chars, answer.reasoned)
        if reading.from_cut:
            self._note("cut_answers_read")
        if answer.finish_reason == "length":
            error = f"the answer was cut off at the token limit; keep every reason short. {error}"
        elif answer.finish_reason == REPEATED:
            self._note("repeated_answers")
            error = f"the answer repeated the same text until it was stopped; end it after the JSON. {error}"
        return reading, error

    def _next(
        self, tries: _Tries, reading: Reading, content: str, error: str, pending: Part, tally: Tally
    ) -> list[dict[str, str]]:
        """What follows an answer that left `pending` unanswered: a fresh follow-up when it made progress,
        else a retry that shows the error (the history to send), or the end."""
        limits = self.persistence
        if reading.progress() and tries.followups < limits.max_followups:
            tries.followups += 1
            self._note("followup_calls")
            return []
        if tries.invalid >= limits.max_invalid_retries:
            raise JudgeInvalidOutput(
                f"invalid judge answer after {tries.invalid + 1} attempts: {short(error, 500)}", tally.usage()
            )
        tries.invalid += 1
        self._note("invalid_retries")
        if tries.invalid >= 2 or content == tries.previous:
            tries.temperature = min(1.0, tries.temperature + limits.temperature_step)
            self._note("temperature_steps")
        tries.previous = content
        return retry_messages(content, short(error, 1500), pending, self.prompting.reason_chars)
