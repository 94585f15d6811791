"""Importers: real H200 and H100 ncu output (CSV, .ncu-rep, details) and JSON dumps -> Metrics."""

import json
import re
from pathlib import Path

import pytest

from kernelopt.errors import BadInput
from kernelopt.profile import import_metrics
from kernelopt.profile.importers import clean_rule_text, import_file

FX = Path(__file__).parent / "fixtures" / "profile"
EXAMPLES = ["matvec", "rmsnorm", "softmax"]
# The examples profiled on each GPU (benchmarks/profile_fixtures.py; provenance.json in each folder).
PROFILE_SETS = {"NVIDIA H200": FX, "NVIDIA H100 80GB HBM3": FX.parent / "profile_h100"}


@pytest.mark.parametrize("name", EXAMPLES)
@pytest.mark.parametrize("device", sorted(PROFILE_SETS))
def test_csv_and_report_agree(device: str, name: str):
    fx = PROFILE_SETS[device]
    rep = import_file(fx / name / "profile.ncu-rep")
    csv = import_file(fx / name / "raw.csv")
    assert rep.source == "ncu-rep" and csv.source == "ncu-csv"
    assert rep.device == csv.device == device
    assert [k.name for k in rep.kernels] == [k.name for k in csv.kernels] == [f"{name}_kernel"]
    for key, value in rep.combined.items():
        # the CSV shows some values rounded for display (waves 0.39 for 0.3879)
        assert csv.combined[key] == pytest.approx(value, rel=1e-2, abs=1e-6), key


@pytest.mark.parametrize("name", EXAMPLES)
@pytest.mark.parametrize("device", sorted(PROFILE_SETS))
def test_report_matches_committed_live_profile(device: str, name: str):
    """metrics.json was written by NcuProfiler on the GPU; re-reading its report gives the same numbers."""
    from kernelopt.models import Metrics

    fx = PROFILE_SETS[device]
    live = Metrics.model_validate_json((fx / name / "metrics.json").read_text())
    assert live.device == device
    again = import_file(fx / name / "profile.ncu-rep")
    ncu_keys = [k for k in live.kernels[0].metrics if not k.startswith(("static_", "num_"))]
    assert len(ncu_keys) > 60
    for key in ncu_keys:
        assert again.kernels[0].metrics[key].value == pytest.approx(live.kernels[0].metrics[key].value), key


def test_details_page_and_report_rules_agree():
    """Every OPT hint ncu printed on the details page is among the report's structured rule results."""
    m = import_file(FX / "softmax" / "profile.ncu-rep")
    details = (FX / "softmax" / "details.txt").read_text()
    opt_printed = details.count("    OPT   ")
    rules = m.kernels[0].rules
    assert opt_printed == sum(1 for r in rules if r.type == "OPT") > 0
    with_speedup = [r for r in rules if r.est_speedup_pct is not None]
    assert with_speedup and all(r.speedup_type in ("local", "global") for r in with_speedup)
    printed = sorted(float(x) for x in re.findall(r"Speedup: ([\d.]+)%", details))
    assert printed == pytest.approx(sorted(r.est_speedup_pct for r in with_speedup), abs=0.01)
    assert m.rules() == rules  # the classifier's view: the dominant kernel's rules


def test_focus_metrics_are_structured():
    m = import_file(FX / "matvec" / "profile.ncu-rep")
    focus = [f for r in m.kernels[0].rules for f in r.focus_metrics]
    assert focus and all(isinstance(f["name"], str) and isinstance(f["value"], float) for f in focus)


def test_two_kernel_csv_weights_by_duration_and_marks_dominant():
    m = import_file(FX / "probe_h200_torch" / "raw.csv")
    a, b = m.kernels
    assert a.duration_ns == 45952.0 and b.duration_ns == 70400.0
    assert a.time_fraction + b.time_fraction == pytest.approx(1.0)
    assert b.dominant and a.dominant  # within half of the longest: both marked
    assert m.combined["duration_ns"] == a.duration_ns + b.duration_ns
    expect = (a.metrics["dram_throughput_pct"].value * a.duration_ns + b.metrics["dram_throughput_pct"].value * b.duration_ns) / (a.duration_ns + b.duration_ns)
    assert m.combined["dram_throughput_pct"] == pytest.approx(expect)
    assert m.combined["grid_size"] == b.metrics["grid_size"].value  # launch config: the longest kernel's
    assert m.values() == m.combined


