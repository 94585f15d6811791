"""Issue 14: metrics files that broke the promise of one line and exit 2; whole ncu rule messages;
ncu's own reader when the ncu-report package is missing (issue 10)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from kernelopt.cli import main
from kernelopt.errors import BadInput

FIX = Path(__file__).parent / "fixtures" / "profile"
REP = FIX / "matvec" / "profile.ncu-rep"


def cli(*args: str):
    return CliRunner().invoke(main, list(args))


def one_line_exit_2(res, needle: str) -> None:
    assert res.exit_code == 2, res.output
    assert "Traceback" not in res.output and "ValidationError" not in res.output
    assert len(res.output.strip().splitlines()) == 1 and needle in res.output


@pytest.mark.parametrize("cut", [20_000, 80_000, 100_000, 120_000, 140_000])
def test_truncated_ncu_rep_is_one_line(tmp_path: Path, cut: int) -> None:
    path = tmp_path / f"cut{cut}.ncu-rep"
    path.write_bytes(REP.read_bytes()[:cut])
    one_line_exit_2(cli("profile", "--import", str(path)), path.name)
    one_line_exit_2(cli("diagnose", "--metrics", str(path)), path.name)


def test_json_dump_with_text_metric_value(tmp_path: Path) -> None:
    path = tmp_path / "dump.json"
    path.write_text(json.dumps({"metrics": {"k": {"dram__throughput.avg.pct_of_peak_sustained_elapsed": "abc",
                                                  "gpu__time_duration.sum": 1000}}}))
    res = cli("profile", "--import", str(path))
    one_line_exit_2(res, "'abc' is not a number")
    assert "dram_throughput_pct" in res.output


def test_rule_messages_are_kept_whole() -> None:
    from kernelopt.profile.importers import read_ncu_rep

    rules = [r for k in read_ncu_rep(REP) for r in k.rules]
    longest = max(rules, key=lambda r: len(r.message))
    assert len(longest.message) > 300
    flat = lambda text: " ".join(text.split())  # noqa: E731 - the terminal view wraps lines
    out = flat(cli("profile", "--import", str(REP)).output)
    shown = [r for r in rules if r.type == "OPT"]
    assert any(flat(r.message) in out for r in shown)
    for r in sorted(shown, key=lambda r: -(r.est_speedup_pct or 0))[:3]:
        assert flat(r.message) in out, r.rule
    diag = json.loads(cli("diagnose", "--metrics", str(REP), "--json").output)
    text = flat(cli("diagnose", "--metrics", str(REP)).output)
    for r in diag["primary"]["ncu_rules"]:
        assert flat(r["message"]) in text


def test_ncu_report_from_the_nsight_compute_installation(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without the pip package, the reader that ships in Nsight Compute's extras/python is used."""
    from kernelopt.profile import importers

    install = tmp_path / "cuda" / "nsight-compute-2099.1.0"
    extras = install / "extras" / "python"
    extras.mkdir(parents=True)
    (extras / "ncu_report.py").write_text("SHIPPED_WITH_NSIGHT = True\n"
                                         "def load_report(path):\n    raise RuntimeError('fake reader')\n")
    monkeypatch.setitem(sys.modules, "ncu_report", None)  # `import ncu_report` now fails
    monkeypatch.setenv("CUDA_HOME", str(tmp_path / "cuda"))
    monkeypatch.setattr("kernelopt.harness.envinfo.find_tool", lambda name: None)
    monkeypatch.setattr(sys, "path", list(sys.path))
    assert extras in importers.nsight_python_dirs()
    module = importers.ncu_report_module()
    assert getattr(module, "SHIPPED_WITH_NSIGHT", False)
    with pytest.raises(BadInput, match="fake reader"):
        importers._read_ncu_rep_here(REP)  # the child's reader (read_ncu_rep runs it in a child process)


@pytest.mark.parametrize("body, words", [("os.kill(os.getpid(), signal.SIGSEGV)", "crashed"),
                                         ("raise RuntimeError('fake reader')", "fake reader")])
def test_a_report_reader_that_crashes_is_a_bad_report_not_a_dead_caller(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                        body: str, words: str) -> None:
    """The reader is native code: on 4 H200s Nsight Compute's own reader killed a suite run with SIGSEGV
    right after ncu wrote a report. Read in a child process, a crash (or an error) is one line of BadInput."""
    from kernelopt.profile import importers

    fake = tmp_path / "fake_reader"
    (fake / "ncu_report").mkdir(parents=True)
    (fake / "ncu_report" / "__init__.py").write_text(f"import os, signal\ndef load_report(path):\n    {body}\n")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in (str(fake), os.environ.get("PYTHONPATH", "")) if p))
    with pytest.raises(BadInput) as exc:
        importers.read_ncu_rep(REP)
    message = str(exc.value)
    assert words in message and "\n" not in message and str(REP.name) in message


def test_no_reader_anywhere_says_what_was_tried(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from kernelopt.profile import importers

    monkeypatch.setitem(sys.modules, "ncu_report", None)
    monkeypatch.setattr(importers, "nsight_python_dirs", lambda: [])
    with pytest.raises(BadInput, match="ncu-report package.*no Nsight Compute extras/python found"):
        importers._read_ncu_rep_here(REP)


def test_ncu_beside_a_real_install_is_found(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from kernelopt.profile import importers

    install = tmp_path / "nsight-compute-2099.1.0"
    (install / "extras" / "python").mkdir(parents=True)
    (install / "extras" / "python" / "ncu_report.py").write_text("")
    (install / "ncu").write_text("")
    monkeypatch.setattr("kernelopt.harness.envinfo.find_tool", lambda name: str(install / "ncu"))
    monkeypatch.delenv("CUDA_HOME", raising=False)
    assert importers.nsight_python_dirs()[0] == install / "extras" / "python"


def test_help_texts_agree_on_missing_ncu() -> None:
    root = Path(__file__).parents[1]
    readme = " ".join((root / "README.md").read_text().split())
    assert "no `ncu` for a live `profile`/`diagnose` is exit 2" in readme
    for cmd in ("profile", "diagnose"):
        text = " ".join(cli(cmd, "--help").output.split())
        assert "2: bad input" in text and "ncu missing" in text, cmd
        assert "1: a GPU/ncu" not in text
