import pytest

from kernelopt.experience.embeddings import DEFAULT_MODEL, default_model_dir, load_embedder

TEXTS = [
    "rms norm kernel, triton backend, dram bound",
    "matrix multiplication kernel, cuda backend, compute bound, math pipe throttle stall",
    "a much longer text " * 20,
]


def test_default_model_loads_offline_and_normalises() -> None:
    import numpy as np

    emb = load_embedder()
    assert emb is not None and emb.name == DEFAULT_MODEL and emb.dim == 384
    vecs = emb.encode(TEXTS)
    assert vecs.shape == (3, 384) and vecs.dtype == np.float32
    assert np.allclose(np.linalg.norm(vecs, axis=1), 1.0, atol=1e-5)
    # Batching and padding must not change a text's vector.
    assert np.allclose(emb.encode(TEXTS[:1])[0], vecs[0], atol=1e-5)


def test_no_embeddings_env_forces_fallback(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KERNELOPT_NO_EMBEDDINGS", "1")
    assert load_embedder() is None


@pytest.mark.slow  # imports sentence-transformers (~6 s)
def test_unloadable_model_is_none() -> None:
    assert load_embedder("/nonexistent/model/path") is None


@pytest.mark.slow
def test_numpy_forward_matches_sentence_transformers() -> None:
    import numpy as np

    st = pytest.importorskip("sentence_transformers")
    ref = st.SentenceTransformer(str(default_model_dir()), device="cpu").encode(TEXTS, normalize_embeddings=True)
    ours = load_embedder().encode(TEXTS)
    assert (np.sum(ref * ours, axis=1) > 0.9999).all()
