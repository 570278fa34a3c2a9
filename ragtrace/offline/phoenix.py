"""Human labels from Arize Phoenix: annotations people put on ragtrace's scored spans in Phoenix's UI.

Read through Phoenix's REST API (`/v1/projects/{project}/spans/otlpv1`, `/span_annotations`): the scored
retrieval spans (`ragtrace.eval.status` scored or partial), the annotations of the names asked for on them
(HUMAN ones by default: an LLM or code evaluator is another judge, not people), and each annotated span's
whole trace, read back into its sample by the same capture code as `replay` (query, contexts in rank order,
the paired generation's response). The scores ragtrace wrote on the span become the judge `recorded`, so the
judge that scored production is measured without a new judge call.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan

from ragtrace.offline.align import JudgedItem, JudgeOutcome
from ragtrace.offline.labels import LabelledItem, yes_or_no
from ragtrace.offline.replay import parse_json_line, samples_from_spans, spans_of
from ragtrace.scoring import SCORERS, JudgeUsage, RagSample, ScoreResult

SCORED = ("scored", "partial")
RECORDED = "recorded"
_ID_CHUNK = 100  # span or trace ids per request: the ids travel in the query string


class PhoenixError(ValueError):
    """Phoenix could not be read (unreachable, an unknown project, an answer that is not its API's)."""


@dataclass
class PhoenixLabels:
    """The labelled samples read from Phoenix, the scores recorded on their spans, and what was passed over."""

    items: list[LabelledItem]
    recorded: JudgeOutcome
    skipped: Counter[str] = field(default_factory=Counter)


class PhoenixClient:
    """The few REST calls `read_phoenix_labels` makes (stdlib HTTP; an API key as a bearer token if given)."""

    def __init__(self, url: str, *, project: str = "default", api_key: str | None = None, timeout: float = 30.0):
        self.url, self.project, self.api_key, self.timeout = url.rstrip("/"), project, api_key, timeout

    def get(self, path: str, **query: Any) -> Any:
        address = f"{self.url}{path}?{urllib.parse.urlencode(query, doseq=True)}"
        request = urllib.request.Request(address, headers={"Accept": "application/json"})
        if self.api_key:
            request.add_header("Authorization", f"Bearer {self.api_key}")
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                return json.load(response)
        except urllib.error.HTTPError as exc:
            detail = exc.read(500).decode("utf-8", "replace")
            raise PhoenixError(f"{self.url}: {path} answered HTTP {exc.code}: {detail}") from None
        except (urllib.error.URLError, OSError) as exc:
            raise PhoenixError(f"{self.url}: cannot reach Phoenix ({exc})") from None
        except json.JSONDecodeError:
            raise PhoenixError(f"{self.url}: {path} did not answer JSON: is this Phoenix?") from None

    def pages(self, path: str, **query: Any) -> Iterator[dict[str, Any]]:
        """Every row of a paginated answer (`data`, `next_cursor`)."""
        cursor = None
        while True:
            answer = self.get(path, **query, **({"cursor": cursor} if cursor else {}))
            if not isinstance(answer, dict) or not isinstance(answer.get("data"), list):
                raise PhoenixError(f"{self.url}: {path} answered without a 'data' list: is this Phoenix?")
            yield from (row for row in answer["data"] if isinstance(row, dict))
            cursor = answer.get("next_cursor")
            if not cursor:
                return

    def spans(self, **query: Any) -> Iterator[dict[str, Any]]:
        project = urllib.parse.quote(self.project, safe="")
        return self.pages(f"/v1/projects/{project}/spans/otlpv1", limit=1000, **query)

    def span_annotations(self, span_ids: Sequence[str], names: Sequence[str]) -> Iterator[dict[str, Any]]:
        project = urllib.parse.quote(self.project, safe="")
        for start in range(0, len(span_ids), _ID_CHUNK):
            chunk = list(span_ids[start:start + _ID_CHUNK])
            yield from self.pages(f"/v1/projects/{project}/span_annotations", span_ids=chunk,
                                  include_annotation_names=list(names), limit=1000)


def _without_nulls(value: Any) -> Any:
    """Phoenix writes every unset field as null (a root span's `parent_span_id`); OTLP/JSON leaves it out,
    and the reader takes a null id for a broken one (the span would be dropped)."""
    if isinstance(value, dict):
        return {k: _without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_without_nulls(v) for v in value]
    return value


def readable_spans(rows: Sequence[dict[str, Any]]) -> list[ReadableSpan]:
    """Phoenix's OTLP/JSON spans as SDK spans, through the reader `replay` uses for OTLP/JSON files."""
    document = {"resource_spans": [{"scope_spans": [{"spans": [_without_nulls(row) for row in rows]}]}]}
    return list(spans_of(parse_json_line(json.dumps(document))))


def human_label(annotations: Sequence[dict[str, Any]], kinds: frozenset[str]) -> tuple[bool | None, str | None]:
    """People's label from one span's annotations of one name: the majority (a tie, or none, is no label),
    each read from its label (pass / fail, yes / no, ...) or else its score (>= 0.5 is yes)."""
    votes: list[bool] = []
    for annotation in annotations:
        if kinds and annotation.get("annotator_kind") not in kinds:
            continue
        result = annotation.get("result") or {}
        vote = yes_or_no(result.get("label")) if result.get("label") is not None else None
        score = result.get("score")
        if vote is None and isinstance(score, int | float) and 0.0 <= score <= 1.0:
            vote = score >= 0.5
        if vote is None:
            return None, "annotation neither a yes/no label nor a score in [0, 1]"
        votes.append(vote)
    if not votes:
        return None, "no annotation by the annotator kinds asked for"
    yes = sum(votes)
    if 2 * yes == len(votes):
        return None, "annotators split evenly"
    return 2 * yes > len(votes), None


def recorded_result(attributes: Mapping[str, Any], scorer: str) -> ScoreResult | None:
    """The result ragtrace wrote on the span for one scorer (`ragtrace.<scorer>.score` / `.label` / `.reason`)."""
    score = attributes.get(f"ragtrace.{scorer}.score")
    if score is None:
        return None
    label = attributes.get(f"ragtrace.{scorer}.label")
    return ScoreResult(name=scorer, score=float(score), label=label if label in ("pass", "fail") else None,
                       reason=str(attributes.get(f"ragtrace.{scorer}.reason", "")))


def read_phoenix_labels(
    client: PhoenixClient, annotations: Mapping[str, str], *, kinds: frozenset[str] = frozenset({"HUMAN"}),
) -> PhoenixLabels:
    """The annotated scored spans of the project as labelled samples. `annotations`: annotation name ->
    the scorer whose pass/fail it labels. `kinds`: the annotator kinds taken as people (empty: any)."""
    scored: dict[str, dict[str, Any]] = {}
    for status in SCORED:
        for span in client.spans(attribute=f"ragtrace.eval.status:{status}"):
            scored[_hex(span.get("span_id"))] = span
    by_span: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for annotation in client.span_annotations(list(scored), list(annotations)):
        if annotation.get("name") in annotations:
            by_span.setdefault(str(annotation.get("span_id")), {}).setdefault(annotation["name"], []).append(annotation)
    skipped: Counter[str] = Counter()
    labels: dict[str, dict[str, bool]] = {}
    for span_id, named in by_span.items():
        for name, found in named.items():
            label, why = human_label(found, kinds)
            if label is None:
                skipped[f"{name}: {why}"] += 1
            else:
                labels.setdefault(span_id, {})[annotations[name]] = label
    samples, attributes = _samples(client, [scored[s] for s in labels if s in scored])
    items, judged = [], []
    for span_id, span_labels in labels.items():
        if span_id not in samples:
            skipped["annotated span whose trace holds no sample ragtrace can read"] += 1
            continue
        items.append(LabelledItem(key=span_id, sample=samples[span_id], labels=span_labels,
                                  origin={"trace_id": _hex(scored[span_id].get("trace_id")), "span_id": span_id}))
        on_span = attributes.get(span_id, {})
        judged.append(JudgedItem(results={n: r for n in SCORERS if (r := recorded_result(on_span, n)) is not None}))
    return PhoenixLabels(items, _recorded_outcome([attributes.get(i.key, {}) for i in items], judged), skipped)


def _recorded_outcome(attributes: Sequence[Mapping[str, Any]], judged: list[JudgedItem]) -> JudgeOutcome:
    """The scores on the spans as a judge: named by the model and prompt version the spans say scored them."""
    models = sorted({str(a.get("ragtrace.judge.model", "?")) for a in attributes}) or ["?"]
    prompts = sorted({str(a.get("ragtrace.judge.prompt_version", "")) for a in attributes})
    ids = sorted({str(a["ragtrace.judge.id"]) for a in attributes if "ragtrace.judge.id" in a})
    return JudgeOutcome(
        name=RECORDED, model=", ".join(models), prompt_version=", ".join(p for p in prompts if p),
        judge_id=", ".join(ids) or None, items=list(judged), usage=JudgeUsage(),
    )


def _samples(
    client: PhoenixClient, spans: Sequence[dict[str, Any]]
) -> tuple[dict[str, RagSample], dict[str, Mapping[str, Any]]]:
    """The sample of each scored span, read from its whole trace (the response is on another span), and the
    attributes of every span read, by span id."""
    trace_ids = sorted({_hex(span.get("trace_id")) for span in spans})
    rows: list[dict[str, Any]] = []
    for start in range(0, len(trace_ids), _ID_CHUNK):
        rows.extend(client.spans(trace_id=trace_ids[start:start + _ID_CHUNK]))
    readable = readable_spans(rows)
    attributes: dict[str, Mapping[str, Any]] = {
        f"{s.context.span_id:016x}": dict(s.attributes or {}) for s in readable if s.context is not None
    }
    captured = samples_from_spans(readable)
    return {f"{s.span_id:016x}": s.sample for s in captured}, attributes


def _hex(value: Any) -> str:
    """An id as Phoenix writes it in its OTLP answer (hex, or base64 as protobuf's JSON mapping has it)."""
    text = str(value or "")
    if len(text) in (16, 32) and all(c in "0123456789abcdef" for c in text):
        return text
    import base64

    try:
        return base64.b64decode(text, validate=True).hex()
    except ValueError:
        return text


__all__ = ["PhoenixClient", "PhoenixError", "PhoenixLabels", "human_label", "read_phoenix_labels", "recorded_result"]
