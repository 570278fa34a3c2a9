"""The README's main job: the demo app under live scoring with the local judge, exported over real OTLP;
its retriever degrades part-way and the drift detector says so, naming failing traces that really failed."""

from __future__ import annotations

import io
import re
from typing import Any, Literal

import pytest

from ragtrace.demo.run import run_demo
from ragtrace.judges import Judgement, JudgeRequest, JudgeTimeout, LLMJudge
from tests.servers.judge import Status
from tests.servers.otlp import OtlpReceiver

ROW = re.compile(r"^\s*(\d+)  ([0-9a-f]{8})  .*?  (\d\.\d\d (?:pass|FAIL)|-)\s")


@pytest.mark.parametrize("worker", ["thread", "process"])
def test_demo_scores_live_traces_and_exports_them(
    otlp_receiver: OtlpReceiver, monkeypatch: pytest.MonkeyPatch, worker: Literal["thread", "process"]
) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", otlp_receiver.grpc_endpoint)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
    out = io.StringIO()
    assert run_demo(requests=3, out=out, worker=worker) == 0
    text = out.getvalue()
    rows = [m for line in text.splitlines() if (m := ROW.match(line))]
    assert [int(m.group(1)) for m in rows] == [1, 2, 3], text
    assert "pass = score >= 0.50, FAIL below" in text  # the legend states the threshold
    assert f"exported over OTLP to {otlp_receiver.grpc_endpoint}" in text
    spans = otlp_receiver.wait_for_spans(9)  # root, retrieval and generation per request
    retrievals = [s for s in spans if s.attributes.get("gen_ai.operation.name") == "retrieval"]
    assert len(retrievals) == 3
    assert {f"{s.trace_id:032x}"[:8] for s in retrievals} == {m.group(2) for m in rows}
    for span in retrievals:
        assert span.attributes["ragtrace.eval.status"] == "scored"
        assert 0.0 <= span.attributes["ragtrace.context_precision.score"] <= 1.0
        assert span.attributes["ragtrace.context_relevance.label"] in ("pass", "fail")
        events = span.event("gen_ai.evaluation.result")
        assert {"context_precision", "context_relevance"} <= {e["gen_ai.evaluation.name"] for e in events}


def test_demo_detects_the_degradation_and_names_failing_traces(
    otlp_receiver: OtlpReceiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", otlp_receiver.grpc_endpoint)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
    out = io.StringIO()
    assert run_demo(requests=40, out=out) == 0
    text = out.getvalue()
    before, marker, after = text.partition("---- request 17: the index is now a stale snapshot")
    assert marker, text
    assert ">> DRIFT" not in before  # no false alarm while the index is whole
    alerts = re.findall(r">> DRIFT (\w+) on retriever 'solar-bm25': .*?\n\s+failing traces to open: ([0-9a-f, ]+)",
                        after)
    assert "context_precision" in {scorer for scorer, _ in alerts}, after
    spans = otlp_receiver.wait_for_spans(
        lambda got: sum(s.attributes.get("gen_ai.operation.name") == "retrieval" for s in got) == 40, timeout=30
    )
    retrieval = {s.trace_id: s for s in spans if s.attributes.get("gen_ai.operation.name") == "retrieval"}
    for scorer, ids in alerts:
        for trace_id in ids.split(", "):
            span = retrieval[int(trace_id, 16)]  # a trace that was exported, and
            assert span.attributes[f"ragtrace.{scorer}.label"] == "fail"  # it failed on the drifting scorer
    drift_spans = [s for s in spans if s.name == "ragtrace.drift"]
    assert any(s.attributes["gen_ai.evaluation.name"] == "context_precision" for s in drift_spans)
    closing = text.rsplit("\n\n", 1)[1]
    assert closing.startswith("What you saw: 40 requests") and "The drift detector flagged" in closing
    assert "ragtrace.context_precision.label == 'fail'" in closing and "parent_id is None" in closing
    assert "in your trace UI to see why" in closing  # exported: there is a trace UI to open them in
    # A question without a reference answer is judged against the answer given, and its reason says so.
    from ragtrace.demo.app import load_questions

    no_reference = [q.query[:37] for q in load_questions() if q.ground_truth is None]
    rows_without = [line for line in text.splitlines() if ROW.match(line) and any(q in line for q in no_reference)]
    assert rows_without and not any("reference answer" in line for line in rows_without), rows_without


def test_demo_without_an_endpoint_says_the_scores_stayed_on_the_console(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 30, items 7 and 11: the closing hint is valid Phoenix filter syntax, and says where scores went."""
    from ragtrace.demo.run import PHOENIX_FILTER

    monkeypatch.delenv("OTEL_EXPORTER_OTLP_ENDPOINT", raising=False)
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", raising=False)
    out = io.StringIO()
    assert run_demo(requests=3, out=out) == 0
    closing = out.getvalue().rsplit("\n\n", 1)[1]
    assert "The scores went to this console only" in closing and PHOENIX_FILTER in closing
    assert "= fail" not in closing.replace("== 'fail'", "")


def test_demo_without_an_endpoint_sends_people_to_the_rows_not_to_a_trace_ui(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 30, item 11: with the scores on the console only, the drift hint names the rows above, and no
    trace UI (there is none to open the traces in)."""
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_ENDPOINT", raising=False)
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", raising=False)
    out = io.StringIO()
    assert run_demo(requests=40, out=out) == 0
    closing = out.getvalue().rsplit("\n\n", 1)[1]
    assert "The drift detector flagged" in closing, closing
    named = re.search(r"the rows of trace ([0-9a-f, ]+) above say why", closing)
    assert named and "in your trace UI to see why" not in closing, closing
    rows = {m.group(2) for line in out.getvalue().splitlines() if (m := ROW.match(line))}
    assert {t[:8] for t in named.group(1).split(", ")} <= rows  # the traces named are rows of the table


class SilentJudge:
    """A judge that never answers in time."""

    model = "test/silent"
    prompt_version = "silent-1"
    fused = True

    async def judge(self, request: JudgeRequest) -> Judgement:
        raise JudgeTimeout("no answer within 1 s")


def test_demo_with_a_judge_that_always_fails_says_so_and_exits_1(capsys: pytest.CaptureFixture[str]) -> None:
    out = io.StringIO()
    assert run_demo(requests=3, judge=SilentJudge(), out=out) == 1
    text = out.getvalue()
    assert text.count("not scored: judge_timeout") == 3, text
    assert "3 requests" in text and "0 scored. 3 evaluation(s) ended in a judge error (judge_timeout)" in text
    assert "no trace was scored (judge_timeout)" in capsys.readouterr().err


def test_demo_with_a_refused_key_says_judge_auth_once_in_plain_words(
    judge_server: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """The real litellm client against a server that answers 401: every row says judge_auth, the run exits
    1, and the judge's own words (with what to do, and without the key) are printed once."""
    judge_server.default = Status(401, "Incorrect API key provided: sk-demo-wrong-key")
    judge = LLMJudge("openai/judge-test", api_base=judge_server.url + "/v1", api_key="sk-demo-wrong-key")
    out = io.StringIO()
    assert run_demo(requests=3, judge=judge, out=out) == 1
    assert out.getvalue().count("not scored: judge_auth") == 3
    err = capsys.readouterr().err
    assert err.count("judge_auth: ") == 1 and "API key" in err and "OPENAI_API_KEY" in err
    assert "sk-demo-wrong-key" not in out.getvalue() + err
    assert len(judge_server.requests) == 3  # one call per request: never retried
