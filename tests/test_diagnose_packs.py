"""Rule packs: validation at load (file:line), discovery (--rules-dir, env var, path), safe messages."""

from pathlib import Path

import pytest

from kernelopt.diagnose.classifier import BottleneckClassifier
from kernelopt.diagnose.packs import ENV_VAR, available_packs, format_message, load_pack, load_pack_file
from kernelopt.errors import BadInput

GOOD = """\
pack:
  name: mine
  description: a user pack
rules:
  - id: busy-dram
    category: dram
    subcause: dram_bandwidth
    when: dram_throughput_pct > 50
    message: "DRAM {dram_throughput_pct:.0f}%"
"""


def write(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def test_shipped_packs_load_and_are_listed():
    packs = available_packs()
    assert {"kernelopt", "roofline", "sol4"} <= set(packs)
    for name in ("kernelopt", "roofline", "sol4"):
        pack = load_pack(name)
        assert pack.name == name and pack.rules
        assert all(r.when.names for r in pack.rules)


def test_user_pack_from_rules_dir_and_env_var(tmp_path, monkeypatch):
    d = tmp_path / "packs"
    d.mkdir()
    write(d, "mine.yaml", GOOD)
    assert load_pack("mine", [d]).name == "mine"
    with pytest.raises(BadInput, match="no rule pack of that name"):
        load_pack("mine")
    monkeypatch.setenv(ENV_VAR, str(d))
    pack = load_pack("mine")
    diag = BottleneckClassifier(pack).classify({"dram_throughput_pct": 70})
    assert diag.primary.category == "dram" and diag.primary.message == "DRAM 70%"
    assert diag.rules_pack == "mine"


def test_pack_by_path(tmp_path):
    p = write(tmp_path, "x.yaml", GOOD)
    assert load_pack(str(p)).name == "mine"
    with pytest.raises(BadInput, match="no such rule pack file"):
        load_pack(str(tmp_path / "missing.yaml"))


@pytest.mark.parametrize(
    "bad, expect",
    [
        (GOOD.replace("dram_throughput_pct > 50", "dram_thruput_pct > 50"), r":8: rules\.0\.when: .*unknown metric key.*dram_thruput_pct"),
        (GOOD.replace("dram_throughput_pct > 50", "__import__('os').system('x')"), r":8: rules\.0\.when: .*only max\(\), min\(\) and abs\(\)"),
        (GOOD.replace("category: dram", "category: memory"), r":6: rules\.0\.category"),
        (GOOD.replace("    message: \"DRAM {dram_throughput_pct:.0f}%\"\n", ""), r"rules\.0\.message: Field required"),
        (GOOD + "  - id: busy-dram\n    category: dram\n    when: sm_count > 1\n    message: m\n", "duplicate rule ids: busy-dram"),
        (GOOD.replace("id: busy-dram", "id: Busy Dram"), r"rules\.0\.id"),
        (GOOD.replace("    subcause: dram_bandwidth\n", "    subcause: dram_bandwidth\n    colour: red\n"), r"colour: Extra inputs"),
        ("pack: [1\n", "malformed YAML"),
        ("- just a list\n", "a mapping with 'pack' and 'rules'"),
    ],
)
def test_invalid_packs_fail_at_load_naming_file_line_and_field(tmp_path, bad, expect):
    p = write(tmp_path, "bad.yaml", bad)
    with pytest.raises(BadInput, match=expect) as info:
        load_pack_file(p)
    assert str(p) in str(info.value)
    assert info.value.exit_code == 2


def test_labels_must_be_declared(tmp_path):
    text = GOOD.replace("category: dram", "label: memory")
    with pytest.raises(BadInput, match="label 'memory' is not in pack.labels"):
        load_pack_file(write(tmp_path, "a.yaml", text))
    text = text.replace("  description: a user pack\n", "  description: a user pack\n  labels: {memory: dram}\n")
    pack = load_pack_file(write(tmp_path, "b.yaml", text))
    d = BottleneckClassifier(pack).classify({"dram_throughput_pct": 90})
    assert (d.primary.label, d.primary.category) == ("memory", "dram")


def test_messages_substitute_only_bare_names():
    assert format_message("a {x:.1f} b {y}", {"x": 1.234}) == "a 1.2 b ?"
    # Attribute and index access are not substituted (no way into Python objects).
    assert format_message("{x.__class__} {x[0]}", {"x": 1.0}) == "{x.__class__} {x[0]}"
    assert format_message("{x:.0%}", {"x": 0.5}) == "50%"


def test_shipped_rules_point_to_shipped_strategies():
    from kernelopt.strategies import load_strategies

    shipped = set(load_strategies(env=False, entry_points=False).strategies)
    for name in ("kernelopt", "roofline", "sol4"):
        for rule in load_pack(name).rules:
            unknown = set(rule.spec.strategies) - shipped
            assert not unknown, f"{name}:{rule.id} points to unknown strategies {sorted(unknown)}"
