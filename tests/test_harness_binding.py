"""prepare(): the one place inputs, parameters and settings are bound (run in-process here)."""

from pathlib import Path

import pytest

from kernelopt.harness.binding import bind_kernel_function, prepare, reference_settings
from kernelopt.harness.isolate import ChildError
from kernelopt.problem import load_candidate, load_problem

ROOT = Path(__file__).resolve().parent.parent
FIX = ROOT / "tests" / "fixtures" / "harness"


def test_overrides_reach_get_inputs_and_derived_constants(tmp_path):
    src = tmp_path / "problem.py"
    src.write_text(
        "import torch\nimport torch.nn as nn\nROWS = 4096\nCOLS = 4096\nTOTAL = ROWS * COLS\n"
        "class Model(nn.Module):\n    def forward(self, x):\n        return x.reshape(TOTAL)\n"
        "def get_inputs():\n    return [torch.randn(ROWS, COLS)]\n"
        "def get_init_inputs():\n    return []\n"
    )
    prepared = prepare(load_problem(src, {"ROWS": "3", "COLS": "5"}), None, device="cpu")
    (x,) = prepared.make_inputs(0)
    assert tuple(x.shape) == (3, 5)
    assert prepared.problem_module.TOTAL == 15
    assert prepared.reference([x])[0].shape == (15,)


def test_inputs_are_fresh_per_seed_and_reproducible():
    prepared = prepare(load_problem(FIX / "problem_axpy.py", {"N": "64"}), None, device="cpu")
    a, b, c = prepared.make_inputs(1), prepared.make_inputs(2), prepared.make_inputs(1)
    assert not a[0].equal(b[0]) and a[0].equal(c[0])


def test_dtype_casts_inputs_and_parameters():
    problem = load_problem(ROOT / "examples" / "rmsnorm" / "problem.py", {"ROWS": "2", "DIM": "8"}, dtype="bf16")
    import torch

    prepared = prepare(problem, load_candidate(ROOT / "examples" / "rmsnorm" / "kernel.py"), device="cpu")
    assert prepared.make_inputs(0)[0].dtype == torch.bfloat16
    assert prepared.reference_model.weight.dtype == torch.bfloat16
    # kernel_function(x, weight, eps): weight is the reference's (cast) parameter, eps its setting.
    assert prepared.kernel_kwargs["weight"] is prepared.reference_model.weight
    assert prepared.kernel_kwargs["eps"] == pytest.approx(1e-6)


def test_reference_settings_from_modules():
    import torch.nn as nn

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = nn.Conv2d(3, 8, kernel_size=3, stride=2, padding=1, groups=1)
            self.norm = nn.LayerNorm(8, eps=1e-3)
            self.scale = 0.5

    net = Net()
    s = reference_settings(net)
    assert s["scale"] == 0.5
    assert s["weight"] is net.conv.weight and s["bias"] is net.conv.bias  # first module wins
    assert s["norm_weight"] is net.norm.weight and s["conv_weight"] is net.conv.weight
    assert s["stride"] == (2, 2) and s["padding"] == (1, 1) and s["kernel_size"] == (3, 3) and s["groups"] == 1
    assert s["eps"] == 1e-3 and s["dilation"] == (1, 1)
    assert "training" not in s
    s = reference_settings(nn.Conv1d(2, 2, 1, bias=False))
    assert "bias" in s and s["bias"] is None


def test_bind_kernel_function_by_name_and_defaults():
    def fn(x, w, weight, eps=1e-5, *, groups, extra=None):
        return x

    kwargs = bind_kernel_function(fn, 2, {"weight": "W", "groups": 4, "eps": 0.1})
    assert kwargs == {"weight": "W", "eps": 0.1, "groups": 4}
    with pytest.raises(ChildError, match="'groups'"):
        bind_kernel_function(fn, 2, {"weight": "W"})
    with pytest.raises(ChildError, match="takes 4 positional parameters but get_inputs\\(\\) returns 5"):
        bind_kernel_function(fn, 5, {})


def test_model_new_receives_reference_weights(tmp_path):
    cand = tmp_path / "cand.py"
    # Different attribute name than the reference (`self.w` vs `self.weight`): copied by
    # the last name component only when unique, so here nothing matches by name ...
    cand.write_text(
        "import torch, torch.nn as nn\n"
        "class ModelNew(nn.Module):\n"
        "    def __init__(self, dim, eps):\n"
        "        super().__init__()\n"
        "        self.inner = nn.Module()\n"
        "        self.inner.weight = nn.Parameter(torch.zeros(dim))\n"
        "        self.eps = eps\n"
        "    def forward(self, x):\n"
        "        return x * self.inner.weight\n"
    )
    problem = load_problem(ROOT / "examples" / "rmsnorm" / "problem.py", {"ROWS": "2", "DIM": "8"})
    prepared = prepare(problem, load_candidate(cand), device="cpu")
    # ... but `inner.weight` ends in `weight` like exactly one reference entry of that shape.
    assert prepared.copied_state == ["inner.weight"]
    assert prepared.candidate_model.inner.weight.equal(prepared.reference_model.weight)


def test_bound_call_runs_candidate_and_reference():
    problem = load_problem(FIX / "problem_axpy.py", {"N": "32"})
    prepared = prepare(problem, load_candidate(FIX / "cheat_cached_result.py"), device="cpu")
    inputs = prepared.make_inputs(3)
    assert prepared.bound_call("candidate", inputs)().equal(prepared.bound_call("reference", inputs)())


def test_candidate_errors_are_classified():
    problem = load_problem(FIX / "problem_axpy.py", {"N": "32"})
    prepared = prepare(problem, load_candidate(FIX / "runtime_error.py"), device="cpu")
    with pytest.raises(ChildError) as info:
        prepared.candidate(prepared.make_inputs(0))
    assert info.value.kind == "runtime" and "always fails" in str(info.value)
    with pytest.raises(ChildError) as info:
        prepare(problem, load_candidate(FIX / "unbindable.py"), device="cpu")
    assert info.value.kind == "runtime"
