"""The shipped packs: valid, and covering what the issue asks of them."""

from __future__ import annotations

import re
from collections import Counter

import pytest

from kernelopt.conditions import compile_condition
from kernelopt.models import CATEGORIES
from kernelopt.strategies import builtin_pack_files, check_pack, load_strategies, metric_keys, select


@pytest.fixture(scope="module")
def builtin():
    return load_strategies(env=False, entry_points=False)


def test_builtin_packs_validate_clean():
    files = builtin_pack_files()
    assert {f.name for f in files} >= {"triton.yaml", "cuda.yaml"}
    for f in files:
        pack, report = check_pack(f)
        assert report.ok, report.errors
        assert pack is not None and not report.warnings


def test_builtin_packs_do_not_override_each_other(builtin):
    assert builtin.overrides == []


@pytest.mark.parametrize("backend", ["triton", "cuda"])
def test_each_backend_has_25_strategies_and_two_per_category(builtin, backend):
    mine = [s for s in builtin.strategies.values() if s.backend == backend]
    assert len(mine) >= 25
    proposals = [s for s in mine if not s.anti_pattern]
    for category in CATEGORIES:
        assert sum(category in s.categories for s in proposals) >= 2, category


@pytest.mark.parametrize("backend", ["triton", "cuda"])
def test_knob_strategies_for_the_optimizer(builtin, backend):
    params = {k.param for s in select(builtin, backend) for k in s.knobs}
    expected = {"triton": {"num_warps", "num_stages", "BLOCK_*", "GROUP_SIZE_M", "SPLIT_K", "ROWS_PER_PROGRAM"},
                "cuda": {"BLOCK_SIZE", "SPLIT_K", "ITEMS_PER_THREAD", "STAGES", "GROUP_M"}}[backend]
    assert expected <= params


@pytest.mark.parametrize("backend", ["triton", "cuda"])
def test_anti_patterns_present(builtin, backend):
    anti = {s.id for s in select(builtin, backend) if s.anti_pattern}
    # more warps when bandwidth-bound, deep pipelines that spill, compute tweaks at the DRAM
    # roofline, tensor cores without a reduction
    for needle in ("bandwidth-bound", "deep-pipeline", "dram-roofline", "tensor-cores-without-reduction"):
        assert any(needle in a for a in anti), needle


def test_code_strategies_named_in_issue_exist(builtin):
    ids = set(builtin.strategies)
    for sid in ("coalesced-access", "vectorize-with-alignment-hints", "fuse-elementwise-passes",
                "tensor-cores-tl-dot", "online-softmax", "hoist-index-math", "tma-tensor-descriptors",
                "persistent-grid", "grouped-tile-order", "single-pass-row",
                "cuda-shared-memory-tiling", "cuda-shared-memory-padding", "cuda-warp-shuffle-reduction",
                "cuda-wgmma-hopper", "cuda-tma-bulk-copy", "cuda-online-softmax", "cuda-vectorized-loads"):
        assert sid in ids, sid


def test_every_strategy_is_complete(builtin):
    keys = metric_keys()
    for s in builtin.strategies.values():
        assert s.expect, s.id
        assert s.pitfall, s.id  # every entry says when it does not help
        assert s.change, s.id  # knob strategies explain the move too
        assert s.references, s.id
        for r in s.references:
            assert "http" not in r  # titles of real sources, no invented URLs
        for cond in (s.when, s.avoid_when):
            if cond:
                assert compile_condition(cond).names <= keys
        if not s.anti_pattern:
            # the expectation names at least one metric catalog key
            assert set(re.findall(r"[a-z0-9_]+", s.expect)) & keys, s.id


def test_ids_are_globally_unique_across_backends(builtin):
    counts = Counter(s.id for p in builtin.packs for s in p.strategies)
    assert max(counts.values()) == 1


def test_the_docs_table_counts_the_shipped_packs() -> None:
    """docs/strategies.md's table of shipped packs said 37 Triton strategies when the pack held 42."""
    import re
    from pathlib import Path

    import yaml

    root = Path(__file__).resolve().parents[1]
    doc = (root / "docs" / "strategies.md").read_text()
    for name in ("triton", "cuda"):
        entries = yaml.safe_load((root / "strategies" / f"{name}.yaml").read_text())["strategies"]
        row = re.search(rf"^\| `strategies/{name}\.yaml` \| `[^`]+` \| (\d+) \| (\d+) \|$", doc, re.M)
        assert row, f"no row for strategies/{name}.yaml in docs/strategies.md"
        assert (int(row[1]), int(row[2])) == (len(entries), sum(bool(e.get("anti_pattern")) for e in entries))
