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
