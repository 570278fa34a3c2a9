"""A self-contained HTML report: inline CSS, inline SVG charts drawn here, no JavaScript, no network.

One file a CI job can attach as an artifact and anyone can open offline: the summary, score distributions,
how usefulness falls with rank, score over time for a replay, the regression against a baseline, and the
worst items with their contexts, verdicts and reasons.
"""

from __future__ import annotations

import datetime as dt
import html
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ragtrace._text import format_number
from ragtrace.offline.compare import Comparison
from ragtrace.offline.evaluate import ScorerSummary
from ragtrace.scoring import JudgeUsage, RagSample, ScoreResult

COLORS = {"context_precision": "#2f6fb3", "context_relevance": "#c2662d", "context_recall": "#3a8f4f"}
WIDTH, HEIGHT, PAD_L, PAD_B, PAD_T, PAD_R = 372, 210, 44, 34, 26, 12
CONTEXT_CHARS = 700


@dataclass(frozen=True)
class ReportItem:
    key: str
    id: str | None
    index: int
    sample: RagSample
    results: Mapping[str, ScoreResult]
    time_ns: int | None = None


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _color(name: str) -> str:
    return COLORS.get(name, "#6b5bb5")


def _frame(title: str, chart_id: str, body: list[str], x_label: str, y_label: str) -> str:
    """An SVG with axes box, title and axis labels around `body`."""
    x0, y0, x1, y1 = PAD_L, HEIGHT - PAD_B, WIDTH - PAD_R, PAD_T
    parts = [
        f'<svg class="plot" data-chart="{_e(chart_id)}" xmlns="http://www.w3.org/2000/svg" '
        f'viewBox="0 0 {WIDTH} {HEIGHT}" width="{WIDTH}" height="{HEIGHT}" role="img" aria-label="{_e(title)}">',
        f"<title>{_e(title)}</title>",
        f'<text x="{WIDTH / 2}" y="16" class="t">{_e(title)}</text>',
        f'<line x1="{x0}" y1="{y0}" x2="{x1}" y2="{y0}" class="axis"/>',
        f'<line x1="{x0}" y1="{y0}" x2="{x0}" y2="{y1}" class="axis"/>',
        f'<text x="{(x0 + x1) / 2}" y="{HEIGHT - 4}" class="l">{_e(x_label)}</text>',
        f'<text x="12" y="{(y0 + y1) / 2}" class="l" transform="rotate(-90 12 {(y0 + y1) / 2})">{_e(y_label)}</text>',
        *body,
        "</svg>",
    ]
    return "\n".join(parts)


def _y_ticks(top: float, y_of: Any, fmt: str = "{:g}") -> list[str]:
    ticks = []
    for i in range(5):
        value = top * i / 4
        y = y_of(value)
        ticks.append(f'<line x1="{PAD_L - 3}" y1="{y:.1f}" x2="{WIDTH - PAD_R}" y2="{y:.1f}" class="grid"/>')
        ticks.append(f'<text x="{PAD_L - 5}" y="{y + 3:.1f}" class="yt">{_e(fmt.format(value))}</text>')
    return ticks


