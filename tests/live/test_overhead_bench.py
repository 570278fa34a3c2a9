"""bench/overhead.py runs end to end and its accounting adds up (its figures are read by people, not asserted)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench" / "overhead.py"


def test_overhead_bench_prints_every_figure_and_counts_every_trace() -> None:
    rounds, traces = 2, 30
    done = subprocess.run(
        [sys.executable, str(BENCH), "--rounds", str(rounds), "--traces", str(traces), "--segments", "2",
         "--wall-rounds", "2", "--wall-traces", "30", "--rate", "0.5"],
        capture_output=True, text=True, timeout=300, check=True,
    )
    report = json.loads(done.stdout)
    for key in ("ratio_rag_10pct", "ratio_non_rag", "on_end_p99_us", "worker_cpu_us_per_sampled_trace",
                "app_cpu_us_per_trace_for_ratio_0_90"):
        assert isinstance(report[key], float | int), key
    assert report["ratio_rag_10pct"] > 0 and report["ratio_non_rag"] > 0
    for reference in ("twin", "forward_only"):  # the estimator's own error; the floor of any wrapper
        assert report[reference]["rag"]["ratio"] > 0 and report[reference]["non_rag"]["ratio"] > 0
    # The measured rounds (not the warm-up, nor the trace held open to time the worker's ticks): every
    # trace got its decision; a sampled one is scored by precision and relevance (recall needs a ground
    # truth, which the bench traces do not carry). The wall-time blocks have variants of their own.
    per_variant = rounds * traces
    # both placements and both workers, against the same baseline; the top level is the production one
    assert set(report["by_config"]) == {
        "install", "processor/thread", "processor/process", "exporter/thread", "exporter/process",
    }
    assert report["config"] == "install"  # the README's first snippet
    assert report["ratio_rag_10pct"] == report["by_config"]["install"]["ratio_rag_10pct"]
    for worker in report["by_config"].values():
        assert isinstance(worker["idle_worker_cpu_us_per_s"], float)
        assert worker["wall_blocks"]["rag"]["ratio"] > 0 and worker["wall_blocks"]["non_rag"]["ratio"] > 0
        rag, plain = worker["rag"]["decisions"], worker["non_rag"]["decisions"]
        assert set(rag) == {"not_sampled", "scored"} and rag["scored"] % 2 == 0
        assert rag["not_sampled"] + rag["scored"] // 2 == per_variant
        assert set(plain) <= {"not_sampled", "not_rag"} and sum(plain.values()) == per_variant


def test_overhead_bench_encodes_every_batch_as_otlp_when_asked() -> None:
    rounds, traces = 2, 30
    done = subprocess.run(
        [sys.executable, str(BENCH), "--rounds", str(rounds), "--traces", str(traces), "--segments", "2",
         "--wall-rounds", "0", "--rate", "0.5", "--placement", "exporter", "--worker", "process",
         "--exporter", "encode"],
        capture_output=True, text=True, timeout=300, check=True,
    )
    report = json.loads(done.stdout)
    assert report["exporter"] == "encode"
    assert set(report["by_config"]) == {"install", "exporter/process"}
    for worker in report["by_config"].values():
        rag = worker["rag"]
        assert rag["decisions"]["not_sampled"] + rag["decisions"]["scored"] // 2 == rounds * traces
    # Every variant's spans were encoded, the baseline's too: at least the measured rounds of the five
    # interleaved variants (without, twin, forward_only and the two configurations), 5 spans a trace, on
    # both workloads.
    assert report["spans_encoded"] >= 5 * 2 * rounds * traces * 5


def test_tick_interval_bench_compares_each_interval_with_the_same_baseline() -> None:
    done = subprocess.run(
        [sys.executable, str(BENCH.with_name("tick_interval.py")), "--ticks", "0.05", "0.2", "--segments", "2",
         "--rounds", "2", "--traces", "20", "--rate", "0.5"],
        capture_output=True, text=True, timeout=300, check=True,
    )
    report = json.loads(done.stdout)
    assert set(report["by_worker"]) == {"thread", "process"}
    for by_tick in report["by_worker"].values():
        assert list(by_tick) == ["0.05", "0.2"]
        for figures in by_tick.values():
            assert figures["ratio"] > 0 and len(figures["ratio_quartiles"]) == 3
            assert isinstance(figures["background_extra_us_per_trace"], float)


def test_admission_memory_bench_times_admit_against_the_sampling_test_alone() -> None:
    done = subprocess.run(
        [sys.executable, str(BENCH.with_name("admission_memory.py")), "--batches", "3", "--kinds", "plain"],
        capture_output=True, text=True, timeout=300, check=True,
    )
    (report,) = json.loads(done.stdout)
    assert report["kind"] == "plain"
    for setting in ("warm", "cold"):
        figures = report[setting]
        assert figures["admit_ns_per_span"] > 0 and figures["decision_ns_per_span"] > 0
        admit, alone = figures["admit_ns_per_span"], figures["decision_ns_per_span"]
        assert abs(figures["ratio"] - admit / alone) < 0.01  # the JSON rounds each figure
        assert abs(figures["beyond_decision_ns_per_span"] - (admit - alone)) < 0.2


def test_flat_out_bench_pairs_each_configuration_with_the_app_alone() -> None:
    done = subprocess.run(
        [sys.executable, str(BENCH.with_name("flat_out.py")), "--configs", "install", "--rounds", "2",
         "--seconds", "0.2", "--kinds", "rag"],
        capture_output=True, text=True, timeout=300, check=True,
    )
    report = json.loads(done.stdout)
    assert report["rag"]["without_traces_per_s"] > 0 and "plain" not in report
    for name in ("twin", "install"):
        figures = report["rag"][name]
        assert figures["ratio"] > 0 and len(figures["ratio_quartiles"]) == 3


def test_redaction_bench_times_this_tree_beside_a_base_and_checks_they_agree() -> None:
    done = subprocess.run(
        [sys.executable, str(BENCH.with_name("redaction_speed.py")), "--base", "HEAD", "--number", "5",
         "--repeat", "1"],
        capture_output=True, text=True, timeout=300, check=True,
    )
    rows = json.loads(done.stdout)["inputs"]
    assert set(rows) == {"rag_sample", "prose_text", "contact_text"}
    for row in rows.values():
        assert row["us"] > 0 and row["base_us"] > 0 and row["same_output"] is True
