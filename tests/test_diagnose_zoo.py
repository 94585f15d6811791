"""The diagnosis zoo: structure, correctness of every kernel and fix (Triton interpreter,
small shapes), and the kernelopt pack's primary label on the committed H100 and H200 profiles."""

import functools
from pathlib import Path

import pytest

from conftest import load_script

from kernelopt.models import CATEGORIES
from kernelopt.problem import load_candidate, load_problem

ROOT = Path(__file__).resolve().parents[1]
ZOO = ROOT / "benchmarks" / "zoo"
# One folder of zoo profiles per GPU they were taken on (see each provenance.json).
FIXTURE_SETS = {"h200": ROOT / "tests" / "fixtures" / "zoo", "h100": ROOT / "tests" / "fixtures" / "zoo_h100"}


def _run_zoo():
    return load_script(ZOO / "run_zoo.py", register=True)


run_zoo = _run_zoo()
ENTRIES = run_zoo.entries()
NAMES = [e.name for e in ENTRIES]


def test_zoo_covers_every_category_and_the_required_subcauses():
    assert len(ENTRIES) >= 12
    labels = {e.name: run_zoo.load_label(e) for e in ENTRIES}
    assert {l["category"] for l in labels.values()} == set(CATEGORIES)
    subcauses = {l["subcause"] for l in labels.values()}
    for required in ("uncoalesced_access", "bank_conflicts", "register_spill", "block_size", "grid_too_small",
                     "tail_effect", "long_scoreboard", "fma", "tensor", "dram_bandwidth", "launch_overhead", "barrier"):
        assert required in subcauses, required
    # Two Triton reductions with a barrier per step (sinkhorn_barrier, topk_barrier) are
    # labelled by what their profiles show limits them: the L1/shared traffic of their
    # cross-warp reductions, not the barriers (see their label notes). reduce_barrier (CUDA)
    # is the one whose barriers dominate.
    assert {"sinkhorn_barrier", "topk_barrier"} <= set(labels)
    from kernelopt.strategies import load_strategies

    shipped = set(load_strategies(env=False, entry_points=False).strategies)
    for name, label in labels.items():
        assert label.get("fix_strategy") and set(label["fix_strategy"]) <= shipped, name
    for entry in ENTRIES:
        problem = load_problem(entry / "problem.py")
        small = labels[entry.name]["small"]
        assert set(small) <= set(problem.constants), entry.name  # the CPU shapes are real --set overrides
        backends = {load_candidate(entry / f"{variant}.py").backend for variant in run_zoo.VARIANTS}
        assert backends == ({"cuda"} if entry.name in CUDA_ENTRIES else {"triton"}), entry.name
    assert len([n for n in NAMES if n not in CUDA_ENTRIES]) >= 12  # at least 12 Triton kernels


# Bank conflicts cannot be planted reliably in Triton (it swizzles shared memory): CUDA.
# reduce_barrier is CUDA so its reduction is exactly the classic __syncthreads tree.
CUDA_ENTRIES = {"bank_conflicts", "reduce_barrier"}
TRITON_NAMES = [n for n in NAMES if n not in CUDA_ENTRIES]


@functools.lru_cache(maxsize=None)
def _verify_entry(name: str) -> dict:
    # Every variant of one zoo entry through one engine call: inputs and references are built once.
    from kernelopt.harness.verify import verify_many

    entry = ZOO / name
    label = run_zoo.load_label(entry)
    problem = load_problem(entry / "problem.py", {k: str(v) for k, v in label["small"].items()})
    variants = [v for v in run_zoo.VARIANTS if (entry / f"{v}.py").is_file()]
    results = verify_many(problem, [load_candidate(entry / f"{v}.py") for v in variants], trials=1)
    return {v: r.model_dump(mode="json") for v, r in zip(variants, results)}


def _verify(name: str, variant: str) -> dict:
    return _verify_entry(name)[variant]


@pytest.mark.parametrize("variant", run_zoo.VARIANTS)
@pytest.mark.parametrize("name", TRITON_NAMES)
def test_zoo_kernel_and_fix_are_correct_at_small_sizes(name, variant):
    result = _verify(name, variant)
    assert result["passed"], result["message"]


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(CUDA_ENTRIES))
def test_cuda_zoo_kernel_compiles_without_gpu(name):
    # nvcc with the torch headers takes about a minute per source here; each fix is compiled on a GPU
    # (tests/gpu/test_diagnose_zoo_gpu.py), and locally with `kernelopt check` when wanted.
    result = _verify(name, "kernel")
    assert result["reason"] == "needs_gpu" and "compiled" in result["message"], result["message"]


def _profiled(fixtures: Path) -> list[str]:
    out = []
    for n in NAMES:
        metrics = run_zoo.variant_metrics(run_zoo.variant_folder(fixtures, n, "kernel"))
        if metrics is not None and run_zoo.stale(ZOO / n, "kernel", metrics) is None:
            out.append(n)
    return out


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("gpu", sorted(FIXTURE_SETS))
def test_kernelopt_primary_label_matches_the_planted_bottleneck(gpu, name):
    fixtures = FIXTURE_SETS[gpu]
    folder = run_zoo.variant_folder(fixtures, name, "kernel")
    if not folder.is_dir():
        pytest.skip(f"no GPU profile of zoo/{name} under {fixtures} (run benchmarks/zoo/run_zoo.py profile on a GPU)")
    from kernelopt.diagnose.classifier import BottleneckClassifier, render

    label = run_zoo.load_label(ZOO / name)
    metrics = run_zoo.variant_metrics(folder)
    if metrics is None:
        error = folder / "error.txt"
        pytest.skip(f"zoo/{name} was not profiled: {error.read_text().strip() if error.is_file() else 'no metrics'}")
    reason = run_zoo.stale(ZOO / name, "kernel", metrics)
    if reason:
        pytest.skip(f"zoo/{name}: {reason}")
    diagnosis = BottleneckClassifier("kernelopt").classify(metrics)
    assert diagnosis.primary is not None and diagnosis.primary.category == label["category"], render(diagnosis)


@pytest.mark.parametrize("gpu", sorted(FIXTURE_SETS))
def test_score_writes_the_accuracy_table(gpu, tmp_path):
    fixtures = FIXTURE_SETS[gpu]
    if not _profiled(fixtures):
        pytest.skip(f"no zoo profiles under {fixtures}")
    report = run_zoo.score(fixtures, tmp_path)
    md = (tmp_path / f"zoo_accuracy_{gpu}.md").read_text()
    assert report["provenance"]["gpu"].lower().startswith(f"nvidia {gpu}")
    for pack in run_zoo.PACKS:
        assert f"| {pack} |" in md
        assert report["accuracy"][pack]["total"] == len(_profiled(fixtures))


def test_gpu_tag():
    assert run_zoo.gpu_tag("NVIDIA H100 80GB HBM3") == "h100" and run_zoo.gpu_tag("NVIDIA H200") == "h200"
    assert run_zoo.gpu_tag(None) is None


def test_kernel_names_reads_cuda_and_triton_sources():
    # The stale-profile check compares these names with the profiled kernels'.
    assert run_zoo.kernel_names(ZOO / "reduce_barrier" / "kernel.py") == {"logsumexp_tree_kernel"}
    assert run_zoo.kernel_names(ZOO / "bank_conflicts" / "kernel.py") == {"transpose_kernel"}
    assert run_zoo.kernel_names(ZOO / "dram_unfused" / "kernel.py") == {"affine_kernel", "relu_kernel"}
