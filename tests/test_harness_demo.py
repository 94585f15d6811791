"""examples/demo.sh, the README's demo, works on a machine without a GPU."""

import os
import subprocess
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.slow
def test_demo_script_runs_on_cpu():
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("on a GPU the demo runs full-size problems; run it by hand")
    # The installed entry point, whether or not the venv's bin directory is on the caller's PATH.
    env = {**os.environ, "PATH": sysconfig.get_path("scripts") + os.pathsep + os.environ.get("PATH", "")}
    proc = subprocess.run(["bash", str(ROOT / "examples" / "demo.sh")], capture_output=True, text=True, timeout=900,
                          env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert proc.stdout.count("PASS: correct in 3 trials") == 3
    assert proc.stdout.count("FAIL (incorrect)") == 3
    assert "demo: all steps behaved as expected" in proc.stdout
    # The optimize step ran the loop end to end and wrote its report.
    assert "interpreter wall time" in proc.stdout and "final_report.md" in proc.stdout
    # Issue 20: each command is shown as one could paste it, and the demo says where its files went.
    assert "--kernel 'row softmax'" in proc.stdout
    assert "in the temporary folder /" in proc.stdout
