"""`kernelopt knobs CANDIDATE [--json]`."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from kernelopt.cli import main
from kernelopt.optimize.knobs import discover_knobs

ROOT = Path(__file__).resolve().parents[1]
MATVEC = ROOT / "examples" / "matvec" / "kernel.py"
AUTOTUNED = ROOT / "tests" / "fixtures" / "knobs" / "autotuned.py"


def run(*args: str):
    return CliRunner().invoke(main, list(args))


def test_json_lists_every_knob_with_its_fields() -> None:
    result = run("knobs", str(MATVEC), "--json")
    assert result.exit_code == 0, result.output
    rows = json.loads(result.output)
    expected = discover_knobs(MATVEC.read_text(), str(MATVEC))
    assert [r["name"] for r in rows] == [k.name for k in expected]
    by_name = {r["name"]: r for r in rows}
    assert {"name", "value", "kernel", "line", "domain"} <= set(by_name["BLOCK_M"])
    assert by_name["BLOCK_M"]["value"] == 16 and by_name["BLOCK_M"]["kernel"] == "matvec_kernel"
    assert by_name["num_warps"]["domain"] == [1, 2, 4, 8, 16, 32]


def test_json_value_is_null_where_the_autotuner_decides() -> None:
    rows = {r["name"]: r for r in json.loads(run("knobs", str(AUTOTUNED), "--json").output)}
    assert rows["scale_kernel.BLOCK"]["value"] is None
    assert rows["config1.BLOCK"]["value"] == 256


def test_table_on_a_terminal() -> None:
    result = run("knobs", str(MATVEC))
    assert result.exit_code == 0
    lines = result.output.splitlines()
    assert lines[0].split()[:4] == ["knob", "value", "kernel", "line"]
    block = next(line for line in lines if line.startswith("BLOCK_M "))
    assert block.split()[:4] == ["BLOCK_M", "16", "matvec_kernel", "30"]
    assert lines[-1] == f"{len(discover_knobs(MATVEC.read_text()))} knobs"


def test_bad_files_are_one_line_and_exit_2(tmp_path: Path) -> None:
    missing = run("knobs", str(tmp_path / "nope.py"))
    assert missing.exit_code == 2
    assert missing.output.strip().splitlines() == [f"kernelopt: {tmp_path / 'nope.py'}: no such candidate file"]
    bad = tmp_path / "bad.py"
    bad.write_text("import triton\ndef f(:\n")
    broken = run("knobs", str(bad), "--json")
    assert broken.exit_code == 2
    # kernelopt's part of the message; what follows is CPython's words, which change between versions.
    assert f"{bad}:2: syntax error" in json.loads(broken.stdout)["error"]["message"]
    # Not a candidate (issue 20: exit 0, "no knobs found"): exit 2, as `check` says it.
    plain = tmp_path / "plain.py"
    plain.write_text("x = 1\n")
    res = run("knobs", str(plain))
    assert res.exit_code == 2 and "not a candidate" in res.stderr
    assert run("check", str(ROOT / "examples" / "matvec" / "problem.py"), "--kernel", str(plain)).exit_code == 2
