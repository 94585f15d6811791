import json
import multiprocessing as mp
import os
import sqlite3
from pathlib import Path

import pytest

from kernelopt.errors import BadInput
from kernelopt.experience.importers import read_records, record_from_dict
from kernelopt.experience.store import MIGRATIONS, SCHEMA_VERSION, ExperienceStore, default_db_path
from kernelopt.models import ExperienceRecord

FIXTURES = Path(__file__).parent / "fixtures" / "experience"


def rec(**kw: object) -> ExperienceRecord:
    base = {"kernel": "layernorm", "backend": "triton", "chip": "sm_90", "bottleneck": "dram",
            "optimization": "vectorize-with-alignment-hints"}
    base.update(kw)
    return record_from_dict(base)


def test_add_get_list_roundtrip(tmp_path: Path) -> None:
    with ExperienceStore(tmp_path / "e.db", seed=False) as store:
        r = store.add(rec(speedup=1.3, metrics_before={"dram_throughput_pct": 60.0}, dims={"M": 4}))
        store.add(rec(kernel="softmax", speedup=0.9))
        got = store.get(r.id)
        assert got == r
        assert got.outcome == "success"
        assert [x.kernel for x in store.list(outcome="failure")] == ["softmax"]
        assert [x.id for x in store.list(strategy="vectorize-with-alignment-hints", kernel="layer")] == [r.id]
        assert store.count() == 2
        assert store.conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_outcome_is_derived_for_records_built_directly(tmp_path: Path) -> None:
    with ExperienceStore(tmp_path / "e.db", seed=False) as store:
        fast = ExperienceRecord(kernel="a", speedup=1.2)
        wrong = ExperienceRecord(kernel="b", speedup=2.0, correct=False)
        store.add_many([fast, wrong, ExperienceRecord(kernel="c")])
        assert [store.get(r.id).outcome for r in (fast, wrong)] == ["success", "incorrect"]
        assert store.list(kernel="c")[0].outcome is None
        assert store.add(ExperienceRecord(kernel="d", speedup=0.5)).outcome == "failure"


def test_duplicate_id_is_bad_input(tmp_path: Path) -> None:
    with ExperienceStore(tmp_path / "e.db", seed=False) as store:
        r = store.add(rec())
        with pytest.raises(BadInput, match="already present"):
            store.add(r)


def test_default_path_follows_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("KERNELOPT_DB", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    assert default_db_path() == tmp_path / "kernelopt" / "experience.db"
    monkeypatch.setenv("KERNELOPT_DB", str(tmp_path / "x.db"))
    assert default_db_path() == tmp_path / "x.db"


def test_corrupt_database_is_bad_input(tmp_path: Path) -> None:
    path = tmp_path / "corrupt.db"
    path.write_bytes(os.urandom(4096))
    with pytest.raises(BadInput, match="corrupt") as info:
        ExperienceStore(path)
    assert str(path) in str(info.value)


def test_truncated_sqlite_database_is_bad_input(tmp_path: Path) -> None:
    path = tmp_path / "trunc.db"
    with ExperienceStore(path, seed=False) as store:
        store.add_many([rec(kernel=f"k{i}") for i in range(200)])
    data = path.read_bytes()
    path.write_bytes(data[:100] + os.urandom(len(data) - 100))
    Path(str(path) + "-wal").unlink(missing_ok=True)
    with pytest.raises(BadInput) as info:
        ExperienceStore(path).list()
    assert str(path) in str(info.value)


def test_damage_found_after_opening_is_bad_input(tmp_path: Path) -> None:
    path = tmp_path / "damaged.db"
    with ExperienceStore(path, seed=False) as store:
        store.add_many([rec(kernel=f"k{i}", notes="x" * 2000) for i in range(300)])
        store.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    data = bytearray(path.read_bytes())
    page = 4096
    # Keep the header page (schema readable), scramble the data pages behind it.
    data[4 * page:-page] = os.urandom(len(data) - 5 * page)
    path.write_bytes(bytes(data))
    with pytest.raises(BadInput, match="damaged|corrupt") as info:
        with ExperienceStore(path) as store:
            store.list()
    assert str(path) in str(info.value)


def test_foreign_database_is_refused_not_emptied(tmp_path: Path) -> None:
    path = tmp_path / "foreign.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE users (name TEXT)")
    conn.execute("INSERT INTO users VALUES ('x')")
    conn.commit()
    conn.close()
    with pytest.raises(BadInput, match="not a kernelopt experience database"):
        ExperienceStore(path)
    assert sqlite3.connect(path).execute("SELECT name FROM sqlite_master").fetchall() == [("users",)]


def test_newer_schema_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "e.db"
    ExperienceStore(path, seed=False).close()
    conn = sqlite3.connect(path)
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    conn.commit()
    conn.close()
    with pytest.raises(BadInput, match="newer"):
        ExperienceStore(path)


