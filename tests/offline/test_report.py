"""The HTML report: self-contained, escaped, and rendered by a real headless Chromium without console errors."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from ragtrace.cli import main
from ragtrace.offline.report import rank_usefulness, render_report
from tests.offline.gold import JUDGE, make_rows, write_jsonl

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
EVIL = '<script>alert("x")</script><img src="http://example.com/x.png">'


def build_report(tmp_path: Path) -> Path:
    """A compare run (so every section appears) over rows whose contexts and queries carry markup."""
    rows = make_rows(24)
    rows[1]["contexts"][0] = EVIL
    rows[2]["query"] = "what about <b>bold</b> & ampersands?"
    baseline_rows = make_rows(24, gold_at=lambda i: 0)
    baseline = tmp_path / "baseline.jsonl"
    assert main(["eval", str(write_jsonl(tmp_path / "base.jsonl", baseline_rows)), "--judge", JUDGE,
                 "--out", str(baseline), "--quiet"]) == 0
    report = tmp_path / "report.html"
    main(["eval", str(write_jsonl(tmp_path / "data.jsonl", rows)), "--judge", JUDGE, "--compare", str(baseline),
          "--html", str(report), "--min", "context_precision=0.9", "--quiet"])
    return report


def test_report_is_self_contained_and_escaped(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    html = build_report(tmp_path).read_text(encoding="utf-8")
    capsys.readouterr()
    assert "<script" not in html and "http://example.com" not in html.replace("&quot;", '"').split("<ol")[0]
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in html
    assert "what about &lt;b&gt;bold&lt;/b&gt; &amp; ampersands?" in html
    assert not re.search(r"""(src|href)=["']https?://""", html)  # nothing is fetched at view time
    charts = re.findall(r'data-chart="([^"]+)"', html)
    assert charts == ["histogram-context_precision", "histogram-context_relevance", "histogram-context_recall",
                      "rank-usefulness"]
    assert "Against the baseline" in html and "FAIL (min 0.9)" in html and "Worst 10 items" in html
    assert re.search(r"id <code>[0-9a-f]{12}</code>", html), "the header names the judge by its id"


def test_rank_usefulness_is_the_share_useful_at_each_rank(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rows = make_rows(12, gold_at=lambda i: 0 if i < 9 else 2)
    out = tmp_path / "out.jsonl"
    main(["eval", str(write_jsonl(tmp_path / "d.jsonl", rows)), "--judge", JUDGE, "--out", str(out), "--quiet"])
    capsys.readouterr()
    from ragtrace.cli.records import item_result
    from ragtrace.offline.report import ReportItem
    from ragtrace.scoring import RagSample

    records = [json.loads(line) for line in out.read_text().splitlines()]
    items = [ReportItem(key=r["id"], id=r["id"], index=r["index"], sample=RagSample(query=r["query"]),
                        results=item_result(r).results) for r in records]
    shares = {rank: share for rank, share, _ in rank_usefulness(items)}
    assert shares == {1: 9 / 12, 2: 0.0, 3: 3 / 12}
    empty = render_report(title="t", items=[], summaries={})
    assert "<svg" not in empty and "<h1>t</h1>" in empty


def chromium(*args: str, user_data: Path) -> subprocess.CompletedProcess[str]:
    assert CHROMIUM is not None
    return subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run", f"--user-data-dir={user_data}",
         "--enable-logging=stderr", "--v=0", *args],
        capture_output=True, text=True, timeout=120,
    )


@pytest.mark.skipif(CHROMIUM is None, reason="chromium not installed (.ci/run installs it)")
def test_report_renders_in_headless_chromium(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    report = build_report(tmp_path)
    capsys.readouterr()
    done = chromium("--dump-dom", report.as_uri(), user_data=tmp_path / "profile")
    assert done.returncode == 0, done.stderr[-2000:]
    console = [line for line in done.stderr.splitlines() if ":CONSOLE" in line or "Uncaught" in line]
    assert console == []  # no script errors, no CSP violations (a fetch would be one)
    dom = done.stdout
    assert len(re.findall(r'<svg class="plot"', dom)) == 4
    assert dom.count("<rect class=\"bar\"") >= 3 * 10 + 3
    assert "Against the baseline" in dom and "<script>" not in dom

    shot = tmp_path / "report.png"
    done = chromium(f"--screenshot={shot}", "--window-size=1200,1600", report.as_uri(),
                    user_data=tmp_path / "profile2")
    assert done.returncode == 0 and shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20_000
