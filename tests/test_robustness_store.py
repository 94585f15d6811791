"""Issue 14: unusual databases, and tests for store guarantees that planted bugs slipped past."""

from __future__ import annotations

import hashlib
import os
import sqlite3
import threading
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from kernelopt.cli import main
from kernelopt.errors import BadInput
from kernelopt.experience.importers import record_from_dict
from kernelopt.experience.store import ExperienceStore, ReadOnlyDatabase
from kernelopt.recommend import recommend

ROOT = os.geteuid() == 0 if hasattr(os, "geteuid") else False


def rec(**kw: object):
    base = {"kernel": "softmax", "backend": "triton", "bottleneck": "dram", "optimization": "single-pass-row",
            "speedup": 1.3}
    return record_from_dict({**base, **kw})


def cli(*args: str):
    return CliRunner().invoke(main, list(args))


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture()
def filled(tmp_path: Path) -> Path:
    path = tmp_path / "db" / "e.db"
    with ExperienceStore(path, seed=False) as store:
        store.add(rec())
        store.add(rec(kernel="layernorm", speedup=1.5))
    return path


# --- foreign and read-only databases


def test_foreign_sqlite_is_left_untouched(tmp_path: Path) -> None:
    path = tmp_path / "other.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE foo (x)")
    conn.execute("INSERT INTO foo VALUES (1)")
    conn.commit()
    conn.close()
    before = sha(path)
    for args in (["list"], ["stats"], ["add", "--kernel", "k"], ["recommend", "--kernel", "k"]):
        res = cli("experience", *args, "--db", str(path))
        assert res.exit_code == 2 and "not a kernelopt experience database" in res.output, res.output
    assert sha(path) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["other.db"]  # no -wal / -shm left
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "delete"  # not switched to WAL
    conn.close()


def test_forced_read_only_reads_and_refuses_writes(filled: Path) -> None:
    before = sha(filled)
    with ExperienceStore(filled, read_only=True) as store:
        assert store.count() == 2
        assert {r.kernel for r in store.list()} == {"softmax", "layernorm"}
        answer = recommend(store_situation(), store=store)
        assert answer.recommendations
        with pytest.raises(ReadOnlyDatabase, match="read-only"):
            store.add(rec(kernel="gelu"))
        with pytest.raises(BadInput, match="read-only"):
            store.import_(Path(__file__).parent / "fixtures" / "experience" / "kernel_opt_skill_experiences.json",
                          embed=False)
    assert sha(filled) == before


def store_situation():
    from kernelopt.models import Situation

    return Situation(kernel="softmax", backend="triton", bottleneck="dram")


def test_sqlite_refusing_a_write_is_reported_as_read_only(filled: Path) -> None:
    # The connection is read-only at the SQLite level, while the store believes it may write.
    store = ExperienceStore(filled, seed=False)
    store.conn.close()
    store.conn = sqlite3.connect(f"file:{filled}?mode=ro", uri=True, isolation_level=None)
    with pytest.raises(ReadOnlyDatabase, match="read-only") as info:
        store.add(rec(kernel="gelu"))
    assert "damaged" not in str(info.value) and "corrupt" not in str(info.value)
    store.close()


@pytest.mark.skipif(ROOT, reason="root ignores file permissions; the forced read-only tests above cover the paths")
def test_read_only_database_in_read_only_folder(filled: Path) -> None:
    folder = filled.parent
    filled.chmod(0o444)
    folder.chmod(0o555)
    try:
        res = cli("experience", "list", "--db", str(filled), "--json")
        assert res.exit_code == 0, res.output
        res = cli("experience", "stats", "--db", str(filled))
        assert res.exit_code == 0, res.output
        res = cli("experience", "add", "--kernel", "k", "--db", str(filled))
        assert res.exit_code == 2 and "read-only" in res.output and "damaged" not in res.output
    finally:
        folder.chmod(0o755)
        filled.chmod(0o644)


def test_list_limit_counts_seed_and_own_together(filled: Path) -> None:
    with ExperienceStore(filled) as store:
        assert len(store.list(limit=3, include_seed=True)) == 3
        newest = store.list(include_seed=True)
        assert [r.id for r in store.list(limit=3, include_seed=True)] == [r.id for r in newest[:3]]
    res = cli("experience", "list", "--limit", "2", "--seed", "--json", "--db", str(filled))
    assert res.exit_code == 0 and res.output.count('"id"') == 2


