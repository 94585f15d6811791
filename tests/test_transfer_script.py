"""benchmarks/transfer.py end to end on the fake engine: results are saved after every run, and a
call stopped by SIGTERM (KeyboardInterrupt) or killed outright is resumed by the same command,
with nothing that finished run again."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from conftest import ROOT, FakeEngine, Killed, load_script

ARGS = ["--small", "--problems", "gelu,layernorm", "--budget-evals", "3", "--rounds", "2"]


def _engine(monkeypatch: pytest.MonkeyPatch, stop: tuple[Path, int] | None, exc: type[BaseException] = Killed) -> None:
    """The fake engine; `stop` (run directory, n): raise `exc` once that run has n evaluations."""
    import kernelopt.harness.evaluate as evaluate_mod

    def evaluated(run: Path) -> int:
        events = run / "events.jsonl"
        return sum('"type": "evaluated"' in x or '"type":"evaluated"' in x
                   for x in events.read_text().splitlines()) if events.is_file() else 0

    class Stopping(FakeEngine):
        def evaluate(self, candidates: Any, **kw: Any) -> Any:
            if stop is not None and evaluated(stop[0]) >= stop[1]:
                raise exc()
            return super().evaluate(candidates, **kw)

    monkeypatch.setattr(evaluate_mod, "Engine", lambda problem, **kw: Stopping(problem))


def test_transfer_saves_after_every_run_and_resumes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    transfer = load_script(ROOT / "benchmarks" / "transfer.py", "transfer_script")
    out = tmp_path / "out"

    # 1. SIGTERM (the handler raises KeyboardInterrupt) during B gelu: exit 143, the A runs saved.
    b_gelu = out / "runs" / "B" / "gelu"
    _engine(monkeypatch, stop=(b_gelu, 1), exc=KeyboardInterrupt)
    assert transfer.main([*ARGS, "-o", str(out)]) == 143
    doc = json.loads((out / "transfer.json").read_text())
    assert doc["complete"] is False and set(doc["summary"]["pending"]) == {"gelu", "layernorm"}
    a_gelu = doc["results"]["gelu"]["A"]
    assert a_gelu["evaluations"] == 3 and "B" not in doc["results"]["gelu"]
    assert doc["results"]["layernorm"]["A"]["evaluations"] == 3
    assert "Incomplete: still to do gelu, layernorm" in (out / "transfer.md").read_text()
    assert "run the same command again" in capsys.readouterr().err

    # 2. Killed outright (SIGKILL) in B gelu's resumed run: nothing is caught, what was saved stays.
    _engine(monkeypatch, stop=(b_gelu, 2))
    with pytest.raises(Killed):
        transfer.main([*ARGS, "-o", str(out)])
    assert json.loads((out / "transfer.json").read_text())["results"]["gelu"]["A"] == a_gelu

    # 3. The same command again: the finished A runs are read as they are, B gelu's run resumed.
    _engine(monkeypatch, stop=None)
    assert transfer.main([*ARGS, "-o", str(out)]) == 0
    doc = json.loads((out / "transfer.json").read_text())
    assert doc["complete"] is True and doc["summary"]["problems"] == 2 and not doc["summary"]["pending"]
    assert doc["results"]["gelu"]["A"]["trajectory"] == a_gelu["trajectory"]
    for name in ("gelu", "layernorm"):
        r = doc["results"][name]
        assert r["B"]["evaluations"] == 3 and r["B"]["store_records"] > 0 and r["A"]["evals_to_95"] is not None
    events = [json.loads(x) for x in (out / "runs" / "B" / "gelu" / "events.jsonl").read_text().splitlines()]
    assert [e["type"] for e in events].count("resumed") == 2  # cut twice, resumed twice
    assert "| gelu | elementwise |" in (out / "transfer.md").read_text()
    assert len(doc["calls"]) == 3 and "Measured in 3 calls" in (out / "transfer.md").read_text()
