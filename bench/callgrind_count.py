"""Instructions a Python snippet executes under valgrind's callgrind, with `tree`'s ragtrace first on its path:
a figure that does not move with the machine's load. Hash randomisation is off (PYTHONHASHSEED=0), so a rerun
counts the same. Shared by bench/capture_instructions.py and bench/admission_cost.py."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path


def count_instructions(code: str, tree: Path) -> int:
    """Instructions of one `python -c code` process run in `tree` with PYTHONPATH=`tree`."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "callgrind.out"
        subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", sys.executable, "-c", code],
                       check=True, capture_output=True, cwd=tree,
                       env={**os.environ, "PYTHONPATH": str(tree), "PYTHONHASHSEED": "0"})
        for line in out.read_text().splitlines():
            if line.startswith(("summary:", "totals:")):
                return int(line.split()[1])
    raise RuntimeError("callgrind wrote no summary")
