"""From a bad score to its trace in a real trace UI: Arize Phoenix.

A real Phoenix server runs on loopback (its working dir in tmp, telemetry off); an app scored by ragtrace
exports over OTLP/HTTP to it; the failing retrievals are found through Phoenix's REST API by the label,
and through its filter box's API by the filter the demo prints (`PHOENIX_FILTER`); and the span's page,
opened in headless Chromium (driven over the DevTools protocol), shows the score, the label and the reason.

Set RAGTRACE_PHOENIX_SCREENSHOT=path.png to keep the screenshot (docs/phoenix-failing-span.png is one).
"""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import ragtrace
from ragtrace.demo.app import BM25Retriever, DemoApp, load_corpus, load_questions, stale_snapshot
from ragtrace.demo.run import PHOENIX_FILTER
from tests.servers.phoenix import Phoenix
from tests.servers.processes import stop

pytest.importorskip("phoenix", reason="arize-phoenix is in the test extra")
websockets_sync = pytest.importorskip("websockets.sync.client", reason="websockets is in the test extra")

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
LABEL = "ragtrace.context_precision.label"


def run_app(otlp_traces_url: str) -> list[ReadableSpan]:
    """The demo app with ragtrace installed in front of its OTLP exporter, half its requests served by a
    stale index; returns the scored spans as they were exported (an in-memory copy beside the OTLP one)."""
    copy = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "phoenix-e2e"}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=otlp_traces_url)))
    provider.add_span_processor(SimpleSpanProcessor(copy))
    ragtrace.install(provider, judge="local", sample_rate=1.0, drift=False)
    corpus = load_corpus()
    app = DemoApp(provider.get_tracer("phoenix-e2e"), BM25Retriever(corpus))
    questions = load_questions()
    for number, question in enumerate(questions[:12]):
        if number == 6:
            app.retriever = BM25Retriever(stale_snapshot(corpus))
        app.answer(question)
    assert provider.force_flush(timeout_millis=120_000)
    provider.shutdown()
    return list(copy.get_finished_spans())


class DevTools:
    """Just enough of the Chrome DevTools protocol: navigate, evaluate, screenshot."""

    def __init__(self, url: str) -> None:
        self.socket = websockets_sync.connect(url, max_size=64 * 2**20, open_timeout=30)
        self.next_id = 0

    def call(self, method: str, timeout: float = 60, **params: Any) -> Any:
        self.next_id += 1
        self.socket.send(json.dumps({"id": self.next_id, "method": method, "params": params}))
        deadline = time.monotonic() + timeout
        while True:
            message = json.loads(self.socket.recv(timeout=max(0.1, deadline - time.monotonic())))
            if message.get("id") == self.next_id:
                assert "error" not in message, message
                return message.get("result", {})

    def evaluate(self, expression: str) -> Any:
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        return result.get("result", {}).get("value")

    def wait_for(self, expression: str, timeout: float = 60) -> Any:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = self.evaluate(expression)
            if value:
                return value
            time.sleep(0.25)
        raise TimeoutError(f"page never satisfied {expression!r}: {self.evaluate('document.body.innerText')!r}")


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[DevTools]:
    assert CHROMIUM is not None
    process = subprocess.Popen(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run", f"--user-data-dir={tmp_path / 'profile'}",
         "--remote-debugging-port=0", "--window-size=1600,1250", "--hide-scrollbars", "about:blank"],
        stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True,
    )
    try:
        assert process.stderr is not None
        for line in process.stderr:  # "DevTools listening on ws://127.0.0.1:PORT/devtools/browser/ID"
            if found := re.search(r"DevTools listening on (ws://\S+)", line):
                break
        else:
            raise AssertionError("chromium printed no DevTools address")
        port = urllib.parse.urlsplit(found.group(1)).port
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10) as response:
            page = next(t for t in json.load(response) if t["type"] == "page")
        tools = DevTools(page["webSocketDebuggerUrl"])
        yield tools
        tools.socket.close()
    finally:
        stop(process, timeout=20)


