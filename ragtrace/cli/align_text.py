"""What `ragtrace align` prints for people and CI logs: per judge a table of its label sets, the confusion
matrices, calibration, the worst disagreements; then the paired tests and the gates."""

from __future__ import annotations

from collections import Counter

from ragtrace._text import format_number, shorten
from ragtrace.cli.summary import _aligned
from ragtrace.offline.align import Agreement, AlignmentReport, JudgeAlignment


def _n(value: float | None) -> str:
    return format_number(value)


def _table(judge: JudgeAlignment) -> list[str]:
    header = ["labels", "units", "people yes", "accuracy", "kappa", "F1 yes", "P yes", "R yes", "F1 no", "AUC",
              "ECE", "unjudged"]
    rows = [header]
    for labels, a in judge.agreements.items():
        yes, no = a.yes, a.no
        rows.append([
            labels, str(a.units), str(a.human_yes), _n(a.accuracy), _n(a.kappa), _n(yes.f1 if yes else None),
            _n(yes.precision if yes else None), _n(yes.recall if yes else None), _n(no.f1 if no else None),
            f"{_n(a.auc)} ({a.auc_of})" if a.auc is not None else "-", _n(a.ece),
            ", ".join(f"{k} {v}" for k, v in sorted(a.unjudged.items())) or "-",
        ])
    return _aligned(rows)


def _details(labels: str, a: Agreement) -> list[str]:
    if not a.units:
        return []
    c = a.confusion
    lines = [f"  {labels} confusion (judge x people): yes/yes {c['tp']}, yes/no {c['fp']}, no/yes {c['fn']}, "
             f"no/no {c['tn']}"]
    bins = "; ".join(f"{b.low:g}-{b.high:g}: {b.count} at {b.mean_score:.2f} -> {b.yes_rate:.0%} yes"
                     for b in a.calibration)
    lines.append(f"  {labels} calibration ({a.auc_of}): {bins}")
    for d in a.disagreements:
        where = f"{d.item} context {d.context}" if d.context is not None else d.item
        said = f"people {'yes' if d.human else 'no'}, judge {'yes' if d.judge else 'no'} ({d.score:.2f})"
        lines.append(f"    {where}: {said}: {shorten(d.text, 90, at_word=True)}")
    return lines


def format_alignment(report: AlignmentReport, skipped: Counter[str] | None = None) -> str:
    """The whole report as text."""
    labelled = ", ".join(f"{n} {name}" for name, n in report.labelled.items())
    lines = [f"{report.source}: {report.items} items; labels: {labelled}"]
    lines += [f"warning: {w}" for w in report.warnings]
    for reason, count in sorted((skipped or {}).items()):
        lines.append(f"passed over: {count} x {reason}")
    for judge in report.judges:
        usage = judge.usage
        cost = "" if usage.cost_usd is None else f", cost ${usage.cost_usd:.4f}"
        lines += ["", f"judge {judge.judge}: model {judge.model or '?'}, prompt {judge.prompt_version or '-'}, "
                  f"id {judge.judge_id or '-'}; {usage.calls} calls, {usage.input_tokens} input + "
                  f"{usage.output_tokens} output tokens{cost}"]
        lines += _table(judge)
        for labels, agreement in judge.agreements.items():
            lines += _details(labels, agreement)
    if report.comparisons:
        lines += ["", f"paired test (McNemar exact, correct = agrees with people, alpha {report.alpha:g}):"]
        for t in report.comparisons:
            verdict = f"{t.better} agrees significantly more often" if t.better else "no significant difference"
            lines.append(
                f"  {t.labels}: {t.a} {_n(t.a_accuracy)} vs {t.b} {_n(t.b_accuracy)} correct on {t.units} units; "
                f"only {t.a} right {t.only_a}, only {t.b} right {t.only_b}; p={t.p_value:.3g}: {verdict}"
            )
    for gate in report.gates:
        state = "ok" if gate.passed else "FAIL"
        lines.append(f"{state} {gate.judge} {gate.labels} {gate.metric} {_n(gate.value)} (min {gate.minimum:g})")
    return "\n".join(lines)


__all__ = ["format_alignment"]
