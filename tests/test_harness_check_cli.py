"""`kernelopt check`: exit codes and output, through the real CLI entry point."""

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from kernelopt.cli import main

ROOT = Path(__file__).resolve().parent.parent
FIX = ROOT / "tests" / "fixtures" / "harness"
SOFTMAX = ROOT / "examples" / "softmax"


def invoke(*args: str):
    return CliRunner().invoke(main, ["check", *map(str, args)])


def test_check_passes_with_exit_0_and_json():
    res = invoke(SOFTMAX / "problem.py", "--kernel", SOFTMAX / "kernel.py", "--set", "ROWS=4", "--set", "COLS=17",
                 "--json")
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    assert data["passed"] is True and len(data["trials"]) == 3
    assert data["problem"]["overrides"] == {"ROWS": 4, "COLS": 17}
    assert data["trials"][0]["outputs"][0]["shape"] == [4, 17]


def test_check_wrong_kernel_exit_1_with_verdict():
    res = invoke(SOFTMAX / "problem.py", "--kernel", SOFTMAX / "kernel_wrong.py", "--set", "ROWS=4", "--set", "COLS=17")
    assert res.exit_code == 1
    assert "FAIL (incorrect)" in res.stdout and "max abs error" in res.stdout


def test_check_timeout_flag_exit_1():
    res = invoke(FIX / "problem_axpy.py", "--kernel", FIX / "cheat_hang.py", "--timeout", "4")
    assert res.exit_code == 1 and "FAIL (timeout)" in res.stdout


@pytest.mark.parametrize(
    "problem, kernel, message",
    [
        (SOFTMAX / "problem.py", FIX / "missing.py", "no such candidate file"),
        (FIX / "missing.py", SOFTMAX / "kernel.py", "no such problem file"),
        (FIX / "bad_problem_no_model.py", SOFTMAX / "kernel.py", "missing Model"),
        (FIX / "bad_problem_no_get_inputs.py", SOFTMAX / "kernel.py", "missing get_inputs"),
        (SOFTMAX / "problem.py", FIX / "bad_syntax.py", "syntax error"),
        (SOFTMAX / "problem.py", FIX / "bad_neither.py", "neither class ModelNew nor function kernel_function"),
    ],
)
def test_check_bad_input_exit_2_one_line(problem, kernel, message):
    res = invoke(problem, "--kernel", kernel)
    assert res.exit_code == 2
    assert message in res.stderr and "Traceback" not in res.output
    assert len(res.stderr.strip().splitlines()) == 1


def test_check_problem_that_fails_at_run_time_is_bad_input():
    res = invoke(FIX / "bad_problem_get_inputs_raises.py", "--kernel", FIX / "axpy_ok.py")
    assert res.exit_code == 2 and "get_inputs() failed" in res.stderr and "no inputs today" in res.stderr


def test_check_requires_kernel_and_valid_set():
    res = invoke(SOFTMAX / "problem.py")
    assert res.exit_code == 2 and "--kernel" in res.stderr
    res = invoke(SOFTMAX / "problem.py", "--kernel", SOFTMAX / "kernel.py", "--set", "ROWS")
    assert res.exit_code == 2 and "NAME=VALUE" in res.stderr