@pytest.mark.skipif(CHROMIUM is None, reason="chromium not installed (.ci/run installs it)")
def test_failing_span_found_by_label_in_phoenix_and_its_page_shows_score_and_reason(
    phoenix: Phoenix, browser: DevTools, tmp_path: Path
) -> None:
    exported = run_app(f"{phoenix.url}/v1/traces")
    retrievals = {
        f"{s.context.span_id:016x}": s for s in exported
        if s.context is not None and (s.attributes or {}).get("gen_ai.operation.name") == "retrieval"
    }
    failing = {span_id for span_id, s in retrievals.items() if (s.attributes or {}).get(LABEL) == "fail"}
    assert len(retrievals) == 12 and failing, "the stale index makes some retrievals fail"

    # Phoenix's API, filtered on the label attribute, finds exactly the failing retrievals.
    deadline = time.monotonic() + 60
    while True:
        found = phoenix.get("/v1/projects/default/spans", attribute=f"{LABEL}:fail", limit="100")["data"]
        if {s["context"]["span_id"] for s in found} == failing or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert {s["context"]["span_id"] for s in found} == failing
    # The same spans through the filter box of Phoenix's UI (its GraphQL API), as docs/getting-started.md says.
    project = phoenix.get("/v1/projects")["data"][0]["id"]
    # The filter the demo's closing paragraph prints, as a user types it into the box.
    query = "query($id: ID!, $f: String!) { node(id: $id) { ... on Project { spans(first: 100, filterCondition: $f) " \
            "{ edges { node { spanId } } } } } }"

    def filtered(condition: str) -> set[str]:
        answer = phoenix.post("/graphql", {"query": query, "variables": {"id": project, "f": condition}})
        assert "errors" not in answer, answer  # valid Phoenix filter syntax
        return {e["node"]["spanId"] for e in answer["data"]["node"]["spans"]["edges"]}

    assert filtered(PHOENIX_FILTER) == failing
    # Phoenix pre-fills `parent_id is None` (root spans only): with it the scores, on a child span, match
    # nothing, which is why the README and the demo say to clear it first.
    assert filtered(f"parent_id is None and {PHOENIX_FILTER}") == set()

    span = sorted(found, key=lambda s: s["start_time"])[0]
    mine = retrievals[span["context"]["span_id"]].attributes or {}
    for key in ("score", "label", "reason"):
        assert span["attributes"][f"ragtrace.context_precision.{key}"] == mine[f"ragtrace.context_precision.{key}"]

    # The span's page: Phoenix's own link for a span id, opened on its Attributes tab.
    browser.call("Page.enable")
    browser.call("Page.navigate", url=f"{phoenix.url}/redirects/spans/{span['context']['span_id']}")
    browser.wait_for("[...document.querySelectorAll('[role=tab]')].some(t => t.innerText.trim() === 'Attributes')")
    browser.evaluate(
        "[...document.querySelectorAll('[role=tab]')].find(t => t.innerText.trim() === 'Attributes').click()"
    )
    text = browser.wait_for(
        "document.body.innerText.includes('context_precision') && document.body.innerText", timeout=30
    )
    flat = re.sub(r"\s+", " ", text)
    assert span["context"]["span_id"] in flat  # the page is that span's
    for key in ("label", "score", "reason"):  # each attribute's row: the key, then its value
        value = mine[f"ragtrace.context_precision.{key}"]
        shown = f"{value:g}" if isinstance(value, float) else str(value)
        assert f"ragtrace.context_precision.{key} {shown}" in flat, flat[:4000]

    shot = base64.b64decode(browser.call("Page.captureScreenshot", format="png")["data"])
    assert shot[:8] == b"\x89PNG\r\n\x1a\n" and len(shot) > 20_000
    (tmp_path / "phoenix-span.png").write_bytes(shot)
    if target := os.environ.get("RAGTRACE_PHOENIX_SCREENSHOT"):
        Path(target).write_bytes(shot)
