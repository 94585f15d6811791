"""A transform whose sites() or apply() hangs, raises or kills its process is a declining line
(`kernelopt transforms`), a one-line exit 2 (`--apply`) or a failed proposal with its reason
(`--optimizer strategies`, the `proposal_failed` events) - never a crash or a hung run.

The misbehaving transforms are test fixtures (transform_fixtures.STUCK); the time limit on a
plug-in call is cut to STUCK_TIMEOUT_S seconds, so each hang costs that long."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from transform_fixtures import NAME, STUCK_TIMEOUT_S, fixture_transforms, stuck_transforms  # noqa: F401 - fixtures

from kernelopt.cli import main
from kernelopt.optimize.transforms.survey import TransformFailed, apply_named, survey

ROOT = Path(__file__).resolve().parent.parent
SOFTMAX = ROOT / "examples" / "softmax" / "kernel.py"
MATVEC = ROOT / "examples" / "matvec"
# What each misbehaving transform's failure says (sites() of hanging_sites; apply() of the others).
REASONS = {
    "hanging_sites": f"sites() did not finish within {STUCK_TIMEOUT_S:g} s",
    "hanging_apply": f"apply() did not finish within {STUCK_TIMEOUT_S:g} s",
    "raising_apply": "apply() raised KeyError: 'missing key'",
    "dying_apply": "apply() ended its process (exit code 3)",
}


def sid(name: str) -> str:
    """The test strategy that carries transform `name` (ids are kebab-case)."""
    return "s-" + name.replace("_", "-")


# Generous: a hang must cost about the time limit, never more than a few of them.
WALL_LIMIT_S = 6 * STUCK_TIMEOUT_S + 10


def test_survey_declines_a_hanging_sites_with_its_reason(stuck_transforms) -> None:
    start = time.monotonic()
    reports = {r.transform: r for r in survey(SOFTMAX.read_text(), str(SOFTMAX), names=["hanging_sites", NAME])}
    assert time.monotonic() - start < WALL_LIMIT_S
    assert not reports["hanging_sites"].applies and reports["hanging_sites"].reason == REASONS["hanging_sites"]
    assert reports[NAME].applies  # the others are surveyed as usual


@pytest.mark.parametrize("name", ["hanging_apply", "raising_apply", "dying_apply", "hanging_sites"])
def test_apply_named_fails_in_one_line(stuck_transforms, name: str) -> None:
    start = time.monotonic()
    with pytest.raises(TransformFailed) as info:
        apply_named(SOFTMAX.read_text(), name, None, {})
    assert time.monotonic() - start < WALL_LIMIT_S
    text = str(info.value)
    assert REASONS[name] in text and "\n" not in text, text


def test_a_guarded_call_returns_what_the_plug_in_returns(fixture_transforms) -> None:
    # the normal path is unchanged: sites and the rewritten source come back from the child
    new, report, used = apply_named(SOFTMAX.read_text(), NAME, None, {"MARK": 2})
    assert report.site == "softmax_kernel" and "_ko_marker = 2" in new and used == {"MARK": 2}


def test_the_optimizer_records_each_as_a_failed_proposal_and_goes_on(stuck_transforms, tmp_path: Path) -> None:
    from test_strategies_optimizer import context, strategies, strategy

    from kernelopt.optimize.transforms.optimizer import StrategiesOptimizer

    opt = StrategiesOptimizer(strategies=strategies(*(strategy(sid(n), n) for n in REASONS),
                                                    strategy("mark-kernel", NAME, {"MARK": 2})))
    start = time.monotonic()
    props = opt.propose(context(tmp_path))
    assert time.monotonic() - start < 2 * WALL_LIMIT_S
    failed = {p.strategy: p.failed for p in props if p.failed}
    assert set(failed) == {sid(n) for n in REASONS}, failed
    for name, reason in REASONS.items():
        assert reason in failed[sid(name)], (name, failed[sid(name)])
    good = [p for p in props if not p.failed]
    assert good[0].strategy == "mark-kernel" and "_ko_marker = 2" in good[0].source
    # not tried again on the lineage: no second wait for the hung ones
    again = opt.propose(context(tmp_path, failed=[p for p in props if p.failed]))
    assert not any(p.failed for p in again)


def test_cli_reports_each_failure_in_one_line(stuck_transforms, tmp_path: Path) -> None:
    res = CliRunner().invoke(main, ["transforms", str(SOFTMAX)])
    assert res.exit_code == 0, res.output
    lines = [line for line in res.output.splitlines() if line.startswith("hanging_sites ")]
    assert len(lines) == 1 and lines[0].endswith(REASONS["hanging_sites"]), res.output
    rows = json.loads(CliRunner().invoke(main, ["transforms", str(SOFTMAX), "--json"]).stdout)
    assert {"transform": "hanging_sites", "applies": False, "reason": REASONS["hanging_sites"]}.items() \
        <= next(r for r in rows if r["transform"] == "hanging_sites").items()
    for name in ("hanging_apply", "raising_apply", "dying_apply"):
        out = tmp_path / f"{name}.py"
        res = CliRunner().invoke(main, ["transforms", str(SOFTMAX), "--apply", name, "-o", str(out)])
        assert res.exit_code == 2, res.output
        assert len(res.output.strip().splitlines()) == 1 and REASONS[name] in res.output, res.output
        assert "Traceback" not in res.output and not out.exists()


PACK = """\
pack: {name: stuck-transforms}
strategies:
  - id: mark-kernel
    title: Mark the kernel (test transform)
    backend: triton
    categories: [dram]
    transform: {name: marker_statement, params: {MARK: 2}}
""" + "".join(f"""\
  - id: {sid(name)}
    title: {name} (test transform)
    backend: triton
    categories: [dram]
    transform: {{name: {name}}}
""" for name in REASONS)


def test_the_run_records_the_reasons_in_its_events_and_goes_on(stuck_transforms, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    from conftest import FakeEngine

    import kernelopt.harness.evaluate as evaluate_mod
    from kernelopt.optimize.loop import optimize

    monkeypatch.setattr(evaluate_mod, "Engine", lambda problem, **kw: FakeEngine(problem))
    pack = tmp_path / "pack.yaml"
    pack.write_text(PACK)
    monkeypatch.setenv("KERNELOPT_STRATEGY_PATH", str(pack))
    run = tmp_path / "run"
    state = optimize(MATVEC / "problem.py", MATVEC / "kernel.py", run_dir=run, overrides={"M": "64", "K": "256"},
                     optimizer="strategies", optimizer_options={"transforms": [NAME, *REASONS]},
                     rounds=2, beam=1, proposals_per_member=2, profile=False, experience=False, baselines=())
    assert state.finished
    events = [json.loads(x) for x in (run / "events.jsonl").read_text().splitlines() if x.strip()]
    failed: dict[str, Any] = {e["strategy"]: e["reason"] for e in events if e["type"] == "proposal_failed"}
    assert set(failed) == {sid(n) for n in REASONS}, failed  # each once: never retried
    for name, reason in REASONS.items():
        assert reason in failed[sid(name)]
    marked = [e for e in events if e["type"] == "proposed" and (e.get("proposal") or {}).get("strategy") == "mark-kernel"]
    assert marked and "_ko_marker = 2" in (run / marked[0]["version"] / "kernel.py").read_text()
