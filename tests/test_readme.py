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


def _readme_test_command() -> list[str]:
    line = next(line for line in README.splitlines() if "pytest" in line and line.startswith("bash "))
    return [part.strip() for part in line.split("#")[0].split("&&")]


def test_ci_runs_the_readme_test_command():
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    steps = [ci.index(part) for part in _readme_test_command()]  # each a line of its own, in order
    assert steps == sorted(steps)


def test_ci_logs_the_versions_before_the_tests(tmp_path):
    """Issue 20: CI passed with a PyYAML build a fresh install did not get. .ci/run prints
    python, torch, triton and `pip freeze` before running the README's test command. Run
    here with a python3 that only logs what it is asked to do."""
    import os
    import stat

    log = tmp_path / "calls.log"
    stub = tmp_path / "bin" / "python3"
    stub.parent.mkdir()
    stub.write_text(f'#!/bin/sh\necho "$*" >> {log}\n')
    stub.chmod(stub.stat().st_mode | stat.S_IEXEC)
    env = {**os.environ, "PATH": f"{stub.parent}{os.pathsep}{os.environ['PATH']}"}
    env.pop("PYTHON", None)
    out = subprocess.run(["bash", str(ROOT / ".ci" / "run")], capture_output=True, text=True, timeout=60, env=env)
    assert out.returncode == 0, out.stderr[-2000:]
    calls = log.read_text().splitlines()
    pytest_args = _readme_test_command()[-1].split()[1:]
    assert calls[-1] == " ".join(pytest_args)  # the README's command, last
    assert any(c.startswith("-m pip install") and ".[test]" in c for c in calls)
    shown = calls[:-1]
    assert "--version" in shown and "-m pip freeze" in shown
    assert any("import torch" in c for c in shown) and any("import triton" in c for c in shown)
    assert "== tested with" in out.stdout
