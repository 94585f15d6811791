"""On a GPU: every zoo kernel and its fix are correct at full size (the size they are
profiled at), and diagnosing a planted kernel end to end (profile + classify) names its
labelled category. Skipped without CUDA; the diagnose test also needs ncu."""

import importlib.util
import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ZOO = ROOT / "benchmarks" / "zoo"


def _cuda() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not _cuda(), reason="needs a CUDA GPU")]

_spec = importlib.util.spec_from_file_location("run_zoo_gpu", ZOO / "run_zoo.py")
run_zoo = importlib.util.module_from_spec(_spec)
sys.modules["run_zoo_gpu"] = run_zoo
_spec.loader.exec_module(run_zoo)
NAMES = [e.name for e in run_zoo.entries()]


@pytest.mark.parametrize("name", NAMES)
def test_zoo_kernel_is_correct_on_gpu_at_full_size(name):
    # Both variants through one engine (inputs and reference built once per entry), as
    # `kernelopt check` verifies. The CUDA entry builds two torch extensions (about a
    # minute each) the first time.
    from kernelopt.harness.verify import verify_many
    from kernelopt.problem import load_candidate, load_problem

    problem = load_problem(ZOO / name / "problem.py")
    results = verify_many(problem, [load_candidate(ZOO / name / f"{v}.py") for v in run_zoo.VARIANTS], trials=1)
    for variant, result in zip(run_zoo.VARIANTS, results):
        assert result.passed, f"{variant}: {result.reason}: {result.message}"
        assert result.device.startswith("cuda") and not result.interpreter


@pytest.mark.skipif(shutil.which("ncu") is None, reason="needs ncu")
@pytest.mark.parametrize("name", ["dram_unfused", "pointer_chase"])
def test_diagnose_end_to_end_names_the_planted_category(name, tmp_path):
    from kernelopt.diagnose import diagnose

    d = diagnose(ZOO / name / "problem.py", ZOO / name / "kernel.py", out_dir=tmp_path)
    assert d.primary is not None and d.primary.category == run_zoo.load_label(ZOO / name)["category"]
