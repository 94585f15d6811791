"""`kernelopt profile`: import mode, JSON shape, outputs written, one-line errors with exit 2."""

import json
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner

from kernelopt.cli import main

FX = Path(__file__).parent / "fixtures" / "profile"


def run(*args: str):
    return CliRunner().invoke(main, ["profile", *args], catch_exceptions=False)


def test_import_json_lists_every_kernel_with_metrics_and_rules():
    res = run("--import", str(FX / "probe_h200_torch" / "raw.csv"), "--json")
    assert res.exit_code == 0
    doc = json.loads(res.output)
    assert [k["name"] for k in doc["kernels"]] == ["vectorized_elementwise_kernel", "cunn_SoftMaxForwardReg"]
    mv = doc["kernels"][0]["metrics"]["dram_throughput_pct"]
    assert set(mv) == {"key", "name", "value", "unit"} and mv["name"].startswith("gpu__dram_throughput")
    res = run("--import", str(FX / "softmax" / "profile.ncu-rep"), "--json")
    rule = json.loads(res.output)["kernels"][0]["rules"][0]
    assert {"rule", "type", "message", "est_speedup_pct", "focus_metrics"} <= set(rule)


def test_import_writes_the_three_outputs(tmp_path: Path):
    res = run("--import", str(FX / "matvec" / "profile.ncu-rep"), "-o", str(tmp_path))
    assert res.exit_code == 0 and "matvec_kernel" in res.output
    summary = (tmp_path / "ncu_summary.md").read_text()
    assert "## Kernel 0: `matvec_kernel`" in summary and "### warp stalls" in summary
    assert "| DRAM throughput |" in summary and "cycles/inst" in summary
    assert "### OPT" in (tmp_path / "ncu_details.md").read_text()
    assert json.loads((tmp_path / "metrics.json").read_text())["source"] == "ncu-rep"


def test_errors_are_one_line_exit_2(tmp_path: Path):
    bad = tmp_path / "bad.json"
    bad.write_text("{oops")
    for args in (["--import", str(bad)], ["--import", str(tmp_path / "none.csv")], [], ["x.py"]):
        proc = subprocess.run([sys.executable, "-m", "kernelopt", "profile", *args], capture_output=True, text=True)
        assert proc.returncode == 2, args
        assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr, proc.stderr
