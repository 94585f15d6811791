"""The README stays true to the code: its library example runs, its commands exist."""

import re
import subprocess
import sys
from pathlib import Path

from kernelopt.cli import COMMANDS

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()


def test_library_example_runs():
    block = re.search(r"```python\n(.*?)```", README, re.S).group(1)
    out = subprocess.run([sys.executable, "-c", block], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert len(out.stdout.strip().splitlines()) == 3


def test_every_command_in_the_table_exists_and_every_command_is_listed():
    listed = set(re.findall(r"^\| `kernelopt (\w+)", README, re.M))
    assert listed == set(COMMANDS)


def test_ci_runs_the_readme_test_command():
    ci = (ROOT / ".ci" / "run").read_text()
    test_line = next(line for line in README.splitlines() if "pytest" in line and line.startswith("bash "))
    assert test_line.split("#")[0].strip() in ci
