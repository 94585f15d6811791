import json
import os
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner

from kernelopt.cli import main

FIXTURES = Path(__file__).parent / "fixtures" / "experience"


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, ["experience", *args])
    return result.exit_code, result.stdout, result.stderr


def test_add_recommend_json_shape(tmp_path: Path) -> None:
    db = str(tmp_path / "e.db")
    code, out, _ = run("add", "--db", db, "--kernel", "layernorm", "--backend", "triton", "--chip", "sm_90",
                       "--dims", "M=4096,N=4096", "--bottleneck", "memory-bound", "--stall", "long_scoreboard",
                       "--optimization", "single_pass_row{BLOCK=1024}", "--hypothesis", "one pass over the row",
                       "--speedup", "1.4", "--metrics-before", "dram_throughput_pct=55")
    assert code == 0
    rid = out.strip()
    code, out, _ = run("recommend", "--db", db, "--kernel", "rms_norm", "--backend", "triton", "--chip", "sm_90",
                       "--bottleneck", "dram", "-n", "3", "--json")
    assert code == 0
    data = json.loads(out)
    assert set(data) >= {"recommendations", "known_failures"}
    first = data["recommendations"][0]
    assert first["strategy"] == "single-pass-row" and rid in first["records"]
    assert {"strategy", "score", "records", "reason"} <= set(first)
    assert len(data["recommendations"]) == 3


def test_recommend_explain_and_known_failures(tmp_path: Path) -> None:
    db = str(tmp_path / "e.db")
    run("add", "--db", db, "--kernel", "softmax", "--backend", "triton", "--bottleneck", "dram",
        "--optimization", "tune-num-warps", "--speedup", "0.8")
    code, out, _ = run("recommend", "--db", db, "--kernel", "softmax", "--backend", "triton", "--bottleneck", "dram",
                       "--explain", "--no-packs")
    assert code == 0
    assert "known failures" in out and "tune-num-warps" in out
    assert "similarity=" in out  # --explain shows the parts (seed records recommend here)


def test_bad_inputs_exit_2_one_line(tmp_path: Path) -> None:
    code, _, err = run("add", "--db", str(tmp_path / "e.db"), "--kernel", "x", "--bottleneck", "slow")
    assert code == 2 and "unknown bottleneck 'slow'" in err and "dram" in err and "Traceback" not in err
    corrupt = tmp_path / "corrupt.db"
    corrupt.write_bytes(os.urandom(2048))
    for args in (["list"], ["stats"], ["recommend", "--kernel", "k"]):
        code, _, err = run(*args, "--db", str(corrupt))
        assert code == 2 and str(corrupt) in err and len(err.strip().splitlines()) == 1
    code, _, err = run("import", str(tmp_path / "missing.json"), "--db", str(tmp_path / "e.db"))
    assert code == 2 and "no such file" in err


def test_import_export_list_stats_merge_sync(tmp_path: Path) -> None:
    db = str(tmp_path / "e.db")
    code, out, _ = run("import", str(FIXTURES / "kernel_opt_skill_log.json"), "--db", db, "--no-embed")
    assert code == 0 and "read 3 records, 3 new" in out
    code, out, _ = run("list", "--db", db, "--bottleneck", "memory_bound", "--json")
    assert sorted(r["kernel"] for r in json.loads(out)) == ["layernorm_fwd", "softmax"]
    code, out, _ = run("stats", "--db", db, "--json")
    stats = json.loads(out)
    assert stats["total"] == 3 and stats["by_outcome"] == {"success": 2, "failure": 1}
    assert stats["success_rate_by_bottleneck"]["dram"] == 0.5
    assert stats["top_strategies"]["dram"][0]["strategy"] == "vectorize-with-alignment-hints"
    code, out, _ = run("merge", "--db", db, "--json")
    assert code == 0 and json.loads(out)["folded"] == []
    code, out, _ = run("export", str(tmp_path / "out.jsonl"), "--db", db)
    assert code == 0 and len((tmp_path / "out.jsonl").read_text().splitlines()) == 3
    code, out, _ = run("sync", "--db", db, "-o", str(tmp_path / "digest.md"))
    digest = (tmp_path / "digest.md").read_text()
    assert code == 0 and "**3** records" in digest and "layernorm_fwd" in digest and "1.31x" in digest
    code, out, _ = run("search", "softmax", "--db", db, "--json")
    assert json.loads(out)[0]["record"]["kernel"] == "softmax"


def test_cold_add_does_not_import_heavy_packages(tmp_path: Path) -> None:
    code = (
        "import sys\n"
        "from kernelopt.cli import main\n"
        f"main(['experience', 'add', '--db', {str(tmp_path / 'e.db')!r}, '--kernel', 'k', '--speedup', '1.2'],"
        " standalone_mode=False)\n"
        "heavy = [m for m in ('torch', 'sentence_transformers', 'transformers', 'triton', 'tokenizers', 'numpy')"
        " if m in sys.modules]\n"
        "assert not heavy, heavy\n"
    )
    # A fresh database (schema creation) may load sqlite-utils and numpy; an add to an
    # existing one must not.
    subprocess.run([sys.executable, "-c", f"from kernelopt.experience.store import ExperienceStore; ExperienceStore({str(tmp_path / 'e.db')!r})"], check=True)
    subprocess.run([sys.executable, "-c", code], check=True)


