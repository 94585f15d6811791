"""`kernelopt transforms`: the survey (where each transform applies, why others do not) and --apply."""

from __future__ import annotations

import ast
import json
from pathlib import Path

from click.testing import CliRunner
from transform_fixtures import NAME, fixture_transforms  # noqa: F401 - pytest fixture

from kernelopt.cli import main
from kernelopt.optimize.transforms.survey import apply_named, survey

ROOT = Path(__file__).resolve().parent.parent
SOFTMAX = ROOT / "examples" / "softmax" / "kernel.py"
NOT_TRITON = "import torch\n\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n        return x\n"


def test_survey_reports_sites_and_reasons_and_never_raises(fixture_transforms) -> None:
    reports = {(r.transform, r.site): r for r in survey(SOFTMAX.read_text(), str(SOFTMAX))}
    hit = reports[(NAME, "softmax_kernel")]
    assert hit.applies and hit.params == {"MARK": 1} and hit.kernel == "softmax_kernel"
    # sites() raised: one declining report with the exception as reason, no traceback
    boom = reports[("exploding", None)]
    assert not boom.applies and boom.reason == "sites() raised RuntimeError: boom in sites"
    # the precondition (requires: [triton]) declines a file without a kernel, before sites() runs
    plain = {r.transform: r for r in survey(NOT_TRITON)}
    assert not plain[NAME].applies and plain[NAME].reason.startswith("needs triton")


def test_apply_named_rewrites_and_rejects(fixture_transforms, tmp_path: Path) -> None:
    source = SOFTMAX.read_text()
    new, report, used = apply_named(source, NAME, None, {"MARK": "3"})
    assert report.site == "softmax_kernel" and used == {"MARK": 3} and "_ko_marker = 3" in new
    ast.parse(new)
    from kernelopt.errors import BadInput

    for name, site, params, text in [
        ("breaking", None, {}, "does not parse"),
        ("no_such", None, {}, "unknown transform"),
        (NAME, "nope", {}, "no site 'nope'"),
        (NAME, None, {"MARK": "9"}, "outside its domain"),
    ]:
        try:
            apply_named(source, name, site, params)
        except BadInput as exc:
            assert text in str(exc), (name, str(exc))
        else:
            raise AssertionError(f"{name} did not fail")
    # once applied, the fixture declines the marked kernel, with its reason
    again = [r for r in survey(new) if r.transform == NAME]
    assert not again[0].applies and again[0].reason == "already marked"


def test_cli_lists_json_and_applies(fixture_transforms, tmp_path: Path) -> None:
    res = CliRunner().invoke(main, ["transforms", str(SOFTMAX), "--json"])
    assert res.exit_code == 0, res.output
    rows = json.loads(res.stdout)
    assert {"transform", "site", "applies", "reason", "params"} <= set(rows[0])
    assert any(r["transform"] == NAME and r["site"] == "softmax_kernel" and r["applies"] for r in rows)
    human = CliRunner().invoke(main, ["transforms", str(SOFTMAX)])
    assert "softmax_kernel" in human.output and "sites() raised RuntimeError" in human.output

    out = tmp_path / "new.py"
    res = CliRunner().invoke(main, ["transforms", str(SOFTMAX), "--apply", f"{NAME}@softmax_kernel",
                                    "-p", "MARK=2", "-o", str(out)])
    assert res.exit_code == 0, res.output
    assert "_ko_marker = 2" in out.read_text()

    bad = CliRunner().invoke(main, ["transforms", str(SOFTMAX), "--apply", "breaking", "-o", str(tmp_path / "b.py")])
    assert bad.exit_code == 2 and "does not parse" in bad.output and "Traceback" not in bad.output
    assert not (tmp_path / "b.py").exists()
    no_out = CliRunner().invoke(main, ["transforms", str(SOFTMAX), "--apply", NAME])
    assert no_out.exit_code == 2 and "-o" in no_out.output
