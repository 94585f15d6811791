"""Loading, validating and overriding packs; the `strategies` CLI."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner

from kernelopt.cli import main
from kernelopt.errors import BadInput
from kernelopt.strategies import ENV_PATH, check_pack, load_pack, load_strategies, validate_packs

FIXTURES = Path(__file__).parent / "fixtures" / "strategies"

GOOD = """\
pack: {name: my-pack, version: 2}
strategies:
  - id: my-new-idea
    title: Something new
    backend: triton
    categories: [latency]
    when: "stall_long_scoreboard > 4"
    knobs:
      - {param: "BLOCK_*", scale: [0.5, 2]}
  - id: tune-num-warps
    title: Local override of the built-in
    backend: triton
    categories: [occupancy]
    change: only ever try 4 warps here
"""

BAD = """\
pack: {name: bad-pack}
strategies:
  - id: Not_Kebab
    title: x
    backend: rocm
    categories: [dram, memory]
    colour: red
    change: y
  - id: two
    title: y
    backend: cuda
    categories: [compute]
  - id: three
    title: z
    backend: cuda
    categories: [compute]
    when: "dram_thruput > 3"
    change: z
  - id: three
    title: z
    backend: cuda
    categories: [compute]
    avoid_when: "__import__('os').system('true')"
    change: z
