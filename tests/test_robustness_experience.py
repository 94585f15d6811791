"""Issue 14: other tools' logs, bad values, `recommend --diagnosis`: each case failed before the fix."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from kernelopt.cli import main
from kernelopt.experience.importers import read_records
from kernelopt.experience.store import ExperienceStore
from kernelopt.models import Situation
from kernelopt.recommend import recommend

FIX = Path(__file__).parent / "fixtures" / "experience"
SKILL_A = FIX / "kernel_opt_skill_experiences.json"  # synthetic, kernel-opt-skill's layout (integer ids)
SKILL_B = FIX / "kernel_opt_skill_experiences_b.json"  # a second log that also starts at id 1
PROFILE = Path(__file__).parent / "fixtures" / "profile"


def cli(*args: str, env: dict[str, str] | None = None):
    return CliRunner().invoke(main, list(args), env=env)


@pytest.fixture()
def imported(tmp_path: Path) -> ExperienceStore:
    store = ExperienceStore(tmp_path / "e.db")
    store.import_(SKILL_A, embed=False)
    store.import_(SKILL_B, embed=False)
    yield store
    store.close()


# --- kernel-opt-skill logs


def test_integer_ids_import_and_add(tmp_path: Path) -> None:
    db = str(tmp_path / "e.db")
    res = cli("experience", "import", str(SKILL_A), "--db", db, "--no-embed")
    assert res.exit_code == 0, res.output
    assert "read 5 records, 5 new" in res.output
    res = cli("experience", "add", "--json", str(SKILL_B), "--db", db)
    assert res.exit_code == 0, res.output
    records = ExperienceStore(db).list()
    assert len(records) == 6
    # The foreign id is kept as provenance.
    assert {r.source for r in records} >= {"import:kernel_opt_skill_experiences.json#id=1",
                                            "import:kernel_opt_skill_experiences_b.json#id=1"}


def test_foreign_ids_from_two_logs_do_not_collide(tmp_path: Path) -> None:
    with ExperienceStore(tmp_path / "e.db") as store:
        assert store.import_(SKILL_A, embed=False) == (5, 5)
        assert store.import_(SKILL_B, embed=False) == (1, 1)  # its record 1 is another record
        assert store.import_(SKILL_A, embed=False) == (5, 0)  # the same records again: nothing new
        assert store.import_(SKILL_B, embed=False) == (1, 0)


def test_uuid_collision_with_different_content_gets_new_id(tmp_path: Path) -> None:
    rec = {"id": "6f1c2f0e-8a51-4c5e-9d0b-000000000001", "kernel": "softmax", "speedup": 1.2}
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    a.write_text(json.dumps(rec) + "\n")
    b.write_text(json.dumps({**rec, "kernel": "layernorm", "speedup": 1.4}) + "\n")
    with ExperienceStore(tmp_path / "e.db") as store:
        assert store.import_(a, embed=False) == (1, 1)
        assert store.import_(b, embed=False) == (1, 1)
        assert store.import_(b, embed=False) == (1, 0)
        kernels = {r.kernel: r for r in store.list()}
        assert set(kernels) == {"softmax", "layernorm"}
        assert kernels["softmax"].id == rec["id"]
        assert kernels["layernorm"].id != rec["id"] and kernels["layernorm"].source.endswith(f"#id={rec['id']}")


def test_metric_keys_are_mapped_to_the_catalog() -> None:
    matvec = read_records(SKILL_A)[0]
    assert matvec.metrics_before == {"memory_throughput_pct": 41.5, "sm_throughput_pct": 9.8,
                                     "duration_ns": pytest.approx(212000.0), "achieved_occupancy_pct": 23.0}
    assert matvec.metrics_after["achieved_occupancy_pct"] == 61.0
    # A percent stays a percent; a catalog key given directly wins over an alias of it.
    from kernelopt.experience.importers import metric_values

    assert metric_values({"achieved_occupancy": 48.0}, "x") == {"achieved_occupancy_pct": 48.0}
    assert metric_values({"sm_sol_pct": 1.0, "sm_throughput_pct": 2.0}, "x") == {"sm_throughput_pct": 2.0}


# --- imported experience counts in recommend


def test_own_matvec_success_is_in_top_3(imported: ExperienceStore) -> None:
    matvec = next(r for r in imported.list() if r.kernel == "matvec_bf16")
    answer = recommend(Situation(kernel="matrix_vector_product", backend="triton", chip="sm_90",
                                          bottleneck="latency"), n=3, store=imported)
    top = {r.strategy: r for r in answer.recommendations}
    assert "split-k" in top, [r.strategy for r in answer.recommendations]
    assert top["split-k"].records[0] == matvec.id
    assert matvec.id[:8] in top["split-k"].reason and "your measured" in top["split-k"].reason


def test_imported_single_pass_row_successes_are_cited_for_rms_norm(imported: ExperienceStore) -> None:
    norms = {r.id for r in imported.list() if r.strategies == ["single-pass-row-in-registers"]}
    assert len(norms) == 3
    answer = recommend(Situation(kernel="rms_norm", backend="triton", chip="sm_90", bottleneck="dram"), n=3, store=imported)
    top = {r.strategy: r for r in answer.recommendations}
    assert "single-pass-row" in top and "single-pass-row-in-registers" not in top
    rec = top["single-pass-row"]
    assert set(rec.records[:3]) == norms  # the user's own records first
    assert "recorded as single-pass-row-in-registers" in rec.reason
    assert answer.recommendations[0].strategy == "single-pass-row"


def test_names_map_by_meaning_and_keep_the_original(imported: ExperienceStore, tmp_path: Path) -> None:
    gemm = next(r for r in imported.list() if r.kernel == "batched_small_gemm")
    assert gemm.strategies == ["use-tl-dot-tensor-cores"]  # the record keeps its name
    assert [r.id for r in imported.list(strategy="tensor-cores-tl-dot")] == [gemm.id]
    res = cli("experience", "mappings", "--json")
    assert res.exit_code == 0, res.output
    table = json.loads(res.output)
    assert table["strategies"]["use-tl-dot-tensor-cores"]["targets"] == {"*": "tensor-cores-tl-dot"}
    assert table["strategies"]["single-pass-row-in-registers"]["targets"] == {"*": "single-pass-row"}
    assert table["metrics"]["latency_ms"] == {"key": "duration_ns", "scale": 1e6, "fraction_at_most": None,
                                              "file": table["files"][0]}


def test_mapping_is_overridable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    mine = tmp_path / "names.yaml"
    mine.write_text("strategies:\n  use_tl_dot_tensor_cores: tf32-input-precision\n  my-trick: split-k\n")
    res = cli("experience", "mappings", "--json", env={"KERNELOPT_NAME_MAP": str(mine)})
    table = json.loads(res.output)
    assert table["strategies"]["use-tl-dot-tensor-cores"]["targets"] == {"*": "tf32-input-precision"}
    assert table["strategies"]["my-trick"]["file"] == str(mine)
    monkeypatch.setenv("KERNELOPT_NAME_MAP", str(mine))
    from kernelopt.experience.names import load_mappings

    assert load_mappings().strategy("my_trick") == "split-k"
    bad = tmp_path / "bad.yaml"
    bad.write_text("strategies:\n  x: {rocm: y}\n")
    res = cli("experience", "mappings", env={"KERNELOPT_NAME_MAP": str(bad)})
    assert res.exit_code == 2 and "bad.yaml:2" in res.output and "Traceback" not in res.output


# --- bad values accepted silently


@pytest.mark.parametrize("args, needle", [
    (["--kernel", "k", "--metrics-before", "X=abc"], "X"),
    (["--kernel", "k", "--metrics-after", "dram_throughput_pct=abc"], "dram_throughput_pct"),
    (["--kernel", "k", "--metrics-before", '{"X": "abc"}'], "X"),
    (["--kernel", "k", "--speedup", "inf"], "speedup"),
    (["--kernel", "k", "--speedup", "nan"], "speedup"),
    (["--kernel", "k", "--speedup", "0"], "speedup"),
    (["--kernel", "k", "--time-before", "1", "--time-after", "0"], "time_after_ms"),
    (["--kernel", "k", "--time-before", "-1", "--time-after", "2"], "time_before_ms"),
])
def test_add_refuses_bad_values(tmp_path: Path, args: list[str], needle: str) -> None:
    db = str(tmp_path / "e.db")
    res = cli("experience", "add", *args, "--db", db)
    assert res.exit_code == 2, res.output
    assert needle in res.output and "Traceback" not in res.output
    assert len(res.output.strip().splitlines()) == 1
    assert ExperienceStore(db).count() == 0


def test_add_json_refuses_field_flags(tmp_path: Path) -> None:
    res = cli("experience", "add", "--json", str(SKILL_B), "--kernel", "x", "--db", str(tmp_path / "e.db"))
    assert res.exit_code == 2 and "--kernel" in res.output and "does not mix" in res.output


@pytest.mark.parametrize("n", ["0", "-3"])
def test_recommend_n_is_validated(tmp_path: Path, n: str) -> None:
    res = cli("experience", "recommend", "--kernel", "softmax", "-n", n, "--db", str(tmp_path / "e.db"))
    assert res.exit_code == 2 and "-n" in res.output
    assert len(res.output.strip().splitlines()) == 1


@pytest.mark.parametrize("metrics", ["a=abc", '{"dram_throughput_pct": "abc"}', '{"x": [1]}'])
def test_recommend_bad_metrics_is_one_line(tmp_path: Path, metrics: str) -> None:
    res = cli("experience", "recommend", "--kernel", "softmax", "--metrics", metrics, "--db", str(tmp_path / "e.db"))
    assert res.exit_code == 2, res.output
    assert res.exception is None or isinstance(res.exception, SystemExit)
    assert "Traceback" not in res.output and len(res.output.strip().splitlines()) == 1


# --- recommend from a diagnosis


def test_recommend_from_diagnosis_checks_pack_conditions(tmp_path: Path) -> None:
    diag = cli("diagnose", "--metrics", str(PROFILE / "softmax" / "raw.csv"), "--json")
    assert diag.exit_code == 0, diag.output
    path = tmp_path / "diagnosis.json"
    path.write_text(diag.output)
    db = str(tmp_path / "e.db")
    ExperienceStore(db).close()  # an empty store: recommend reads an existing one (issue 20)
    plain = cli("experience", "recommend", "--kernel", "softmax", "--backend", "triton", "--bottleneck", "dram",
                "-n", "20", "--json", "--db", db)
    assert "missing dram_throughput_pct" in plain.output  # without metrics the conditions cannot be checked
    res = cli("experience", "recommend", "--diagnosis", str(path), "--backend", "triton", "-n", "20", "--json",
              "--db", db)
    assert res.exit_code == 0, res.output
    answer = json.loads(res.output)
    text = json.dumps(answer)
    assert "missing dram_throughput_pct" not in text
    assert "dram_bandwidth" in text  # the sub-cause came from the diagnosis
    # --metrics takes a metrics file too.
    res = cli("experience", "recommend", "--kernel", "softmax", "--backend", "triton", "--bottleneck", "dram",
              "--metrics", str(PROFILE / "softmax" / "raw.csv"), "-n", "20", "--json", "--db", db)
    assert res.exit_code == 0 and "missing dram_throughput_pct" not in res.output


def test_recommend_diagnosis_refuses_an_error_document(tmp_path: Path) -> None:
    path = tmp_path / "d.json"
    path.write_text('{"error": {"message": "x", "exit_code": 2, "type": "BadInput"}}')
    res = cli("experience", "recommend", "--diagnosis", str(path), "--backend", "triton", "--db", str(tmp_path / "e.db"))
    assert res.exit_code == 2 and "error from diagnose" in res.output