def test_short_kernel_is_not_dominant():
    doc = {"metrics": {"big": {"gpu__time_duration.sum": 1000}, "tiny": {"gpu__time_duration.sum": 10}}}
    m = import_file(_write(doc))
    assert [k.dominant for k in m.kernels] == [True, False]


def test_json_dump_with_units_and_plain_values(tmp_path: Path):
    doc = {"device": "NVIDIA H100 80GB HBM3", "metrics": {
        "void k<1>(int)": {"gpu__time_duration.sum": {"value": 2.0, "unit": "us"},
                            "dram__bytes_read.sum": 3.0e6, "dram__bytes_write.sum": 1.0e6,
                            "some__other_metric": 5}}}
    m = import_metrics(_write(doc, tmp_path))
    k = m.kernels[0]
    assert k.name == "k" and k.metrics["duration_ns"].value == 2000.0
    assert k.metrics["dram_bytes"].value == 4.0e6
    assert k.raw["some__other_metric"].value == 5 and k.raw["some__other_metric"].key is None
    # roofline from the datasheet row of H100 SXM: 4e6 bytes / 2 us = 2e12 B/s of 3.35e12
    assert m.roofline is not None and not m.roofline.measured
    assert m.roofline.dram_fraction == pytest.approx(2.0e12 / 3.35e12)
    assert m.combined["dram_roofline_fraction"] == pytest.approx(m.roofline.dram_fraction)


def test_rule_markup_becomes_plain_markdown():
    text = "See @section:LaunchStats:Launch Statistics@ and @url:Guide:https://x.y/z#a@."
    assert clean_rule_text(text) == "See Launch Statistics and [Guide](https://x.y/z#a)."


@pytest.mark.parametrize(
    "content, message",
    [
        ("", "not a recognised metrics file"),
        ("{not json", "malformed JSON"),
        ('{"metrics": []}', "'metrics' object"),
        ('{"metrics": {}}', "'metrics' is empty"),
        ('{"metrics": {"k": {"a__b": [1]}}}', "expected a number"),
    ],
)
def test_bad_json_and_text_inputs(tmp_path: Path, content: str, message: str):
    p = tmp_path / "m.json"
    p.write_text(content)
    with pytest.raises(BadInput, match=message):
        import_file(p)


def test_truncated_csv_names_the_row(tmp_path: Path):
    text = (FX / "softmax" / "raw.csv").read_text()
    p = tmp_path / "t.csv"
    p.write_text(text[: len(text) - 2000])
    with pytest.raises(BadInput, match=r"t.csv: row 3 has \d+ fields, header has \d+ \(truncated"):
        import_file(p)


def test_truncated_or_garbage_report(tmp_path: Path):
    data = (FX / "softmax" / "profile.ncu-rep").read_bytes()
    p = tmp_path / "t.ncu-rep"
    p.write_bytes(data[:5000])
    with pytest.raises(BadInput, match="t.ncu-rep"):
        import_file(p)
    p.write_bytes(b"garbage")
    with pytest.raises(BadInput, match="t.ncu-rep"):
        import_file(p)


def test_missing_file_and_details_csv(tmp_path: Path):
    with pytest.raises(BadInput, match="no such file"):
        import_file(tmp_path / "nope.csv")
    p = tmp_path / "d.csv"
    p.write_text('"ID","Kernel Name","Section Name","Metric Name","Metric Unit","Metric Value"\n"0","k","SOL","Duration","us","1"\n')
    with pytest.raises(BadInput, match="--page raw"):
        import_file(p)


def _write(doc: dict, tmp_path: Path | None = None) -> Path:
    import tempfile

    folder = tmp_path or Path(tempfile.mkdtemp())
    p = folder / "dump.json"
    p.write_text(json.dumps(doc))
    return p


def test_kernelopt_metrics_json_round_trips_through_import(tmp_path):
    from kernelopt.profile import import_metrics

    original = import_metrics(FX / "softmax" / "raw.csv")
    saved = tmp_path / "metrics.json"
    saved.write_text(original.model_dump_json())
    again = import_metrics(saved)
    assert again.values() == original.values()
    assert [r.rule for r in again.rules()] == [r.rule for r in original.rules()]


def test_invalid_kernelopt_metrics_json_names_the_field(tmp_path):
    from kernelopt.errors import BadInput
    from kernelopt.profile import import_metrics

    bad = tmp_path / "metrics.json"
    bad.write_text('{"source": "nope", "kernels": []}')
    with pytest.raises(BadInput, match="source"):
        import_metrics(bad)
