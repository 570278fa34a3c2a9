"""Instructions `extract_samples` executes on the ordinary traces of bench/capture_pairing.py, counted by
valgrind's callgrind: a figure that does not move with the machine's load, unlike CPU time, so a change of
a few per cent in capture's cost shows.

Hash randomisation is off in the counted processes (PYTHONHASHSEED=0), so a rerun counts the same. Each
figure is (instructions of a process that captures the traces `repeat` times) minus (the same process
capturing them once: imports, building the traces, warm caches), over `repeat - 1` captures and the traces'
count: instructions per trace. With `--base DIR`, DIR's capture code runs the same traces (this tree's trace
builder, imported into a process whose `ragtrace` is DIR's) and `vs_base` is this tree's count over DIR's.

    python bench/capture_instructions.py --base ../main           # k = 1, 4, 16; evidence and time only
    python bench/capture_instructions.py --base ../main --k 4 --variants evidence
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from callgrind_count import count_instructions

HERE = Path(__file__).resolve().parents[1]
_CHILD = """
import sys
from ragtrace.capture import extract_samples  # the tree's own (cwd), before the bench puts this tree first
sys.path.insert(0, {bench!r})
from capture_pairing import trace_spans, without_inputs
k, traces, repeat, variant = {k}, {traces}, {repeat}, {variant!r}
batch = [trace_spans(k, seed) for seed in range(traces)]
if variant == "time only":
    batch = [without_inputs(spans) for spans in batch]
for _ in range(repeat):
    for spans in batch:
        extract_samples(spans)
"""


def instructions(tree: Path, k: int, traces: int, repeat: int, variant: str) -> int:
    """Instructions of one process capturing the traces `repeat` times with `tree`'s ragtrace."""
    code = _CHILD.format(bench=str(HERE / "bench"), k=k, traces=traces, repeat=repeat, variant=variant)
    return count_instructions(code, tree)


def per_trace(tree: Path, k: int, traces: int, repeat: int, variant: str) -> float:
    warm = instructions(tree, k, traces, 1, variant)
    many = instructions(tree, k, traces, repeat, variant)
    return (many - warm) / ((repeat - 1) * traces)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--k", type=int, nargs="+", default=[1, 4, 16])
    parser.add_argument("--traces", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=21)
    parser.add_argument("--variants", nargs="+", default=["evidence", "time only"])
    parser.add_argument("--base", type=Path, help="another checkout (e.g. main) to count alongside this one")
    args = parser.parse_args()
    rows = []
    for k in args.k:
        for variant in args.variants:
            row: dict[str, object] = {"k": k, "variant": variant}
            mine = per_trace(HERE, k, args.traces, args.repeat, variant)
            row["instructions_per_trace"] = round(mine)
            if args.base is not None:
                theirs = per_trace(args.base.resolve(), k, args.traces, args.repeat, variant)
                row["base"] = round(theirs)
                row["vs_base"] = round(mine / theirs, 4)
            rows.append(row)
    print(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
