"""The built-in redaction's time per text and per sample, this tree against `--base REV` in one process.

The scoring process redacts every text of a sample before the judge sees it (query, each context, the
response). Three inputs: the bench's RAG sample (bench/overhead.py's texts: five passages, a query and an
answer, each holding a digit), prose without digits, and a passage with an e-mail and a phone number in it.
Each figure is the best of `--repeat` timings of `--number` calls, the trees alternated, and `vs_base` is
this tree's time over the base's.

    python bench/redaction_speed.py --base HEAD~1
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import tempfile
import timeit
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

PASSAGE = "passage {i} of request 17: " + "lorem ipsum dolor sit amet " * 8
PROSE = "The lorem ipsum passage is placeholder text used in publishing and graphic design. " * 3
CONTACT = "For billing questions write to jane.doe@example.com or call +44 20 7946 0958 on weekdays. " * 2


def inputs(package: str) -> dict[str, tuple[str, Any]]:
    """(what is timed, its argument) per input, in `package`'s types."""
    sample = importlib.import_module(package + ".scoring.sample")
    rag = sample.RagSample(
        query="what is lorem ipsum, question 17?",
        contexts=tuple(sample.Document(content=PASSAGE.format(i=i)) for i in range(5)),
        response="answer 17 " * 20,
    )
    return {"rag_sample": ("redact_sample", rag), "prose_text": ("redact_text", PROSE),
            "contact_text": ("redact_text", CONTACT)}


def best_us(redactor: Any, method: str, argument: Any, number: int, repeat: int) -> float:
    call = getattr(redactor, method)
    return min(timeit.repeat(lambda: call(argument), number=number, repeat=repeat)) / number * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", help="a git revision to time beside this tree")
    parser.add_argument("--number", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    packages = ["ragtrace"]
    if args.base:
        from worker_ab import export_base

        packages.append(export_base(args.base, Path(tempfile.mkdtemp(prefix="ragtrace-base-"))))
    redactors = {p: importlib.import_module(p + ".live.redaction").Redactor() for p in packages}
    timed = {p: inputs(p) for p in packages}
    rows: dict[str, dict[str, Any]] = {}
    for name in timed["ragtrace"]:
        row: dict[str, float] = {}
        for _ in range(2):  # the trees alternated, each keeping its best
            for package in packages:
                method, argument = timed[package][name]
                key = "us" if package == "ragtrace" else "base_us"
                row[key] = round(min(row.get(key, float("inf")),
                                     best_us(redactors[package], method, argument, args.number, args.repeat)), 2)
        if "base_us" in row:
            row["vs_base"] = round(row["us"] / row["base_us"], 3)
        rows[name] = row
    # the outputs agree: a faster redactor that redacts differently is not the same redactor
    for package in packages[1:]:
        for name, (method, argument) in timed["ragtrace"].items():
            mine = getattr(redactors["ragtrace"], method)(argument)
            theirs = getattr(redactors[package], method)(timed[package][name][1])
            same = mine == theirs if method == "redact_text" else mine.model_dump() == theirs.model_dump()
            rows[name]["same_output"] = same
    print(json.dumps({"inputs": rows, "base": args.base}, indent=1))


if __name__ == "__main__":
    main()
