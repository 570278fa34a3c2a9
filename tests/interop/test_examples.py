"""Every program in examples/ runs offline in the suite and prints the scores it got.

The producer examples run in process through `main()` with their default judge (the local one); one
also runs as `python examples/<file>.py`, the way a reader would. zero_code_app runs under
`opentelemetry-instrument` in test_zero_code.py.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.interop.conftest import EXAMPLES, load_example

RUN_BY_MAIN = {
    "langchain_openinference": ("langchain_core", "openinference.instrumentation.langchain"),
    "langchain_openllmetry": ("langchain_core", "opentelemetry.instrumentation.langchain"),
    "openai_retrieval_helper": ("openai", "opentelemetry.instrumentation.openai_v2"),
    "chromadb_openllmetry": ("chromadb", "opentelemetry.instrumentation.chromadb"),
    "llamaindex_openinference": ("llama_index.core", "openinference.instrumentation.llama_index"),
    "llamaindex_openllmetry": (
        "llama_index.core", "llama_index.llms.litellm", "opentelemetry.instrumentation.llamaindex"
    ),
    "haystack_openinference": ("haystack", "openinference.instrumentation.haystack"),
    "llm_judge_local_server": ("litellm",),
}
ELSEWHERE = {"zero_code_app": "tests/interop/test_zero_code.py"}
# imported by the examples, no main()
HELPERS = {"_pipeline", "_chat_server", "_handbook", "langchain_app", "llamaindex_app", "haystack_app"}


def test_every_example_is_run() -> None:
    found = {p.stem for p in EXAMPLES.glob("*.py")}
    assert found == set(RUN_BY_MAIN) | set(ELSEWHERE) | HELPERS


@pytest.mark.usefixtures("local_judge")  # skips where the local judge cannot load
@pytest.mark.parametrize("name", sorted(RUN_BY_MAIN))
def test_example_main(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    example = load_example(name, *RUN_BY_MAIN[name])
    result = example.main()
    assert result["status"] == "scored"
    assert set(result["scores"]) == {"context_precision", "context_relevance"}
    assert all(0.0 <= s <= 1.0 for s in result["scores"].values())
    printed = capsys.readouterr().out
    assert f"context_precision  {result['scores']['context_precision']:.2f}" in printed


@pytest.mark.usefixtures("local_judge")
def test_example_as_a_script() -> None:
    load_example("langchain_openinference", *RUN_BY_MAIN["langchain_openinference"])  # skip if not installed
    env = {**os.environ, "PYTHONPATH": str(EXAMPLES.parent), "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    env.pop("OTLP_ENDPOINT", None)
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / "langchain_openinference.py")],
        env=env, capture_output=True, text=True, timeout=90, cwd=EXAMPLES.parent,
    )
    assert done.returncode == 0, done.stderr
    assert "[openinference] 'VectorStoreRetriever': scored" in done.stdout
    assert "context_precision" in done.stdout