def histogram(name: str, scores: Sequence[float], scale: float, bins: int = 10) -> str:
    """Counts of scores in `bins` equal bins over [0, scale] (the top bin includes scale)."""
    counts = [0] * bins
    for score in scores:
        counts[min(bins - 1, max(0, int(score / scale * bins)))] += 1
    top = 4 * math.ceil(max(max(counts, default=0), 1) / 4)  # whole-number ticks at quarters
    x0, x1, y0, y1 = PAD_L, WIDTH - PAD_R, HEIGHT - PAD_B, PAD_T
    bar_w = (x1 - x0) / bins

    def y_of(v: float) -> float:
        return y0 - (y0 - y1) * v / top

    body = _y_ticks(top, y_of, "{:.0f}")
    for i, count in enumerate(counts):
        x = x0 + i * bar_w
        lo, hi = scale * i / bins, scale * (i + 1) / bins
        body.append(
            f'<rect class="bar" x="{x + 1:.1f}" y="{y_of(count):.1f}" width="{bar_w - 2:.1f}" '
            f'height="{y0 - y_of(count):.1f}" fill="{_color(name)}"><title>{lo:.2f}-{hi:.2f}: {count}</title></rect>'
        )
    for i in range(0, bins + 1, max(1, bins // 5)):
        x = x0 + i * bar_w
        body.append(f'<text x="{x:.1f}" y="{y0 + 13}" class="xt">{scale * i / bins:g}</text>')
    return _frame(f"{name}: {len(scores)} scores", f"histogram-{name}", body, "score", "items")


def rank_usefulness(items: Sequence[ReportItem], max_rank: int = 20) -> list[tuple[int, float, int]]:
    """(rank, share of items whose context at that rank was judged useful, items with that rank)."""
    useful: dict[int, list[bool]] = {}
    for item in items:
        result = item.results.get("context_precision")
        if result is None or result.score is None:
            continue
        for verdict in result.details.get("verdicts", []):
            rank = int(verdict.get("index", 0)) + 1
            if rank <= max_rank:
                useful.setdefault(rank, []).append(bool(verdict.get("useful")))
    return [(rank, sum(v) / len(v), len(v)) for rank, v in sorted(useful.items())]


def rank_chart(points: Sequence[tuple[int, float, int]]) -> str:
    x0, x1, y0, y1 = PAD_L, WIDTH - PAD_R, HEIGHT - PAD_B, PAD_T
    bar_w = (x1 - x0) / max(len(points), 1)

    def y_of(v: float) -> float:
        return y0 - (y0 - y1) * v

    body = _y_ticks(1.0, y_of, "{:.0%}")
    for i, (rank, share, n) in enumerate(points):
        x = x0 + i * bar_w
        body.append(
            f'<rect class="bar" x="{x + 1:.1f}" y="{y_of(share):.1f}" width="{bar_w - 2:.1f}" '
            f'height="{y0 - y_of(share):.1f}" fill="{_color("context_precision")}">'
            f"<title>rank {rank}: {share:.0%} useful of {n}</title></rect>"
        )
        body.append(f'<text x="{x + bar_w / 2:.1f}" y="{y0 + 13}" class="xt">{rank}</text>')
    return _frame("share of useful contexts by rank", "rank-usefulness", body, "rank", "useful")


def timeline(series: Mapping[str, Sequence[tuple[int, float]]], scale: float) -> str:
    """Score over time (a replay): one dot per item, and a rolling mean line per scorer."""
    times = [t for points in series.values() for t, _ in points]
    t_min, t_max = min(times), max(times)
    span = max(t_max - t_min, 1)
    x0, x1, y0, y1 = PAD_L, WIDTH - PAD_R, HEIGHT - PAD_B, PAD_T

    def x_of(t: int) -> float:
        return x0 + (x1 - x0) * (t - t_min) / span

    def y_of(v: float) -> float:
        return y0 - (y0 - y1) * v / scale

    body = _y_ticks(scale, y_of)
    for name, points in series.items():
        ordered = sorted(points)
        color = _color(name)
        for t, v in ordered:
            body.append(f'<circle cx="{x_of(t):.1f}" cy="{y_of(v):.1f}" r="2.2" fill="{color}" opacity="0.45"/>')
        window = max(1, len(ordered) // 10)
        line = []
        for i in range(len(ordered)):
            chunk = ordered[max(0, i - window + 1) : i + 1]
            line.append(f"{x_of(ordered[i][0]):.1f},{y_of(sum(v for _, v in chunk) / len(chunk)):.1f}")
        body.append(f'<polyline class="trend" points="{" ".join(line)}" stroke="{color}"><title>{_e(name)}</title>'
                    "</polyline>")
    for label, t in (("start", t_min), ("end", t_max)):
        when = dt.datetime.fromtimestamp(t / 1e9, dt.UTC).strftime("%Y-%m-%d %H:%M:%S")
        anchor = "start" if label == "start" else "end"
        body.append(f'<text x="{x_of(t):.1f}" y="{y0 + 13}" class="xt" text-anchor="{anchor}">{when}</text>')
    legend_x = PAD_L + 6
    for i, name in enumerate(series):
        body.append(f'<text x="{legend_x + i * 130}" y="{PAD_T + 10}" class="lg" fill="{_color(name)}">'
                    f"{_e(name)}</text>")
    return _frame("score over time", "timeline", body, "retrieval start (UTC)", "score")


def _fmt(value: float | None, pct: bool = False) -> str:
    return format_number(value, pct=pct, missing="–")  # a dash that reads as "none" in a table cell


def _summary_table(
    summaries: Mapping[str, ScorerSummary], thresholds: Sequence[tuple[str, float, bool]]
) -> str:
    gates = {name: (minimum, passed) for name, minimum, passed in thresholds}
    rows = []
    for name, s in summaries.items():
        gate = gates.get(name)
        gate_cell = "–" if gate is None else (
            f'<span class="{"ok" if gate[1] else "bad"}">{"pass" if gate[1] else "FAIL"} (min {gate[0]:g})</span>'
        )
        skipped = ", ".join(f"{k} {v}" for k, v in s.skipped.items()) or "0"
        errors = ", ".join(f"{k} {v}" for k, v in s.errors.items()) or "0"
        rows.append(
            f"<tr><th>{_e(name)}</th><td>{_fmt(s.mean)}</td><td>{_fmt(s.p10)}</td><td>{_fmt(s.p50)}</td>"
            f"<td>{_fmt(s.p90)}</td><td>{_fmt(s.pass_rate, True)}</td><td>{s.scored}/{s.count}</td>"
            f"<td>{_e(skipped)}</td><td>{_e(errors)}</td><td>{gate_cell}</td></tr>"
        )
    return (
        '<table class="summary"><thead><tr><th>scorer</th><th>mean</th><th>p10</th><th>p50</th><th>p90</th>'
        "<th>pass rate</th><th>scored</th><th>skipped</th><th>errors</th><th>threshold on mean</th></tr></thead>"
        f"<tbody>{''.join(rows)}</tbody></table>"
    )


def _comparison(comparison: Comparison) -> str:
    parts = [
        f"<p>Baseline <code>{_e(comparison.baseline)}</code>: {comparison.matched} items in both runs "
        f"({comparison.only_baseline} only in the baseline, {comparison.only_current} only in this run). "
        f"Paired two-sided Wilcoxon signed-rank test, α = {comparison.alpha:g}.</p>",
        '<table class="summary"><thead><tr><th>scorer</th><th>baseline</th><th>now</th><th>Δ mean</th>'
        "<th>paired n</th><th>worse / better</th><th>p</th><th>verdict</th></tr></thead><tbody>",
    ]
    for name, c in comparison.scorers.items():
        style = "bad" if c.regressed else "ok" if c.significant else None
        verdict = f'<span class="{style}">{c.verdict}</span>' if style else _e(c.verdict)
        delta = "–" if c.delta is None else f"{c.delta:+.3f}"
        parts.append(
            f"<tr><th>{_e(name)}</th><td>{_fmt(c.baseline_mean)}</td><td>{_fmt(c.current_mean)}</td>"
            f"<td>{delta}</td><td>{c.paired}</td><td>{c.worsened} / {c.improved}</td>"
            f"<td>{c.test.p_value:.3g} ({c.test.method})</td><td>{verdict}</td></tr>"
        )
    parts.append("</tbody></table>")
    for name, c in comparison.scorers.items():
        if not c.worst:
            continue
        parts.append(f"<h3>{_e(name)}: items that dropped most</h3><table class='items'><thead><tr><th>item</th>"
                     "<th>query</th><th>old → new</th><th>new reason</th></tr></thead><tbody>")
        for change in c.worst:
            parts.append(
                f"<tr><td><code>{_e(change.id if change.id is not None else change.key)}</code></td>"
                f"<td>{_e(change.query)}</td><td class='num'>{change.old:.2f} → <b>{change.new:.2f}</b></td>"
                f"<td>{_e(change.reason)}</td></tr>"
            )
        parts.append("</tbody></table>")
    return "\n".join(parts)


def _precision_badge(verdict: Mapping[str, Any]) -> tuple[str, str]:
    return ("useful", "ok") if verdict.get("useful") else ("not useful", "bad")


def _relevance_badge(verdict: Mapping[str, Any]) -> tuple[str, str]:
    text = f"{verdict.get('level')}{', used' if verdict.get('used') else ''}"
    return text, "ok" if verdict.get("level") in ("high", "medium") else "mid"


def _verdict_badges(index: int, results: Mapping[str, ScoreResult]) -> str:
    badges: list[str] = []
    reasons: set[str] = set()
    for name, render in (("context_precision", _precision_badge), ("context_relevance", _relevance_badge)):
        result = results.get(name)
        if result is None:
            continue
        for verdict in result.details.get("verdicts", []):
            if verdict.get("index") == index:
                text, css = render(verdict)
                why = verdict.get("reason") or ""
                badges.append(f'<span class="badge {css}" title="{_e(why)}">{_e(text)}</span>')
                if why and why not in reasons:  # the local judge gives both aspects one reason
                    reasons.add(why)
                    badges.append(f'<span class="why">{_e(why)}</span>')
    return " ".join(badges)


def _item_card(item: ReportItem, scorers: Sequence[str], *, open_: bool = False) -> str:
    scores = []
    for name in scorers:
        result = item.results.get(name)
        if result is None:
            continue
        value = result.score if result.score is not None else (result.skipped or result.error or "–")
        css = "bad" if result.label == "fail" else "ok" if result.label == "pass" else "mid"
        shown = f"{value:.2f}" if isinstance(value, float) else value
        scores.append(f'<li><span class="badge {css}">{_e(name)} {_e(shown)}</span> {_e(result.reason)}</li>')
    contexts = []
    for i, doc in enumerate(item.sample.contexts):
        text = doc.content if len(doc.content) <= CONTEXT_CHARS else doc.content[:CONTEXT_CHARS] + " …"
        contexts.append(f"<li><div class='ctx-head'>rank {i + 1} {_verdict_badges(i, item.results)}</div>"
                        f"<div class='ctx'>{_e(text)}</div></li>")
    truth = (f"<p><b>Ground truth:</b> {_e(item.sample.ground_truth)}</p>"
             if item.sample.ground_truth else "")
    label = item.id if item.id is not None else f"#{item.index}"
    shown = " ".join(
        f"{r.score:.2f}" for s in scorers if (r := item.results.get(s)) is not None and r.score is not None
    )
    return (
        f"<details class='item'{' open' if open_ else ''}><summary><code>{_e(label)}</code> "
        f"<span class='meta'>[{_e(shown)}]</span> {_e(item.sample.query)}</summary>"
        f"<ul class='scores'>{''.join(scores)}</ul>"
        f"<p><b>Response:</b> {_e(item.sample.response or '(empty)')}</p>{truth}"
        f"<ol class='contexts'>{''.join(contexts)}</ol></details>"
    )


def worst_items(items: Sequence[ReportItem], scorers: Sequence[str], n: int) -> list[ReportItem]:
    """Lowest mean score over the scorers that scored the item; unscored items are left out."""

    def key(item: ReportItem) -> tuple[float, int]:
        scores = [r.score for s in scorers if (r := item.results.get(s)) is not None and r.score is not None]
        return (sum(scores) / len(scores) if scores else math.inf, item.index)

    ranked = sorted(items, key=key)
    return [i for i in ranked if key(i)[0] != math.inf][:n]


CSS = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px auto;max-width:1180px;
color:#1d2430;padding:0 16px}
h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:28px 0 8px;border-bottom:1px solid #dde3ea;
padding-bottom:4px}h3{font-size:14px;margin:16px 0 6px}
.meta{color:#5b6676}.charts{display:flex;flex-wrap:wrap;gap:14px}
svg.plot{background:#fbfcfd;border:1px solid #e3e8ee;border-radius:6px}
svg .t{font-size:13px;font-weight:600;text-anchor:middle;fill:#1d2430}
svg .l{font-size:11px;text-anchor:middle;fill:#5b6676}svg .xt{font-size:10px;text-anchor:middle;fill:#5b6676}
svg .yt{font-size:10px;text-anchor:end;fill:#5b6676}svg .lg{font-size:11px;font-weight:600}
svg .axis{stroke:#8a94a3;stroke-width:1}svg .grid{stroke:#e6eaef;stroke-width:1}
svg .trend{fill:none;stroke-width:2}
table{border-collapse:collapse;margin:6px 0}th,td{padding:4px 10px;border-bottom:1px solid #e6eaef;
text-align:left;vertical-align:top}td.num,table.summary td{text-align:right;font-variant-numeric:tabular-nums}
.ok{color:#1e7b3a}.bad{color:#b42318;font-weight:600}.mid{color:#8a5a00}
.badge{display:inline-block;border:1px solid currentColor;border-radius:10px;padding:0 7px;font-size:12px;
margin-right:4px}.why{color:#5b6676;font-size:12px;margin-right:8px}
details.item{border:1px solid #e3e8ee;border-radius:6px;padding:6px 10px;margin:8px 0;background:#fff}
details.item summary{cursor:pointer;font-weight:600}ul.scores{padding-left:18px}
ol.contexts li{margin:6px 0}.ctx{white-space:pre-wrap;color:#333;font-size:13px;background:#f6f8fa;
padding:6px 8px;border-radius:4px}.ctx-head{font-size:12px;color:#5b6676;margin-bottom:2px}
"""


def render_report(
    *,
    title: str,
    items: Sequence[ReportItem],
    summaries: Mapping[str, ScorerSummary],
    usage: JudgeUsage | None = None,
    thresholds: Sequence[tuple[str, float, bool]] = (),
    comparison: Comparison | None = None,
    over_time: bool = False,
    scale: float | None = None,
    worst: int = 10,
) -> str:
    """The report as one HTML string."""
    scorers = list(summaries)
    scores = {s: [r.score for i in items if (r := i.results.get(s)) is not None and r.score is not None]
              for s in scorers}
    top = scale or max([1.0, *(v for values in scores.values() for v in values)])
    usage = usage or JudgeUsage()
    cost = "n/a" if usage.cost_usd is None else f"${usage.cost_usd:.4f}"
    now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'; "
        "img-src data:\">",
        f"<title>{_e(title)}</title><style>{CSS}</style></head><body>",
        f"<h1>{_e(title)}</h1>",
        f"<p class='meta'>{len(items)} items · judge {_e(usage.model or '?')} "
        f"(prompt {_e(usage.prompt_version or '?')}, id <code>{_e(usage.judge_id or '?')}</code>) · "
        f"{usage.calls} calls · "
        f"{usage.input_tokens} input + {usage.output_tokens} output tokens · cost {cost} · generated {now}</p>",
        "<h2>Summary</h2>",
        _summary_table(summaries, thresholds),
    ]
    if comparison is not None:
        parts += ["<h2>Against the baseline</h2>", _comparison(comparison)]
    parts.append("<h2>Score distributions</h2><div class='charts'>")
    parts += [histogram(s, scores[s], top) for s in scorers if scores[s]]
    parts.append("</div>")
    ranks = rank_usefulness(items)
    if ranks:
        parts += ["<h2>Usefulness by rank</h2>",
                  "<p class='meta'>Share of contexts at each rank that the judge found useful for the answer "
                  "(context_precision verdicts). A good ranker puts the tall bars on the left.</p>",
                  f"<div class='charts'>{rank_chart(ranks)}</div>"]
    if over_time:
        series = {s: [(i.time_ns, r.score) for i in items
                      if i.time_ns and (r := i.results.get(s)) is not None and r.score is not None]
                  for s in scorers}
        series = {s: p for s, p in series.items() if p}
        if series:
            parts += ["<h2>Score over time</h2>", f"<div class='charts'>{timeline(series, top)}</div>"]
    chosen = worst_items(items, scorers, worst)
    if chosen:
        parts.append(f"<h2>Worst {len(chosen)} items</h2><p class='meta'>Lowest mean score; open an item for its "
                     "contexts in rank order, the judge's verdict on each and the reasons.</p>")
        parts += [_item_card(item, scorers, open_=i == 0) for i, item in enumerate(chosen)]
    parts.append("</body></html>")
    return "\n".join(parts)


def write_report(path: str | Path, **kwargs: Any) -> Path:
    """Render and write the report; returns the path written."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render_report(**kwargs), encoding="utf-8")
    return path