def test_upgrade_from_v1_keeps_records(tmp_path: Path) -> None:
    import sqlite_utils

    path = tmp_path / "v1.db"
    db = sqlite_utils.Database(path)
    MIGRATIONS[0](db)
    db.execute("PRAGMA user_version = 1")
    db["records"].insert({"id": "11111111-1111-4111-8111-111111111111", "created_at": "2025-01-01T00:00:00+00:00",
                          "kernel": "rms_norm", "backend": "triton", "bottleneck": "dram",
                          "strategies": json.dumps(["coalesced-access"]), "outcome": "success", "speedup": 1.2,
                          "situation": "rms norm"})
    db.conn.commit()
    db.close()
    with ExperienceStore(path, seed=False) as store:
        assert store.schema_version == SCHEMA_VERSION
        [r] = store.list()
        assert (r.kernel, r.strategies, r.merged_from) == ("rms_norm", ["coalesced-access"], [])
        assert store.lexical("rms norm")  # FTS built over the old rows too
        store.add(rec())
        assert store.count() == 2


def _adder(path: str, worker: int, n: int) -> None:
    os.environ["KERNELOPT_NO_EMBEDDINGS"] = "1"
    store = ExperienceStore(path, seed=False)
    for i in range(n):
        store.add(rec(kernel=f"k{worker}", notes=str(i)))
    store.close()


def test_concurrent_adders_lose_nothing(tmp_path: Path) -> None:
    path = str(tmp_path / "c.db")
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_adder, args=(path, w, 40)) for w in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    assert [p.exitcode for p in procs] == [0] * 4
    with ExperienceStore(path, seed=False) as store:
        assert store.count() == 160
        assert len({r.id for r in store.list()}) == 160


def test_import_kernel_opt_skill_log(tmp_path: Path) -> None:
    records = read_records(FIXTURES / "kernel_opt_skill_log.json")
    ln, sm, gemm = records
    assert (ln.bottleneck, ln.stall, ln.strategies, ln.params) == (
        "dram", "long_scoreboard", ["vectorize-with-alignment-hints"], {"BLOCK": 1024})
    assert ln.outcome == "success" and ln.metrics_before == {"dram_throughput_pct": 61.0, "achieved_occupancy_pct": 48.0}
    assert sm.outcome == "failure"  # derived: 0.91 <= 0.97
    assert sm.dims == "8192x1024"
    assert gemm.bottleneck == "latency" and gemm.created_at.startswith("2025-01-02")
    assert "author" in (gemm.notes or "")  # unknown fields are kept, not dropped
    with ExperienceStore(tmp_path / "e.db", seed=False) as store:
        assert store.import_(FIXTURES / "kernel_opt_skill_log.json", embed=False) == (3, 3)
        assert store.import_(FIXTURES / "kernel_opt_skill_log.json", embed=False) == (3, 0)


def test_import_rejects_unknown_label_with_location(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"kernel": "a", "bottleneck": "dram"}) + "\n" + json.dumps({"kernel": "b", "bottleneck": "slowness"}) + "\n")
    with pytest.raises(BadInput, match=r"bad.jsonl:2: unknown bottleneck 'slowness'"):
        read_records(bad)
    bad.write_text("{not json\n")
    with pytest.raises(BadInput, match="bad.jsonl:1: malformed JSON"):
        read_records(bad)


def test_export_import_keeps_ids_and_merge_provenance(tmp_path: Path) -> None:
    with ExperienceStore(tmp_path / "a.db", seed=False) as a:
        first = a.add(rec(speedup=1.30, created_at="2025-01-01T00:00:00+00:00"))
        dup = a.add(rec(speedup=1.32, created_at="2025-01-02T00:00:00+00:00"))
        other = a.add(rec(speedup=2.0))
        folds = a.merge()
        assert folds == [(first.id, [dup.id])]
        assert a.get(first.id).merged_from == [dup.id]
        assert a.get(dup.id).merged_into == first.id
        assert {r.id for r in a.list()} == {first.id, other.id}
        assert a.merge() == []
        assert a.export(tmp_path / "out.jsonl") == 3
    with ExperienceStore(tmp_path / "b.db", seed=False) as b:
        assert b.import_(tmp_path / "out.jsonl", embed=False) == (3, 3)
        assert b.get(dup.id).merged_into == first.id
        assert {r.id for r in b.list()} == {first.id, other.id}


def test_seed_is_searched_but_not_written(tmp_path: Path) -> None:
    from kernelopt.experience.store import seed_store

    seed = seed_store()
    assert seed is not None and seed.count() > 0
    with ExperienceStore(tmp_path / "e.db") as store:
        assert store.count() == 0
        assert len(store.list(include_seed=True)) == seed.count()
        assert store.stats().seed_total == seed.count()
