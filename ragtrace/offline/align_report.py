"""`ragtrace align --html`: the alignment report as one self-contained page, in the style of the eval report
(same CSS and SVG frame, no JavaScript, no network): judges side by side per label set, a reliability diagram
per label set, confusion matrices, the paired tests, the gates and the worst disagreements."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

from ragtrace._text import format_number, shorten
from ragtrace.offline.align import Agreement, AlignmentReport
from ragtrace.offline.report import CSS, HEIGHT, PAD_B, PAD_L, PAD_R, PAD_T, WIDTH, _e, _frame, _y_ticks

JUDGE_COLORS = ("#2f6fb3", "#c2662d", "#3a8f4f", "#6b5bb5", "#8a5a00")


def _n(value: float | None) -> str:
    return format_number(value)


def _side_by_side(report: AlignmentReport, labels: str) -> str:
    """One row per metric, one column per judge."""
    found = [(j.judge, j.agreements[labels]) for j in report.judges if labels in j.agreements]
    metrics: list[tuple[str, list[str]]] = [
        ("units", [str(a.units) for _, a in found]),
        ("people said yes", [str(a.human_yes) for _, a in found]),
        ("accuracy", [_n(a.accuracy) for _, a in found]),
        ("Cohen's kappa", [_n(a.kappa) for _, a in found]),
        ("F1 / precision / recall (yes)", [
            f"{_n(a.yes.f1)} / {_n(a.yes.precision)} / {_n(a.yes.recall)}" if a.yes else "-" for _, a in found]),
        ("F1 / precision / recall (no)", [
            f"{_n(a.no.f1)} / {_n(a.no.precision)} / {_n(a.no.recall)}" if a.no else "-" for _, a in found]),
        ("AUC", [f"{_n(a.auc)} ({_e(a.auc_of)})" if a.auc is not None else "-" for _, a in found]),
        ("expected calibration error", [_n(a.ece) for _, a in found]),
        ("not judged", [_e(", ".join(f"{k} {v}" for k, v in a.unjudged.items()) or "-") for _, a in found]),
    ]
    head = "".join(f"<th>{_e(name)}</th>" for name, _ in found)
    rows = "".join(f"<tr><th>{_e(metric)}</th>{''.join(f'<td class=num>{v}</td>' for v in values)}</tr>"
                   for metric, values in metrics)
    return f"<table class='summary'><tr><th>{_e(labels)}</th>{head}</tr>{rows}</table>"


def reliability_chart(labels: str, found: list[tuple[str, Agreement]]) -> str:
    """Each judge's calibration bins: mean score (x) against the share people said yes (y); the diagonal is
    a perfectly calibrated judge, the dot's size its bin's count."""
    x0, x1, y0, y1 = PAD_L, WIDTH - PAD_R, HEIGHT - PAD_B, PAD_T

    def x_of(v: float) -> float:
        return x0 + (x1 - x0) * v

    def y_of(v: float) -> float:
        return y0 - (y0 - y1) * v

    body = _y_ticks(1.0, y_of, "{:.2f}")
    body.append(f'<line x1="{x_of(0):.1f}" y1="{y_of(0):.1f}" x2="{x_of(1):.1f}" y2="{y_of(1):.1f}" class="grid"/>')
    for k, (judge, a) in enumerate(found):
        color = JUDGE_COLORS[k % len(JUDGE_COLORS)]
        points = " ".join(f"{x_of(b.mean_score):.1f},{y_of(b.yes_rate):.1f}" for b in a.calibration)
        body.append(f'<polyline class="trend" points="{points}" stroke="{color}"/>')
        total = max(1, a.units)
        for b in a.calibration:
            radius = 2 + 6 * (b.count / total) ** 0.5
            body.append(f'<circle cx="{x_of(b.mean_score):.1f}" cy="{y_of(b.yes_rate):.1f}" r="{radius:.1f}" '
                        f'fill="{color}" fill-opacity="0.6"><title>{_e(judge)} {b.low:g}-{b.high:g}: {b.count} '
                        f'units, mean {b.mean_score:.2f}, {b.yes_rate:.0%} yes</title></circle>')
        body.append(f'<text x="{x0 + 6}" y="{y1 + 12 + 13 * k}" class="lg" fill="{color}">{_e(judge)}</text>')
    for i in range(0, 11, 2):
        body.append(f'<text x="{x_of(i / 10):.1f}" y="{y0 + 13}" class="xt">{i / 10:g}</text>')
    return _frame(f"{labels}: calibration", f"calibration-{labels}", body, "judge's score", "people said yes")


def _confusion(judge: str, a: Agreement) -> str:
    c = a.confusion
    return (f"<table><tr><th>{_e(judge)}</th><th>people yes</th><th>people no</th></tr>"
            f"<tr><th>judge yes</th><td class=num>{c['tp']}</td><td class=num>{c['fp']}</td></tr>"
            f"<tr><th>judge no</th><td class=num>{c['fn']}</td><td class=num>{c['tn']}</td></tr></table>")


def _disagreements(judge: str, labels: str, a: Agreement) -> list[str]:
    parts = []
    for d in a.disagreements:
        where = f"{d.item} · context {d.context}" if d.context is not None else d.item
        said = (f"people <span class='{'ok' if d.human else 'bad'}'>{'yes' if d.human else 'no'}</span>, "
                f"{_e(judge)} <span class='{'ok' if d.judge else 'bad'}'>{'yes' if d.judge else 'no'}</span> "
                f"({d.score:.2f})")
        parts.append(f"<details class='item'><summary>{_e(labels)}: {_e(where)}: {said}</summary>"
                     f"<p><b>query</b> {_e(d.query)}</p><div class='ctx'>{_e(shorten(d.text, 700))}</div></details>")
    return parts


def _tests(report: AlignmentReport) -> str:
    rows = "".join(
        f"<tr><td>{_e(t.labels)}</td><td>{_e(t.a)} vs {_e(t.b)}</td><td class=num>{t.units}</td>"
        f"<td class=num>{_n(t.a_accuracy)} / {_n(t.b_accuracy)}</td><td class=num>{t.only_a} / {t.only_b}</td>"
        f"<td class=num>{t.p_value:.3g}</td><td>{_e(t.better or 'no significant difference')}</td></tr>"
        for t in report.comparisons
    )
    return ("<table><tr><th>labels</th><th>judges</th><th>units</th><th>correct</th><th>only one right</th>"
            f"<th>p</th><th>agrees more often</th></tr>{rows}</table>")


def render_alignment(report: AlignmentReport, title: str | None = None) -> str:
    title = title or f"ragtrace align: {Path(report.source).name}"
    now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    labelled = ", ".join(f"{n} {_e(name)}" for name, n in report.labelled.items())
    judges = "; ".join(f"{_e(j.judge)} ({_e(j.model)}, prompt {_e(j.prompt_version or '-')}, id "
                       f"{_e(j.judge_id or '-')})" for j in report.judges)
    parts = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
             '<meta name="viewport" content="width=device-width, initial-scale=1">',
             "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'; "
             "img-src data:\">", f"<title>{_e(title)}</title><style>{CSS}</style></head><body>",
             f"<h1>{_e(title)}</h1>",
             f"<p class='meta'>{report.items} items · labels: {labelled} · judges: {judges} · generated {now}</p>"]
    parts += [f"<p class='bad'>warning: {_e(w)}</p>" for w in report.warnings]
    if report.gates:
        rows = "".join(f"<tr><td>{_e(g.judge)}</td><td>{_e(g.labels)}</td><td>{_e(g.metric)}</td>"
                       f"<td class=num>{_n(g.value)}</td><td class=num>{g.minimum:g}</td>"
                       f"<td class='{'ok' if g.passed else 'bad'}'>{'ok' if g.passed else 'FAIL'}</td></tr>"
                       for g in report.gates)
        parts.append("<h2>Gates</h2><table><tr><th>judge</th><th>labels</th><th>metric</th><th>value</th>"
                     f"<th>min</th><th></th></tr>{rows}</table>")
    for labels in report.labelled:
        found = [(j.judge, j.agreements[labels]) for j in report.judges if j.agreements[labels].units]
        parts += [f"<h2>{_e(labels)}</h2>", _side_by_side(report, labels)]
        if found:
            parts.append(f"<div class='charts' style='align-items:flex-start'>{reliability_chart(labels, found)}"
                         f"{''.join(_confusion(judge, a) for judge, a in found)}</div>")
            for judge, a in found:
                parts += _disagreements(judge, labels, a)
    if report.comparisons:
        parts += [f"<h2>Paired test (McNemar exact, alpha {report.alpha:g})</h2>",
                  "<p class='meta'>On the units both judges answered: a unit is correct when the judge agrees with "
                  "people; only the units one judge got right and the other wrong count.</p>", _tests(report)]
    parts.append("</body></html>")
    return "\n".join(parts)


def write_alignment_report(path: str | Path, report: AlignmentReport) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render_alignment(report), encoding="utf-8")
    return path


__all__ = ["reliability_chart", "render_alignment", "write_alignment_report"]
