"""ExperienceStore: optimization outcomes in SQLite (WAL), searched by meaning.

Layout of a database (schema version in `PRAGMA user_version` and `meta`):
  meta(key, value)            `kind` = "kernelopt-experience" marks our databases
  records(...)                one row per ExperienceRecord; JSON columns for dicts/lists
  records_fts                 FTS5 over the text columns (BM25 fallback, `search`)
  text_embeddings(model, sha, dim, vector)
                              embeddings of situation texts (the glossed kernel description,
                              `situation_text`), keyed by model and text hash:
                              records sharing a situation share one row, and a repeated
                              query never runs the model twice

Adding a record never loads a model: its situation text is embedded later, in batches,
by `reindex` (or `import_`, or lazily by `recommend`/`search` when only a few are
missing). Several processes may add at once: every write is one `BEGIN IMMEDIATE`
transaction under a busy timeout, retried on `database is locked`.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import sqlite3
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, TypeVar

from kernelopt.errors import BadInput
from kernelopt.experience.index import situation_text
from kernelopt.models.experience import ExperienceRecord, ExperienceStats, SearchHit

if TYPE_CHECKING:
    import numpy as np

    from kernelopt.experience.embeddings import Embedder

SCHEMA_KIND = "kernelopt-experience"
SCHEMA_VERSION = 3
SQLITE_MAGIC = b"SQLite format 3\x00"

T = TypeVar("T")

_JSON_COLS = ("dims", "metrics_before", "metrics_after", "strategies", "params", "merged_from", "features")
_TEXT_COLS = (
    "id", "created_at", "kernel", "backend", "chip", "device", "dtype", "bottleneck", "stall",
    "hypothesis", "rationale", "expected", "outcome", "notes", "source", "merged_into", "family",
)
_REAL_COLS = ("speedup", "time_before_ms", "time_after_ms")


# Where stats file a record without a bottleneck: a run that was not profiled (the CPU
# interpreter, no ncu), not a bottleneck nobody could name.
NO_BOTTLENECK = "not profiled"


def default_db_path() -> Path:
    """`KERNELOPT_DB`, else `$XDG_DATA_HOME/kernelopt/experience.db` (~/.local/share by default)."""
    env = os.environ.get("KERNELOPT_DB", "").strip()
    if env:
        return Path(env).expanduser()
    base = os.environ.get("XDG_DATA_HOME", "").strip() or os.path.join(os.path.expanduser("~"), ".local", "share")
    return Path(base) / "kernelopt" / "experience.db"


def text_sha(model: str, text: str) -> str:
    return hashlib.sha1(f"{model}\0{text}".encode()).hexdigest()


class ReadOnlyDatabase(BadInput):
    """A write to a database this process may not write (exit 2)."""


def _writable(path: Path) -> bool:
    """Can this process write the database file (or create it) and its folder (journal, WAL files)?"""
    folder = path.parent if str(path.parent) else Path(".")
    if path.exists():
        return os.access(path, os.W_OK) and os.access(folder, os.W_OK)
    return os.access(folder, os.W_OK)


def _retry(fn: Callable[[], T], attempts: int = 50) -> T:
    delay = 0.01
    for i in range(attempts):
        try:
            return fn()
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) and "busy" not in str(exc) or i == attempts - 1:
                raise
            time.sleep(delay)
            delay = min(delay * 2, 0.5)
    raise AssertionError("unreachable")  # pragma: no cover


# --- migrations: each takes the sqlite-utils Database at version i and leaves it at i+1.


def _migrate_v1(db: Any) -> None:
    db["meta"].create({"key": str, "value": str}, pk="key")
    cols: dict[str, type] = {c: str for c in _TEXT_COLS if c not in ("merged_into", "family")}
    cols.update({c: str for c in _JSON_COLS if c not in ("merged_from", "features")})
    cols.update({c: float for c in _REAL_COLS})
    cols.update({"correct": int, "situation": str})
    db["records"].create(cols, pk="id")
    db["meta"].insert_all([{"key": "kind", "value": SCHEMA_KIND}], replace=True)


def _migrate_v2(db: Any) -> None:
    # v2: merge provenance, the embedding cache, full-text search.
    db["records"].add_column("merged_from", str)
    db["records"].add_column("merged_into", str)
    db["records"].add_column("strategies_text", str)
    db.execute("UPDATE records SET strategies_text = REPLACE(REPLACE(REPLACE(strategies, '[', ''), ']', ''), '\"', '')")
    db["text_embeddings"].create({"model": str, "sha": str, "dim": int, "vector": bytes}, pk=("model", "sha"))
    db["records"].create_index(["bottleneck"], if_not_exists=True)
    db["records"].enable_fts(
        ["kernel", "situation", "strategies_text", "hypothesis", "notes"], create_triggers=True, tokenize="porter"
    )


def _migrate_v3(db: Any) -> None:
    # v3: what recommend matches kernels on besides their names: the problem family (the
    # suite README's column) and the structural features of the source (kernelopt.source).
    db["records"].add_column("family", str)
    db["records"].add_column("features", str)


MIGRATIONS: list[Callable[[Any], None]] = [_migrate_v1, _migrate_v2, _migrate_v3]
assert len(MIGRATIONS) == SCHEMA_VERSION


def _with_outcome(rec: ExperienceRecord) -> ExperienceRecord:
    """A record built directly (not through record_from_dict) gets its outcome by the same thresholds."""
    from kernelopt.experience.labels import derive_outcome

    if rec.outcome is None and (rec.speedup is not None or rec.correct is False):
        return rec.model_copy(update={"outcome": derive_outcome(rec.speedup, rec.correct)})
    return rec


def _row_to_record(row: dict[str, Any]) -> ExperienceRecord:
    data = {k: row.get(k) for k in _TEXT_COLS + _REAL_COLS}
    for col in _JSON_COLS:
        raw = row.get(col)
        if raw is not None:
            data[col] = json.loads(raw)
    if row.get("correct") is not None:
        data["correct"] = bool(row["correct"])
    return ExperienceRecord.model_validate({k: v for k, v in data.items() if v is not None})


_MERGE_COLS = ("merged_from", "merged_into")
# Left out when deciding whether an imported record is one already stored: merge
# provenance (a merge after an export must not make its re-import look new) and the
# creation time (a file's record without one gets the time it was read).
_NOT_CONTENT = (*_MERGE_COLS, "created_at")


def _same_record(stored: dict[str, Any], row: dict[str, Any]) -> bool:
    return all(stored.get(k) == v for k, v in row.items() if k not in _NOT_CONTENT)


def _record_to_row(rec: ExperienceRecord) -> dict[str, Any]:
    row: dict[str, Any] = {k: getattr(rec, k) for k in _TEXT_COLS + _REAL_COLS}
    for col in _JSON_COLS:
        value = getattr(rec, col)
        row[col] = None if value is None else json.dumps(value, sort_keys=True)
    row["correct"] = None if rec.correct is None else int(rec.correct)
    row["situation"] = situation_text(rec.kernel)
    row["strategies_text"] = " ".join(rec.strategies)
    return row


class ExperienceStore:
    """A database of outcomes. `path=":memory:"` gives a private in-memory store (the seed)."""

    def __init__(self, path: str | Path | None = None, *, create: bool = True, seed: bool = True,
                 read_only: bool | None = None) -> None:
        """`read_only`: None opens read-only exactly when this process may not write the file
        or its folder; True forces it (reads work, every write is refused with exit 2)."""
        self.path = str(path) if str(path) == ":memory:" else str(Path(path or default_db_path()).expanduser())
        self.use_seed = seed
        self.read_only = False
        if self.path != ":memory:":
            self._check_file(Path(self.path), create)
            self.read_only = not _writable(Path(self.path)) if read_only is None else read_only
        try:
            self.conn = self._connect()
            self._open()
        except sqlite3.DatabaseError as exc:
            if isinstance(exc, sqlite3.OperationalError) and "locked" in str(exc):
                raise BadInput(f"{self.path}: experience database is locked by another process: {exc}") from None
            raise BadInput(f"{self.path}: not a usable experience database (corrupt?): {exc}") from None
        self._index_cache: tuple[Any, Any] | None = None
        self._generation = 0
        self._columns: list[str] | None = None

    # --- opening, validation, migrations

    @staticmethod
    def _check_file(path: Path, create: bool) -> None:
        if path.is_dir():
            raise BadInput(f"{path}: is a directory, expected an experience database file")
        if not path.exists() or path.stat().st_size == 0:
            if not create:
                raise BadInput(f"{path}: no such experience database")
            path.parent.mkdir(parents=True, exist_ok=True)
            return
        with path.open("rb") as fh:
            if fh.read(16) != SQLITE_MAGIC:
                raise BadInput(f"{path}: not an SQLite database (corrupt or another kind of file)")

    def _connect(self) -> sqlite3.Connection:
        """A connection; read-only (`mode=ro`, then `immutable=1`) when we may not write the
        file or its folder, so such a database can still be read."""
        def connect(target: str, uri: bool = False) -> sqlite3.Connection:
            conn = sqlite3.connect(target, timeout=60.0, isolation_level=None, check_same_thread=False, uri=uri)
            conn.execute("PRAGMA busy_timeout = 60000")
            return conn

        if not self.read_only:
            return connect(self.path)
        from urllib.parse import quote

        base = "file:" + quote(str(Path(self.path).resolve()))
        conn = connect(base + "?mode=ro", uri=True)
        try:
            conn.execute("SELECT COUNT(*) FROM sqlite_master").fetchone()
            return conn
        except sqlite3.OperationalError:
            # A WAL database in a folder we cannot write: SQLite cannot create the -shm
            # file. `immutable` reads the main file alone (nobody can be writing it: its
            # folder is read-only, so no WAL could have been started either).
            conn.close()
            return connect(base + "?mode=ro&immutable=1", uri=True)

    def _open(self) -> None:
        conn = self.conn
        # Checked before any pragma that writes: a foreign SQLite file (another tool's
        # database) is refused untouched, not switched to WAL first.
        version = self._version_checked()
        if self.read_only:
            if version < SCHEMA_VERSION:
                what = "is empty" if version == 0 else f"has schema v{version} and needs an upgrade to v{SCHEMA_VERSION}"
                raise BadInput(f"{self.path}: experience database is read-only and {what}; make it writable once")
            return
        if self.path != ":memory:":
            _retry(lambda: conn.execute("PRAGMA journal_mode = WAL").fetchone())
        conn.execute("PRAGMA synchronous = NORMAL")
        if version < SCHEMA_VERSION:
            self._write(self._migrate)

    def _version_checked(self) -> int:
        conn = self.conn
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        if not tables:
            return 0
        kind = None
        if "meta" in tables:
            row = conn.execute("SELECT value FROM meta WHERE key = 'kind'").fetchone()
            kind = row[0] if row else None
        if kind != SCHEMA_KIND:
            raise BadInput(
                f"{self.path}: not a kernelopt experience database (tables: {', '.join(sorted(tables)[:5])}); "
                "refusing to use it"
            )
        if version > SCHEMA_VERSION:
            raise BadInput(
                f"{self.path}: experience schema v{version} is newer than this kernelopt (v{SCHEMA_VERSION}); upgrade"
            )
        return version

    def _migrate(self) -> None:
        # Re-read inside the write lock: another process may have migrated meanwhile.
        # sqlite-utils (and the numpy it imports, ~0.3 s) is loaded only to create or
        # upgrade the schema: reads and adds use the sqlite3 connection directly.
        import sqlite_utils

        db = sqlite_utils.Database(self.conn)
        version = self._version_checked()
        for step in range(version, SCHEMA_VERSION):
            MIGRATIONS[step](db)
            self.conn.execute(f"PRAGMA user_version = {step + 1}")
        db["meta"].insert_all([{"key": "schema_version", "value": str(SCHEMA_VERSION)}], replace=True)

    @property
    def schema_version(self) -> int:
        return int(self.conn.execute("PRAGMA user_version").fetchone()[0])

    def _write(self, fn: Callable[[], T]) -> T:
        """Run `fn` in one IMMEDIATE transaction, retried while another process holds the lock."""
        conn = self.conn
        if self.read_only:
            raise ReadOnlyDatabase(f"{self.path}: experience database is read-only (no write permission on the "
                                   "file or its folder); nothing was changed")

        def attempt() -> T:
            conn.execute("BEGIN IMMEDIATE")
            try:
                out = fn()
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")
            return out

        try:
            return _retry(attempt)
        except sqlite3.OperationalError as exc:
            if "readonly" in str(exc) or "read-only" in str(exc):
                raise ReadOnlyDatabase(f"{self.path}: experience database is read-only: {exc}; nothing was changed") from None
            raise

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> "ExperienceStore":
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: object) -> None:
        self.close()
        # Damage found after opening (a page read fails) is bad input, not a crash.
        if isinstance(exc, sqlite3.DatabaseError) and not (
                isinstance(exc, sqlite3.OperationalError) and "locked" in str(exc)):
            if "readonly" in str(exc):
                raise BadInput(f"{self.path}: experience database is read-only: {exc}") from None
            raise BadInput(f"{self.path}: experience database is damaged or unreadable: {exc}") from None

    # --- writing

    def add(self, record: ExperienceRecord) -> ExperienceRecord:
        """Insert one record; returns it as stored (outcome derived when it was not given)."""
        record = _with_outcome(record)
        self.add_many([record])
        return record

    def add_many(self, records: Iterable[ExperienceRecord], *, skip_existing: bool = False) -> int:
        """Insert records in one transaction; returns how many were new. Ids already present
        raise BadInput unless `skip_existing` (import is idempotent: same UUID, same record)."""
        rows = [_record_to_row(_with_outcome(r)) for r in records]
        if not rows:
            return 0
        cols = list(rows[0])
        verb = "INSERT OR IGNORE" if skip_existing else "INSERT"
        sql = f"{verb} INTO records ({', '.join(cols)}) VALUES ({', '.join('?' for _ in cols)})"

        def insert() -> int:
            if skip_existing:
                self._rekey_collisions(rows)
            # Counted in the transaction: total_changes would also count the FTS trigger rows.
            before = self.conn.execute("SELECT COUNT(*) FROM records").fetchone()[0]
            self.conn.executemany(sql, [tuple(r[c] for c in cols) for r in rows])
            return int(self.conn.execute("SELECT COUNT(*) FROM records").fetchone()[0] - before)

        self._generation += 1
        try:
            return self._write(insert)
        except sqlite3.IntegrityError as exc:
            raise BadInput(f"{self.path}: record id already present ({exc}); use import to skip duplicates") from None

    def _rekey_collisions(self, rows: list[dict[str, Any]]) -> None:
        """Import keeps a record whose id is taken by a different record: it gets a new id
        (derived from the old id and its content, so a re-import is still idempotent) and
        keeps the old one in `source`. Only a really identical record is skipped."""
        import uuid

        from kernelopt.experience.importers import _NAMESPACE

        ids = [r["id"] for r in rows]
        existing: dict[str, dict[str, Any]] = {}
        for start in range(0, len(ids), 500):
            chunk = ids[start : start + 500]
            for row in self.conn.execute(f"SELECT * FROM records WHERE id IN ({', '.join('?' * len(chunk))})", chunk):
                d = self._as_dict(row)
                existing[d["id"]] = d
        for row in rows:
            old = existing.get(row["id"])
            if old is None or _same_record(old, row):
                continue
            content = json.dumps({k: row[k] for k in sorted(row) if k not in _NOT_CONTENT}, sort_keys=True, default=str)
            row["source"] = f"{row['source'] or 'import'}#id={row['id']}"
            row["id"] = str(uuid.uuid5(_NAMESPACE, f"{row['id']}\0{content}"))

    # --- reading

    def get(self, record_id: str) -> ExperienceRecord:
        row = self.conn.execute("SELECT * FROM records WHERE id = ?", (record_id,)).fetchone()
        if row is None:
            seed = self._seed()
            if seed is not None:
                return seed.get(record_id)
            raise BadInput(f"no experience record with id {record_id!r}")
        return _row_to_record(self._as_dict(row))

    def _as_dict(self, row: tuple[Any, ...]) -> dict[str, Any]:
        if self._columns is None:
            self._columns = [r[1] for r in self.conn.execute("PRAGMA table_info(records)")]
        return dict(zip(self._columns, row))

    def count(self, include_merged: bool = False) -> int:
        where = "" if include_merged else " WHERE merged_into IS NULL"
        return int(self.conn.execute(f"SELECT COUNT(*) FROM records{where}").fetchone()[0])

    def list(
        self,
        *,
        kernel: str | None = None,
        backend: str | None = None,
        chip: str | None = None,
        bottleneck: str | None = None,
        strategy: str | None = None,
        outcome: str | None = None,
        source: str | None = None,
        limit: int | None = None,
        include_merged: bool = False,
        include_seed: bool = False,
    ) -> list[ExperienceRecord]:
        """Records matching every filter given (kernel: substring; strategy: any applied), newest first."""
        where, args = ["1 = 1"], []
        if not include_merged:
            where.append("merged_into IS NULL")
        for col, value in (("backend", backend), ("chip", chip), ("bottleneck", bottleneck),
                           ("outcome", outcome), ("source", source)):
            if value is not None:
                where.append(f"{col} = ?")
                args.append(value)
        if kernel:
            where.append("kernel LIKE ?")
            args.append(f"%{kernel}%")
        if strategy:
            from kernelopt.experience.names import load_mappings

            # Imported names that mean this pack strategy count as it (knowledge/name_mappings.yaml).
            names = [strategy, *load_mappings().aliases_of(strategy)]
            where.append(f"EXISTS (SELECT 1 FROM json_each(records.strategies) WHERE value IN ({', '.join('?' * len(names))}))")
            args.extend(names)
        sql = f"SELECT * FROM records WHERE {' AND '.join(where)} ORDER BY created_at DESC, id"
        if limit is not None:
            sql += f" LIMIT {int(limit)}"
        out = [_row_to_record(self._as_dict(r)) for r in self.conn.execute(sql, args)]
        seed = self._seed() if include_seed else None
        if seed is not None:
            out += seed.list(kernel=kernel, backend=backend, chip=chip, bottleneck=bottleneck, strategy=strategy,
                             outcome=outcome, source=source, limit=limit)
            # The limit is over the answer, not over each source: newest first across both.
            out.sort(key=lambda r: r.id)
            out.sort(key=lambda r: r.created_at, reverse=True)
            if limit is not None:
                out = out[: int(limit)]
        return out

    def export(self, path: str | Path, include_merged: bool = True) -> int:
        """Write every record (merged ones too, so provenance survives) as JSONL; returns the count."""
        records = self.list(include_merged=include_merged)
        try:
            with Path(path).open("w", encoding="utf-8") as fh:
                for rec in sorted(records, key=lambda r: (r.created_at, r.id)):
                    fh.write(rec.model_dump_json(exclude_none=True) + "\n")
        except OSError as exc:
            raise BadInput(f"{path}: cannot write: {exc}") from None
        return len(records)

    def import_(self, path: str | Path, *, embed: bool = True) -> tuple[int, int]:
        """Import kernelopt JSONL or a kernel-opt-skill JSON array; returns (read, new)."""
        from kernelopt.experience.importers import read_records

        records = read_records(path)
        new = self.add_many(records, skip_existing=True)
        if embed:
            self.reindex()
        return len(records), new

    # --- embeddings

    def _embedding_rows(self, model: str, shas: list[str]) -> dict[str, bytes]:
        out: dict[str, bytes] = {}
        for start in range(0, len(shas), 500):
            chunk = shas[start : start + 500]
            q = f"SELECT sha, vector FROM text_embeddings WHERE model = ? AND sha IN ({', '.join('?' * len(chunk))})"
            out.update(dict(self.conn.execute(q, [model, *chunk])))
        return out

    def embed_texts(self, texts: list[str], embedder: "Embedder", limit: int | None = None) -> dict[str, "np.ndarray"]:
        """Vectors for `texts` (by text), from the cache table, computing and caching what is missing
        (at most `limit` of them; the rest are left out of the answer)."""
        import numpy as np

        shas = {t: text_sha(embedder.name, t) for t in dict.fromkeys(texts)}
        cached = self._embedding_rows(embedder.name, list(shas.values()))
        out = {t: np.frombuffer(cached[s], dtype=np.float32) for t, s in shas.items() if s in cached}
        missing = [t for t in shas if t not in out]
        if limit is not None:
            missing = missing[:limit]
        if missing:
            vecs = embedder.encode(missing)
            rows = [(embedder.name, shas[t], int(v.shape[0]), v.astype(np.float32).tobytes()) for t, v in zip(missing, vecs)]
            try:
                self._write(lambda: self.conn.executemany(
                    "INSERT OR REPLACE INTO text_embeddings (model, sha, dim, vector) VALUES (?, ?, ?, ?)", rows))
            except ReadOnlyDatabase:
                pass  # the cache is an optimisation: a database we may not write still answers
            out.update({t: v for t, v in zip(missing, vecs)})
        return out

    def situation_texts(self) -> list[str]:
        """The distinct texts to embed, computed from the kernel column (so a change of
        `situation_text` never leaves stale stored texts behind)."""
        kernels = [r[0] for r in self.conn.execute("SELECT DISTINCT kernel FROM records")]
        return list(dict.fromkeys(situation_text(k) for k in kernels))

    def unindexed(self, model: str) -> int:
        shas = [text_sha(model, t) for t in self.situation_texts()]
        return len(shas) - len(self._embedding_rows(model, shas))

    def reindex(self, model: str | None = None) -> int:
        """Embed every situation text not yet embedded with `model`; returns how many were computed.
        Without a loadable model this is a no-op (returns 0) and search uses BM25."""
        from kernelopt.experience.embeddings import load_embedder

        embedder = load_embedder(model)
        if embedder is None:
            return 0
        texts = self.situation_texts()
        shas = [text_sha(embedder.name, t) for t in texts]
        have = self._embedding_rows(embedder.name, shas)
        missing = [t for t, s in zip(texts, shas) if s not in have]
        for start in range(0, len(missing), 256):
            self.embed_texts(missing[start : start + 256], embedder)
        return len(missing)

    # --- lexical search (FTS5 / BM25)

    def lexical(self, query: str, limit: int = 200) -> dict[str, float]:
        """record id -> BM25 relevance in (0, 1] (1 = best match here); empty if nothing matches."""
        import re

        words = [w for w in re.findall(r"[A-Za-z0-9]+", query.lower()) if len(w) > 1]
        if not words:
            return {}
        match = " OR ".join(f'"{w}"' for w in dict.fromkeys(words))
        rows = self.conn.execute(
            "SELECT records.id, bm25(records_fts) AS rank FROM records_fts JOIN records ON records.rowid = records_fts.rowid "
            "WHERE records_fts MATCH ? AND records.merged_into IS NULL ORDER BY rank LIMIT ?",
            (match, limit),
        ).fetchall()
        if not rows:
            return {}
        best = min(r[1] for r in rows)  # bm25() is negative: lower is better
        return {r[0]: (r[1] / best if best else 1.0) for r in rows}

    # --- the seed experience shipped with kernelopt

    def _seed(self) -> "ExperienceStore | None":
        return seed_store() if self.use_seed and self.path != ":memory:" else None

    # --- search

    def index(self) -> Any:
        """The per-process column view that search and recommend read (rebuilt when the database changed)."""
        from kernelopt.experience.index import build_index

        # data_version moves when another connection commits; _generation when this one
        # changes records (not when it caches an embedding: that must not cost a rebuild).
        key = (self.conn.execute("PRAGMA data_version").fetchone()[0], self._generation)
        if self._index_cache is None or self._index_cache[0] != key:
            self._index_cache = (key, build_index(self))
        return self._index_cache[1]

    def search(self, query: str, n: int = 10) -> list[SearchHit]:
        """Records nearest in meaning to `query` (BM25 when no model loads), user's and seed."""
        from kernelopt.experience.index import search

        return search(self, query, n=n)

    # --- merge

    def merge(self, *, speedup_tolerance: float = 0.05, dry_run: bool = False) -> list[tuple[str, list[str]]]:
        """Fold near-duplicates: same kernel (case-insensitive), backend, chip, bottleneck, stall,
        strategies, params and outcome, and speedups within `speedup_tolerance` of the first.
        The oldest record keeps its id and lists the others in `merged_from`; the others stay
        in the database with `merged_into` set (hidden from list/recommend). No id changes."""
        groups: dict[tuple[Any, ...], list[dict[str, Any]]] = defaultdict(list)
        rows = [self._as_dict(r) for r in self.conn.execute(
            "SELECT * FROM records WHERE merged_into IS NULL ORDER BY created_at, id")]
        for row in rows:
            key = (
                (row["kernel"] or "").strip().lower(), row["backend"], row["chip"], row["bottleneck"],
                row["stall"], row["strategies"], row["params"], row["outcome"],
            )
            groups[key].append(row)
        folds: list[tuple[str, list[str]]] = []
        for members in groups.values():
            while members:
                head, rest = members[0], members[1:]
                same, other = [], []
                for m in rest:
                    a, b = head["speedup"], m["speedup"]
                    close = (a is None and b is None) or (
                        a is not None and b is not None and abs(a - b) <= speedup_tolerance * a)
                    (same if close else other).append(m)
                if same:
                    folds.append((head["id"], [m["id"] for m in same]))
                members = other
        if folds and not dry_run:
            def apply() -> None:
                for head_id, ids in folds:
                    prev = json.loads(self.conn.execute(
                        "SELECT merged_from FROM records WHERE id = ?", (head_id,)).fetchone()[0] or "[]")
                    self.conn.execute("UPDATE records SET merged_from = ? WHERE id = ?",
                                         (json.dumps(prev + ids), head_id))
                    self.conn.executemany("UPDATE records SET merged_into = ? WHERE id = ?",
                                             [(head_id, i) for i in ids])
            self._generation += 1
            self._write(apply)
        return folds

    # --- stats

    def stats(self, top: int = 3) -> ExperienceStats:
        return self._stats(self.list(), top)

    def _stats(self, records: list[ExperienceRecord], top: int = 3) -> ExperienceStats:
        """Stats of `records` (the user's, as `list()` returns them) and of this database."""
        from kernelopt.experience.embeddings import model_name

        seed = self._seed()
        by_bn: dict[str, Counter[str]] = defaultdict(Counter)
        strat: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
        from kernelopt.experience.names import load_mappings

        names = load_mappings()
        for r in records:
            bn = r.bottleneck or NO_BOTTLENECK
            by_bn[bn][r.outcome or "unknown"] += 1
            for s in dict.fromkeys(names.strategy(x, r.backend) for x in r.strategies):
                strat[bn][s].append(1.0 if r.outcome == "success" else 0.0)
        top_strategies = {
            bn: [
                {"strategy": s, "records": len(v), "success_rate": round(sum(v) / len(v), 3)}
                for s, v in sorted(d.items(), key=lambda kv: (-sum(kv[1]), -len(kv[1]), kv[0]))[:top]
            ]
            for bn, d in sorted(strat.items())
        }
        rates = {
            bn: round(c["success"] / sum(v for k, v in c.items() if k != "unknown"), 3)
            for bn, c in sorted(by_bn.items())
            if sum(v for k, v in c.items() if k != "unknown")
        }
        return ExperienceStats(
            total=len(records),
            seed_total=seed.count() if seed is not None else 0,
            by_outcome=dict(Counter(r.outcome or "unknown" for r in records).most_common()),
            by_bottleneck=dict(Counter(r.bottleneck or NO_BOTTLENECK for r in records).most_common()),
            by_backend=dict(Counter(r.backend or "unknown" for r in records).most_common()),
            success_rate_by_bottleneck=rates,
            top_strategies=top_strategies,
            unindexed=self.unindexed(model_name()),
            schema_version=self.schema_version,
            path=self.path,
        )

    def digest(self, *, title: str = "Experience digest") -> str:
        """Markdown digest rendered from templates/experience_digest.md."""
        from kernelopt.resources import render_template

        records = self.list()
        wins = sorted((r for r in records if r.outcome == "success" and r.speedup),
                      key=lambda r: -(r.speedup or 0))[:20]
        failures = [r for r in records if r.outcome in ("failure", "incorrect")][:20]
        return render_template("experience_digest.md", title=title, stats=self._stats(records),
                               wins=wins, failures=failures)


@functools.lru_cache(maxsize=1)
def seed_store() -> ExperienceStore | None:
    """The seed shipped in knowledge/experience/*.jsonl, loaded into a private in-memory store."""
    from kernelopt.experience.importers import read_records
    from kernelopt.resources import data_dir

    folder = data_dir("knowledge") / "experience"
    files = sorted(folder.glob("*.jsonl")) if folder.is_dir() else []
    if not files:
        return None
    store = ExperienceStore(":memory:", seed=False)
    for f in files:
        store.add_many(read_records(f), skip_existing=True)
    return store
