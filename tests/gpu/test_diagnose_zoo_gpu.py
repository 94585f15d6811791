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


@pytest.mark.parametrize("variant", run_zoo.VARIANTS)
@pytest.mark.parametrize("name", NAMES)
def test_zoo_kernel_is_correct_on_gpu_at_full_size(name, variant):
    # child_verify is what `kernelopt check` runs in its child; in-process here, so the
    # 28 checks share one CUDA context instead of starting 28 processes. The CUDA entry
    # builds two torch extensions (about a minute each) the first time.
    from kernelopt.harness.verify import child_verify
    from kernelopt.problem import load_candidate, load_problem

    problem = load_problem(ZOO / name / "problem.py")
    candidate = load_candidate(ZOO / name / f"{variant}.py")
    result = child_verify({"problem": problem.model_dump(mode="json"), "candidate": candidate.model_dump(mode="json"),
                           "device": "cuda", "trials": 1})
    assert result["passed"], f"{result['reason']}: {result['message']}"


@pytest.mark.skipif(shutil.which("ncu") is None, reason="needs ncu")
@pytest.mark.parametrize("name", ["dram_unfused", "pointer_chase"])
def test_diagnose_end_to_end_names_the_planted_category(name, tmp_path):
    from kernelopt.diagnose import diagnose

    d = diagnose(ZOO / name / "problem.py", ZOO / name / "kernel.py", out_dir=tmp_path)
    assert d.primary is not None and d.primary.category == run_zoo.load_label(ZOO / name)["category"]
