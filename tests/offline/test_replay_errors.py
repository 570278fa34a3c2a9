"""`replay` on a file that is not an OTLP trace export says what it found and what to run instead."""

from __future__ import annotations

from pathlib import Path

import pytest

from ragtrace.cli import main
from tests.offline.gold import JUDGE


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('{"query": "q", "contexts": ["a"], "response": "r"}\n',
         "x.json:1: a JSON object with keys 'query', 'contexts', 'response' and no 'resourceSpans': not an OTLP "
         "trace export; it looks like a dataset of samples: score it with `ragtrace eval FILE`"),
        ('{"level": "info", "msg": "hello"}\n',
         "x.json:1: a JSON object with keys 'level', 'msg' and no 'resourceSpans': not an OTLP trace export\n"),
        ('{"resourceMetrics": []}\n', "x.json:1: an OTLP metrics export (keys 'resourceMetrics'), not traces"),
        ('{"resourceLogs": []}\n', "x.json:1: an OTLP logs export"),
        ("[1, 2]\n", "x.json:1: a JSON list, not an OTLP ExportTraceServiceRequest object"),
        ('{"resourceSpans": []}\n{}\n', "x.json: 2 OTLP export request(s), none with a span"),
        ("\n", "x.json: file is empty: no spans"),
    ],
)
def test_what_a_non_otlp_file_holds_is_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str, message: str
) -> None:
    path = tmp_path / "x.json"
    path.write_text(content)
    assert main(["replay", str(path), "--judge", JUDGE, "--quiet"]) == 2
    assert f"ragtrace replay: error: {tmp_path / message}" in capsys.readouterr().err
