from pathlib import Path

import pytest

from kernelopt.experience.importers import record_from_dict
from kernelopt.experience.store import ExperienceStore, seed_store
from kernelopt.models import Situation
from kernelopt.recommend import recommend


def add(store: ExperienceStore, kernel: str, bottleneck: str, optimization: str, speedup: float | None,
        backend: str = "triton", chip: str = "sm_90", **kw: object) -> str:
    return store.add(record_from_dict({"kernel": kernel, "backend": backend, "chip": chip, "bottleneck": bottleneck,
                                       "optimization": optimization, "speedup": speedup, **kw})).id


@pytest.fixture()
def store(tmp_path: Path) -> ExperienceStore:
    s = ExperienceStore(tmp_path / "e.db", seed=False)
    yield s
    s.close()


def test_semantic_match_finds_related_kernel(store: ExperienceStore) -> None:
    # Exact matching on the kernel name cannot tell that rms_norm is like layernorm.
    ln = add(store, "layernorm", "dram", "single-pass-row", 1.6)
    add(store, "matrix multiply gemm", "dram", "grouped-tile-order", 1.6)
    answer = recommend(Situation(kernel="rms_norm", backend="triton", chip="sm_90", bottleneck="dram"),
                             include_packs=False, store=store)
    assert answer.retrieval == "embedding"
    assert [r.strategy for r in answer.recommendations] == ["single-pass-row", "grouped-tile-order"]
    top = answer.recommendations[0]
    assert top.records == [ln] and top.source == "experience"
    assert set(top.parts) == {"similarity", "success_rate", "gain", "support", "own"}  # own: a measured record of this db
    assert top.parts["similarity"] > answer.recommendations[1].parts["similarity"]


def test_other_bottleneck_does_not_vote_and_failures_are_listed(store: ExperienceStore) -> None:
    add(store, "softmax", "compute", "exp2-fast-math", 1.5)
    bad = add(store, "softmax", "dram", "tune-num-warps", 0.8)
    add(store, "softmax", "dram", "single-pass-row", 1.3)
    answer = recommend(Situation(kernel="softmax", backend="triton", chip="sm_90", bottleneck="dram"),
                             include_packs=False, store=store)
    assert [r.strategy for r in answer.recommendations] == ["single-pass-row"]
    [failure] = answer.known_failures
    assert failure.strategy == "tune-num-warps" and failure.records == [bad] and failure.worst_speedup == 0.8


def test_outcome_and_support_raise_the_score(store: ExperienceStore) -> None:
    for _ in range(3):
        add(store, "softmax", "dram", "single-pass-row", 2.0)
    add(store, "softmax", "dram", "coalesced-access", 1.06)
    answer = recommend(Situation(kernel="softmax", backend="triton", bottleneck="dram"), include_packs=False, store=store)
    first, second = answer.recommendations
    assert first.strategy == "single-pass-row" and len(first.records) == 3
    assert first.parts["gain"] > second.parts["gain"] and first.parts["support"] > second.parts["support"]


def test_pack_recommendations_are_merged(store: ExperienceStore) -> None:
    add(store, "softmax", "dram", "single-pass-row", 1.5)
    answer = recommend(Situation(kernel="softmax", backend="triton", bottleneck="dram"), n=20, store=store)
    by_id = {r.strategy: r for r in answer.recommendations}
    assert by_id["single-pass-row"].source == "both" and "pack" in by_id["single-pass-row"].parts
    assert any(r.source == "pack" and not r.records for r in answer.recommendations)
    assert answer.recommendations[0].strategy == "single-pass-row"
    # The packs' anti-patterns for a DRAM-bound Triton kernel come with the known failures.
    pack_failures = [f for f in answer.known_failures if f.source == "pack"]
    assert "anti-more-warps-on-bandwidth-bound" in {f.strategy for f in pack_failures}
    assert all(f.similarity is None and f.reason.startswith("pack anti-pattern") for f in pack_failures)


def test_bm25_fallback_without_a_model(store: ExperienceStore, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KERNELOPT_NO_EMBEDDINGS", "1")
    add(store, "softmax", "dram", "single-pass-row", 1.5)
    add(store, "gemm", "dram", "grouped-tile-order", 1.5)
    answer = recommend(Situation(kernel="softmax", backend="triton", bottleneck="dram"), include_packs=False, store=store)
    assert answer.retrieval == "bm25"
    assert any("BM25" in n for n in answer.notes)
    assert answer.recommendations[0].strategy == "single-pass-row"
    hits = store.search("softmax")
    assert hits and hits[0].record.kernel == "softmax"


def test_index_follows_writes_from_another_connection(store: ExperienceStore) -> None:
    add(store, "softmax", "dram", "single-pass-row", 1.5)
    situation = Situation(kernel="softmax", backend="triton", bottleneck="dram")
    assert len(recommend(situation, include_packs=False, store=store).recommendations) == 1
    with ExperienceStore(store.path, seed=False) as other:
        add(other, "softmax", "dram", "coalesced-access", 1.5)
    assert len(recommend(situation, include_packs=False, store=store).recommendations) == 2


def test_seed_alone_recommends_on_a_new_install(tmp_path: Path) -> None:
    with ExperienceStore(tmp_path / "new.db") as fresh:
        answer = recommend(Situation(kernel="rms norm", backend="triton", chip="sm_90", bottleneck="dram"),
                                 include_packs=False, store=fresh)
    assert answer.recommendations
    seed_ids = {r.id for r in seed_store().list()}
    assert set(answer.recommendations[0].records) <= seed_ids
    assert "curated guidance" in answer.recommendations[0].reason


def test_search_ranks_by_meaning(store: ExperienceStore) -> None:
    add(store, "layer normalization", "dram", "single-pass-row", 1.5)
    add(store, "matrix multiplication", "compute", "tensor-cores-tl-dot", 1.5)
    hits = store.search("batchnorm")  # no word in common with either record
    assert hits[0].record.kernel == "layer normalization"


def test_reindex_embeds_what_add_deferred(store: ExperienceStore) -> None:
    add(store, "softmax", "dram", "single-pass-row", 1.5)
    add(store, "gemm", "compute", "tensor-cores-tl-dot", 1.5)
    assert store.unindexed("all-MiniLM-L6-v2") == 2
    assert store.reindex() == 2
    assert store.unindexed("all-MiniLM-L6-v2") == 0
    assert store.reindex() == 0


def test_seed_records_are_curated_without_invented_speedups() -> None:
    from kernelopt.strategies import list_strategies

    known = {s.id for s in list_strategies()[0]}
    records = seed_store().list()
    assert len(records) >= 30
    for r in records:
        if r.source == "curated":
            assert r.speedup is None and r.notes and "curated" in r.notes
        assert set(r.strategies) <= known, r.strategies

