"""Strategy.transform in packs: schema, `strategies validate` resolving it, `strategies show`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from transform_fixtures import NAME, fixture_transforms  # noqa: F401 - pytest fixture

from kernelopt.cli import main
from kernelopt.models.strategy import Strategy, StrategyTransform
from kernelopt.strategies import check_pack, load_pack, validate_packs

PACK = """\
pack: {name: transform-pack}
strategies:
  - id: mark-the-kernel
    title: Mark the kernel
    backend: triton
    categories: [latency]
    transform:
      name: TRANSFORM
      params: PARAMS
      requires: [triton, "!dot"]
"""


def pack(tmp_path: Path, name: str = NAME, params: str = "{MARK: 2}") -> Path:
    p = tmp_path / "pack.yaml"
    p.write_text(PACK.replace("TRANSFORM", name).replace("PARAMS", params))
    return p


def test_transform_alone_is_enough_and_requires_is_checked() -> None:
    s = Strategy(id="x", title="t", backend="triton", categories=["dram"],
                 transform=StrategyTransform(name="rows_per_program", requires=["row_loop", "!dot"]))
    assert s.transform is not None and s.transform.holds({"row_loop"}) == (True, "requires row_loop, !dot")
    assert s.transform.holds({"row_loop", "dot"}) == (False, "requires no dot")
    assert s.transform.holds(set()) == (False, "requires row_loop")
    with pytest.raises(ValueError, match="not a source feature"):
        StrategyTransform(name="x", requires=["row_loops"])
    with pytest.raises(ValueError, match="`transform`"):
        Strategy(id="x", title="t", backend="triton", categories=["dram"])


def test_validate_resolves_the_transform_and_its_params(tmp_path: Path, fixture_transforms) -> None:
    ok = validate_packs([pack(tmp_path)])[0]
    assert ok.ok, ok.errors
    loaded = load_pack(pack(tmp_path))
    assert loaded.strategies[0].transform.params == {"MARK": 2}

    unknown = validate_packs([pack(tmp_path, name="no_such_transform")])[0]
    assert not unknown.ok and len(unknown.errors) == 1
    assert ":7: strategies.0.transform: transform 'no_such_transform': unknown transform" in unknown.errors[0]
    # Loading for a run does not import transforms: the optimizer reports an unknown one.
    assert check_pack(pack(tmp_path, name="no_such_transform"))[1].ok

    bad_param = validate_packs([pack(tmp_path, params="{MARKS: 2}")])[0]
    assert not bad_param.ok and "unknown parameter 'MARKS'" in bad_param.errors[0]
    bad_value = validate_packs([pack(tmp_path, params="{MARK: 9}")])[0]
    assert not bad_value.ok and "outside its domain" in bad_value.errors[0]


def test_cli_validate_unknown_transform_one_line_exit_2(tmp_path: Path) -> None:
    res = CliRunner().invoke(main, ["strategies", "validate", str(pack(tmp_path, name="no_such_transform"))])
    assert res.exit_code == 2
    lines = [line for line in res.output.splitlines() if line.strip()]
    assert len(lines) == 1 and "unknown transform" in lines[0], res.output


def test_cli_show_prints_the_transform(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fixture_transforms) -> None:
    monkeypatch.setenv("KERNELOPT_STRATEGY_PATH", str(pack(tmp_path)))
    res = CliRunner().invoke(main, ["strategies", "show", "mark-the-kernel"])
    assert res.exit_code == 0, res.output
    assert f"transform: {NAME}" in res.output and "MARK=2" in res.output and "requires: triton, !dot" in res.output
    data = json.loads(CliRunner().invoke(main, ["strategies", "show", "mark-the-kernel", "--json"]).stdout)
    assert data["transform"] == {"name": NAME, "params": {"MARK": 2}, "requires": ["triton", "!dot"]}