# --- guarantees that planted bugs slipped past


def test_write_takes_the_lock_at_begin(filled: Path) -> None:
    """BEGIN IMMEDIATE: the write lock is held before the transaction's first statement."""
    store = ExperienceStore(filled, seed=False)
    other = sqlite3.connect(filled, timeout=0, isolation_level=None)
    seen: list[str] = []

    def probe() -> None:
        try:
            other.execute("BEGIN IMMEDIATE")
            other.execute("ROLLBACK")
            seen.append("other writer got in")
        except sqlite3.OperationalError as exc:
            seen.append(str(exc))

    store._write(probe)
    assert seen == ["database is locked"]
    other.close()
    store.close()


def test_write_retries_while_another_process_holds_the_lock(filled: Path) -> None:
    store = ExperienceStore(filled, seed=False)
    store.conn.execute("PRAGMA busy_timeout = 0")  # so only the retry loop can wait
    other = sqlite3.connect(filled, isolation_level=None, check_same_thread=False)
    other.execute("BEGIN IMMEDIATE")
    release = threading.Timer(0.4, lambda: other.execute("COMMIT"))
    release.start()
    start = time.monotonic()
    store.add(rec(kernel="gelu"))
    assert time.monotonic() - start >= 0.3
    release.join()
    other.close()
    assert store.count() == 3
    store.close()


def test_add_many_is_all_or_nothing(filled: Path) -> None:
    with ExperienceStore(filled, seed=False) as store:
        existing = store.list()[0]
        batch = [rec(kernel="new-one"), rec(kernel="new-two"), existing]
        with pytest.raises(BadInput, match="already present"):
            store.add_many(batch)
        assert store.count() == 2
        assert not store.list(kernel="new-")


def test_merge_tolerance_is_relative_and_honoured(tmp_path: Path) -> None:
    with ExperienceStore(tmp_path / "m.db", seed=False) as store:
        a = store.add(rec(speedup=1.30, created_at="2025-01-01T00:00:00+00:00"))
        near = store.add(rec(speedup=1.36, created_at="2025-01-02T00:00:00+00:00"))  # 4.6 % off
        far = store.add(rec(speedup=1.38, created_at="2025-01-03T00:00:00+00:00"))  # 6.2 % off
        assert store.merge(dry_run=True) == [(a.id, [near.id])]
        assert store.merge(speedup_tolerance=0.04, dry_run=True) == [(near.id, [far.id])]  # 1.5 % apart
        assert store.merge(speedup_tolerance=0.01, dry_run=True) == []
        assert store.merge(speedup_tolerance=0.07, dry_run=True) == [(a.id, [near.id, far.id])]
    res = cli("experience", "merge", "--tolerance", "0.07", "--dry-run", "--json", "--db", str(tmp_path / "m.db"))
    assert res.exit_code == 0 and far.id in res.output


def test_read_only_open_falls_back_to_immutable(filled: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A WAL database in a folder nobody may write: `mode=ro` cannot create the -shm file and
    fails at the first read (simulated here: the tests may run as root), `immutable=1` reads."""
    import kernelopt.experience.store as store_mod

    real = sqlite3.connect
    targets: list[str] = []

    class NoShm:
        def __init__(self, conn: sqlite3.Connection) -> None:
            self.conn = conn

        def execute(self, sql: str, *a: object):
            if sql.startswith("SELECT"):
                raise sqlite3.OperationalError("unable to open database file")
            return self.conn.execute(sql, *a)

        def close(self) -> None:
            self.conn.close()

    def connect(target: str, *args: object, **kw: object):
        targets.append(str(target))
        conn = real(target, *args, **kw)
        return NoShm(conn) if "immutable" not in str(target) and "mode=ro" in str(target) else conn

    monkeypatch.setattr(store_mod.sqlite3, "connect", connect)
    with ExperienceStore(filled, read_only=True, seed=False) as store:
        assert store.count() == 2
    assert targets[-1].endswith("?mode=ro&immutable=1")