"""


def write(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def test_bad_pack_reports_file_line_and_field_for_every_error(tmp_path):
    path = write(tmp_path, "bad.yaml", BAD)
    _, report = check_pack(path)
    assert not report.ok
    errs = report.errors
    expected = [
        (3, "strategies.0.id", "kebab-case"),
        (5, "strategies.0.backend", "triton"),
        (6, "strategies.0.categories.1", "dram"),
        (7, "strategies.0.colour", "Extra inputs"),
        (9, "strategies.1", "`change`"),
        (17, "strategies.2.when", "unknown metric key(s): dram_thruput"),
        (19, "strategies.3.id", "duplicate id 'three'"),
        (23, "strategies.3.avoid_when", "only max(), min() and abs() may be called"),
    ]
    assert len(errs) == len(expected), errs
    for err, (line, field, text) in zip(errs, expected):
        assert err.startswith(f"{path}:{line}: {field}: "), err
        assert text in err


def test_load_pack_raises_one_line_bad_input(tmp_path):
    path = write(tmp_path, "bad.yaml", BAD)
    with pytest.raises(BadInput) as exc:
        load_pack(path)
    msg = str(exc.value)
    assert "\n" not in msg and msg.startswith(f"{path}:3: strategies.0.id") and "7 more" in msg


def test_knob_validation(tmp_path):
    text = GOOD.replace('{param: "BLOCK_*", scale: [0.5, 2]}', '{param: "BLOCK-M", values: [1], scale: [0]}')
    _, report = check_pack(write(tmp_path, "k.yaml", text))
    joined = "\n".join(report.errors)
    assert "strategies.0.knobs.0.param" in joined and "strategies.0.knobs.0.scale" in joined


def test_subcauses_are_snake_case(tmp_path):
    text = GOOD.replace("categories: [latency]", "categories: [latency]\n    subcauses: [long_scoreboard, memory-latency]")
    _, report = check_pack(write(tmp_path, "s.yaml", text))
    assert len(report.errors) == 1 and "strategies.0.subcauses.1" in report.errors[0] and "snake_case" in report.errors[0]


def test_malformed_yaml_and_missing_file(tmp_path):
    reports = validate_packs([write(tmp_path, "m.yaml", "pack: [1,\n"), tmp_path / "nope.yaml"])
    assert not reports[0].ok and "malformed YAML" in reports[0].errors[0]
    assert "no such file" in reports[1].errors[0]


def test_env_path_pack_overrides_builtin_and_is_reported(tmp_path, monkeypatch):
    d = tmp_path / "packs"
    d.mkdir()
    write(d, "mine.yaml", GOOD)
    monkeypatch.setenv(ENV_PATH, os.pathsep.join([str(d), str(tmp_path / "also-missing-is-an-error")]))
    with pytest.raises(BadInput, match=ENV_PATH):
        load_strategies(entry_points=False)
    monkeypatch.setenv(ENV_PATH, str(d))
    loaded = load_strategies(entry_points=False)
    assert loaded.strategies["my-new-idea"].pack == "my-pack"
    assert loaded.strategies["tune-num-warps"].pack == "my-pack"
    (ov,) = loaded.overrides
    assert (ov.strategy, ov.old_pack, ov.new_pack) == ("tune-num-warps", "triton-core", "my-pack")
    assert ov.new_path == str(d / "mine.yaml")


def test_bad_pack_on_env_path_fails_loading(tmp_path, monkeypatch):
    monkeypatch.setenv(ENV_PATH, str(write(tmp_path, "bad.yaml", BAD)))
    with pytest.raises(BadInput, match="bad.yaml:3"):
        load_strategies(entry_points=False)


# ----------------------------------------------------------------------------- CLI


def test_cli_list_json_fields_and_filters(monkeypatch):
    monkeypatch.delenv(ENV_PATH, raising=False)
    result = CliRunner().invoke(main, ["strategies", "list", "--backend", "cuda", "--category", "onchip_memory", "--json"])
    assert result.exit_code == 0, result.output
    items = json.loads(result.stdout)
    assert items and all({"id", "title", "backend", "categories", "pack"} <= set(i) for i in items)
    assert all(i["backend"] in ("cuda", "any") and "onchip_memory" in i["categories"] for i in items)
    assert "cuda-shared-memory-padding" in {i["id"] for i in items}


def test_cli_list_reports_override(tmp_path, monkeypatch):
    d = tmp_path / "packs"
    d.mkdir()
    write(d, "mine.yaml", GOOD)
    monkeypatch.setenv(ENV_PATH, str(d))
    result = CliRunner().invoke(main, ["strategies", "list", "--backend", "triton"])
    assert result.exit_code == 0
    assert "tune-num-warps" in result.stderr and "overridden by pack 'my-pack'" in result.stderr
    assert "my-new-idea" in result.stdout


def test_cli_show(monkeypatch):
    monkeypatch.delenv(ENV_PATH, raising=False)
    result = CliRunner().invoke(main, ["strategies", "show", "grouped-tile-order"])
    assert result.exit_code == 0
    assert "GROUP_SIZE_M" in result.output and "l2_hit_rate_pct" in result.output
    data = json.loads(CliRunner().invoke(main, ["strategies", "show", "split-k", "--json"]).stdout)
    assert data["id"] == "split-k" and data["knobs"][0]["param"] == "SPLIT_K"
    missing = CliRunner().invoke(main, ["strategies", "show", "grouped-tile-ordr"])
    assert missing.exit_code == 2 and "did you mean grouped-tile-order" in missing.stderr
    assert "Traceback" not in missing.stderr


def test_cli_validate_exit_codes(tmp_path):
    good = write(tmp_path, "good.yaml", GOOD)
    ok = CliRunner().invoke(main, ["strategies", "validate", str(good)])
    assert ok.exit_code == 0 and "ok (my-pack, 2 strategies)" in ok.output
    bad = write(tmp_path, "bad.yaml", BAD)
    res = CliRunner().invoke(main, ["strategies", "validate", str(good), str(bad)])
    assert res.exit_code == 2
    assert f"{bad}:17: strategies.2.when:" in res.output
    data = json.loads(CliRunner().invoke(main, ["strategies", "validate", "--json", str(bad)]).stdout)
    assert data[0]["ok"] is False and len(data[0]["errors"]) == 8


def test_cli_validate_builtin_directory():
    res = CliRunner().invoke(main, ["strategies", "validate", str(Path(__file__).parent.parent / "strategies")])
    assert res.exit_code == 0, res.output
    assert "triton-core" in res.output and "cuda-core" in res.output


# ----------------------------------------------------------------------------- third-party pack


def test_installed_third_party_pack_loads_through_entry_point(tmp_path):
    """pip-install the example pack into a target dir, then load it in a child process."""
    src = tmp_path / "src"
    shutil.copytree(FIXTURES / "example_pack", src)  # pip builds in place: keep the checkout clean
    target = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--no-index",
         "--target", str(target), str(src)],
        check=True, capture_output=True, text=True,
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(target), os.environ.get("PYTHONPATH", "")]))
    env.pop(ENV_PATH, None)
    proc = subprocess.run(
        [sys.executable, "-m", "kernelopt", "strategies", "list", "--json"],
        capture_output=True, text=True, env=env,
    )
    assert proc.returncode == 0, proc.stderr
    items = {i["id"]: i for i in json.loads(proc.stdout)}
    assert items["example-warp-specialize"]["pack"] == "example-pack"
    assert items["tune-num-warps"]["pack"] == "example-pack"
    assert "'tune-num-warps' of pack 'triton-core' overridden by pack 'example-pack'" in proc.stderr


def test_entry_point_forms_and_failures(tmp_path, monkeypatch):
    """An entry point may give a path, a list of paths or a callable; a broken one is bad input."""
    import importlib.metadata as md

    pack = write(tmp_path, "ep.yaml", GOOD)
    write(tmp_path, "fake_ep_module.py", textwrap.dedent(f"""
        PATHS = [{str(pack)!r}]
        def as_callable():
            return {str(tmp_path)!r}
        def broken():
            raise RuntimeError("boom")
        NOT_A_PATH = 42
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delenv(ENV_PATH, raising=False)

    def use(*values: str) -> None:
        eps = [md.EntryPoint(name=f"ep{i}", value=v, group="kernelopt.strategies") for i, v in enumerate(values)]
        monkeypatch.setattr(md, "entry_points", lambda group=None: eps if group == "kernelopt.strategies" else [])

    use("fake_ep_module:PATHS", "fake_ep_module:as_callable")
    loaded = load_strategies()
    # the same file twice (list, then the directory through a callable): the second overrides the first
    assert [p.origin for p in loaded.packs][-2:] == ["entry-point:ep0", "entry-point:ep1"]
    assert loaded.strategies["my-new-idea"].pack == "my-pack"
    assert {o.strategy for o in loaded.overrides} == {"tune-num-warps", "my-new-idea"}
    use("fake_ep_module:broken")
    with pytest.raises(BadInput, match="entry point 'ep0'.*RuntimeError: boom"):
        load_strategies()
    use("fake_ep_module:NOT_A_PATH")
    with pytest.raises(BadInput, match="returned int, expected a path"):
        load_strategies()
