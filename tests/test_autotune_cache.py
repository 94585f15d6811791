"""Triton's autotune choices kept for the runners of one verifier (kernelopt.harness.autotune_cache).

The interpreter never caches autotune results (Triton turns `cache_results` off under
TRITON_INTERPRET), so these tests check the plumbing on the CPU: the runners' environment, the
cache manager Triton loads from it, and two runners of one engine sharing a stored result that
no other engine sees. tests/gpu and the lead's GPU run check the autotuner itself.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kernelopt.harness.autotune_cache import (AUTOTUNE_DIR_VAR, CACHE_FLAG_VAR, MANAGER, MANAGER_VAR,
                                              runner_autotune_env)

FIX = Path(__file__).resolve().parent / "fixtures" / "harness"


def test_runner_env_keeps_autotune_results_in_the_verifiers_store_only(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv(MANAGER_VAR, raising=False)
    monkeypatch.setenv(CACHE_FLAG_VAR, "1")  # the user's own choice: results in Triton's per-user dir
    assert runner_autotune_env(tmp_path) == {CACHE_FLAG_VAR: "1", MANAGER_VAR: MANAGER,
                                             AUTOTUNE_DIR_VAR: str(tmp_path)}
    # No store (a sandboxed runner): off, whatever the user's environment says.
    assert runner_autotune_env(None) == {CACHE_FLAG_VAR: "0"}
    # A cache manager of the user's own could not keep them apart: off.
    monkeypatch.setenv(MANAGER_VAR, "their.module:Manager")
    assert runner_autotune_env(tmp_path) == {CACHE_FLAG_VAR: "0"}


def test_triton_routes_autotune_files_to_the_store_and_compiled_kernels_to_its_cache(tmp_path: Path,
                                                                                      monkeypatch) -> None:
    pytest.importorskip("triton")
    from triton.runtime.cache import get_cache_manager

    monkeypatch.delenv(MANAGER_VAR, raising=False)
    for name, value in runner_autotune_env(tmp_path / "store1").items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "user"))
    manager = get_cache_manager("ab" * 16)
    tuned = manager.put('{"configs_timings": []}', "kern.autotune.json", binary=False)
    compiled = manager.put(b"\x7fELF", "kern.cubin")
    assert Path(tuned).is_relative_to(tmp_path / "store1") and Path(tuned).read_text() == '{"configs_timings": []}'
    assert Path(compiled).is_relative_to(tmp_path / "user")
    assert not list((tmp_path / "user").rglob("*.autotune.json"))
    assert get_cache_manager("ab" * 16).get_file("kern.autotune.json") == tuned
    # Another verifier's store (another engine, device or run) does not see it; the compiled
    # kernels stay shared through Triton's own dir.
    monkeypatch.setenv(AUTOTUNE_DIR_VAR, str(tmp_path / "store2"))
    assert get_cache_manager("ab" * 16).get_file("kern.autotune.json") is None
    assert get_cache_manager("ab" * 16).get_file("kern.cubin") == compiled
    # Without a store named, nothing is read or kept in the per-user dir.
    monkeypatch.delenv(AUTOTUNE_DIR_VAR)
    assert get_cache_manager("ab" * 16).put("{}", "other.autotune.json", binary=False) == ""
    assert not list((tmp_path / "user").rglob("*.autotune.json"))


@pytest.mark.slow
def test_fresh_runners_of_one_engine_share_a_stored_result_and_another_engine_does_not(tmp_path: Path,
                                                                                        monkeypatch) -> None:
    pytest.importorskip("triton")
    from kernelopt.harness.evaluate import Engine
    from kernelopt.problem import load_candidate, load_problem

    monkeypatch.delenv(MANAGER_VAR, raising=False)
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton"))
    problem = load_problem(FIX / "problem_axpy.py")
    writer = load_candidate(FIX / "autotune_store_writer.py")
    reader = load_candidate(FIX / "autotune_store_reader.py")
    # --isolate candidate: a fresh runner for each candidate, as every GPU timing has.
    with Engine(problem, isolate="candidate", trials=1, timeout_s=120) as engine:
        first, second = engine.evaluate([writer, reader], time=False)
    assert first.passed, first.failure
    assert second.passed, second.failure  # the reader's runner found the writer's result
    with Engine(problem, isolate="candidate", trials=1, timeout_s=120) as engine:
        (alone,) = engine.evaluate([reader], time=False)
    assert not alone.passed and alone.failure is not None
    assert "no stored autotune result" in (alone.failure.message or "") + (alone.failure.stderr or "")
    assert not list((tmp_path / "triton").rglob("*.autotune.json"))  # never in the per-user cache
