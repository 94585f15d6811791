"""On a GPU: the row transforms' rewrites compile with real Triton (not the interpreter) and
are correct at shapes beyond the interpreter's - single_pass_row, rows_per_program and
split_reduction on the suite drafts and the independently written fixtures. Skipped without CUDA."""

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SUITE = ROOT / "benchmarks" / "suite"
FIX = ROOT / "tests" / "fixtures" / "transforms"


def _cuda() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not _cuda(), reason="needs a CUDA GPU")]

# (transform, params, candidate, site, problem, shape)
CASES = [
    ("single_pass_row", {}, SUITE / "softmax" / "kernel.py", "softmax_kernel", "softmax", {"ROWS": "64", "COLS": "5000"}),
    ("single_pass_row", {}, SUITE / "rmsnorm" / "kernel.py", "rmsnorm_kernel", "rmsnorm", {"ROWS": "64", "DIM": "3000"}),
    ("single_pass_row", {}, SUITE / "cross_entropy" / "kernel.py", "row_loss_kernel", "cross_entropy",
     {"BATCH": "64", "CLASSES": "7000"}),
    ("single_pass_row", {}, FIX / "logsoftmax_rowptr.py", "_lsm_fwd", "log_softmax", {"ROWS": "64", "COLS": "999"}),
    ("single_pass_row", {}, FIX / "softmax_block_count.py", "softmax_fwd_blocks", "softmax", {"ROWS": "64", "COLS": "999"}),
    ("single_pass_row", {}, FIX / "layernorm_three_pass.py", "ln_three_pass", "layernorm", {"ROWS": "64", "DIM": "999"}),
    ("single_pass_row", {}, SUITE / "softmax" / "kernel.py", "softmax_kernel@online", "softmax",
     {"ROWS": "64", "COLS": "5000"}),
    ("single_pass_row", {}, SUITE / "cross_entropy" / "kernel.py", "row_loss_kernel@online", "cross_entropy",
     {"BATCH": "64", "CLASSES": "7000"}),
    ("single_pass_row", {}, FIX / "logsoftmax_rowptr.py", "_lsm_fwd@online", "log_softmax", {"ROWS": "64", "COLS": "999"}),
    ("single_pass_row", {}, FIX / "layernorm_three_pass.py", "ln_three_pass@online", "layernorm", {"ROWS": "64", "DIM": "999"}),
    ("single_pass_row", {}, FIX / "layernorm_tutorial_style.py", "_layer_norm_fwd@online", "layernorm",
     {"ROWS": "64", "DIM": "999"}),
    ("rows_per_program", {"ROWS_PER_PROGRAM": 8}, SUITE / "softmax" / "kernel.py", "softmax_kernel", "softmax",
     {"ROWS": "1001", "COLS": "300"}),
    ("rows_per_program", {"ROWS_PER_PROGRAM": 4}, SUITE / "layernorm" / "kernel.py", "layernorm_kernel", "layernorm",
     {"ROWS": "1001", "DIM": "300"}),
    ("rows_per_program", {"ROWS_PER_PROGRAM": 4}, SUITE / "max_dim1" / "kernel.py", "max_dim1_kernel", "max_dim1",
     {"BATCH": "7", "DIM1": "33", "DIM2": "100"}),
    ("rows_per_program", {"ROWS_PER_PROGRAM": 16}, FIX / "rowsum_lambda_grid.py", "sum_rows", "row_sum",
     {"ROWS": "1001", "COLS": "300"}),
    ("split_reduction", {"SPLIT": 16}, SUITE / "row_sum" / "kernel.py", "row_sum_kernel", "row_sum",
     {"ROWS": "4", "COLS": "100000"}),
    ("split_reduction", {"SPLIT": 16}, SUITE / "matvec_bf16" / "kernel.py", "matvec_kernel", "matvec_bf16",
     {"M": "8", "K": "100000"}),
    ("split_reduction", {"SPLIT": 32}, SUITE / "cross_entropy" / "kernel.py", "mean_kernel", "cross_entropy",
     {"BATCH": "5000", "CLASSES": "100"}),
    ("split_reduction", {"SPLIT": 8}, FIX / "matvec_row_tiles.py", "gemv_tiles", "matvec_bf16", {"M": "9", "K": "50000"}),
]


@pytest.mark.parametrize("transform,params,path,site,problem,shape", CASES,
                         ids=[f"{c[0]}-{c[2].stem}-{c[3]}" for c in CASES])
def test_rewrite_is_correct_on_gpu(transform, params, path, site, problem, shape, tmp_path):
    from kernelopt.harness.verify import verify
    from kernelopt.optimize.transforms import get_transform
    from kernelopt.problem import load_candidate, load_problem

    out = get_transform(transform).apply(path.read_text(), site, **params)
    cand = tmp_path / f"{path.stem}_{transform}{site.replace('@', '_')}.py"
    cand.write_text(out)
    v = verify(load_problem(SUITE / problem / "problem.py", shape), load_candidate(cand))
    assert v.passed, f"{v.reason}: {v.message}"
    assert not v.interpreter