def test_read_commands_on_a_missing_database_say_so_and_create_nothing(tmp_path: Path) -> None:
    """Issue 20: a mistyped --db was created, empty (even under a folder that did not exist), and
    read as 'no records'."""
    for where in (tmp_path / "typo.db", tmp_path / "no-such-folder" / "e.db"):
        for args in (["list"], ["stats"], ["search", "softmax"], ["recommend", "--kernel", "k"],
                     ["export", str(tmp_path / "out.jsonl")], ["sync"]):
            code, _, err = run(*args, "--db", str(where))
            assert code == 2 and "no such database" in err and len(err.strip().splitlines()) == 1, (args, err)
            assert not where.exists() and not (tmp_path / "out.jsonl").exists()
        res = CliRunner().invoke(main, ["experience", "list"], env={"KERNELOPT_DB": str(where)})
        assert res.exit_code == 2 and "no such database" in res.stderr
    assert not (tmp_path / "no-such-folder").exists()
    # A write command creates a new database, but not a folder that is not there (a typo, too).
    code, _, err = run("add", "--db", str(tmp_path / "no-such-folder" / "e.db"), "--kernel", "k")
    assert code == 2 and "no such folder" in err and not (tmp_path / "no-such-folder").exists()
    code, _, _ = run("add", "--db", str(tmp_path / "new.db"), "--kernel", "k")
    assert code == 0 and (tmp_path / "new.db").is_file()
    code, out, _ = run("list", "--db", str(tmp_path / "new.db"))
    assert code == 0 and "k" in out


def test_import_refuses_bad_records_in_one_line(tmp_path: Path) -> None:
    """Issue 20: deeply nested JSON and a lone surrogate ended in a traceback (exit 1); created_at
    was not checked; a list `kernel` was stored as its Python repr."""
    db = str(tmp_path / "e.db")
    cases = {
        "deep.json": "[" * 100_000 + "]" * 100_000,
        "deep.jsonl": '{"kernel": ' + "[" * 100_000 + "]" * 100_000 + "}\n",
        "surrogate.jsonl": '{"kernel": "softmax \\ud800", "speedup": 1.2}\n',
        "when.jsonl": '{"kernel": "softmax", "speedup": 1.2, "created_at": "last tuesday"}\n',
        "listkernel.jsonl": '{"kernel": ["a", "b"], "speedup": 1.2}\n',
    }
    needles = {"deep.json": "nested too deeply", "deep.jsonl": "nested too deeply",
               "surrogate.jsonl": "kernel: not valid Unicode", "when.jsonl": "created_at: expected an ISO 8601",
               "listkernel.jsonl": "kernel: expected text, got list"}
    for name, text in cases.items():
        (tmp_path / name).write_text(text)
        code, _, err = run("import", str(tmp_path / name), "--db", db, "--no-embed")
        assert code == 2 and needles[name] in err and len(err.strip().splitlines()) == 1, (name, err)
        assert "Traceback" not in err
    good = tmp_path / "good.jsonl"
    good.write_text('{"kernel": "softmax", "speedup": 1.2, "created_at": "2026-01-31T12:00:00Z"}\n'
                    '{"kernel": 42, "speedup": 1.1, "created_at": "2026-02-01"}\n')
    code, out, err = run("import", str(good), "--db", db, "--no-embed")
    assert code == 0 and "read 2 records, 2 new" in out, err
    code, out, _ = run("list", "--db", db, "--json")
    assert sorted(r["kernel"] for r in json.loads(out)) == ["42", "softmax"]


def test_list_stats_and_recommend_read_as_a_user_expects(tmp_path: Path) -> None:
    """Issue 20: `list` had no header and printed bidi overrides raw; `stats` filed CPU runs (no
    bottleneck: not profiled) under 'unknown:'; `recommend --diagnosis` without --backend ranked a
    CUDA strategy for a Triton kernel."""
    db = str(tmp_path / "e.db")
    assert run("add", "--db", db, "--kernel", "soft\u202emax", "--backend", "triton", "--speedup", "1.3",
               "--optimization", "tune-num-warps")[0] == 0
    code, out, _ = run("list", "--db", db)
    header, row = out.splitlines()
    assert header.split()[:4] == ["id", "kernel", "backend", "chip"] and "speedup" in header
    assert "\u202e" not in out and "soft\\u202emax" in row
    code, out, _ = run("stats", "--db", db)
    assert code == 0 and "not profiled: success rate" in out and "unknown:" not in out
    diag = CliRunner().invoke(main, ["diagnose", "--metrics", str(Path(__file__).parent / "fixtures" / "profile"
                                                                  / "softmax" / "raw.csv"), "--json"])
    (tmp_path / "d.json").write_text(diag.stdout)
    code, _, err = run("recommend", "--db", db, "--diagnosis", str(tmp_path / "d.json"))
    assert code == 2 and "--diagnosis needs --backend" in err
    code, out, _ = run("recommend", "--db", db, "--diagnosis", str(tmp_path / "d.json"), "--backend", "triton",
                       "--json")
    assert code == 0 and json.loads(out)["recommendations"]
