"""The experience store's search side: a per-process column view of the records, and
similarity of a text to them (embeddings, or BM25 when no model loads).

Storage is `kernelopt.experience.store`; ranking strategies from these columns is the
recommend stage's (`kernelopt.recommend`). This module imports neither.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kernelopt.experience.labels import chip_family, device_model, kernel_text, shape_class
from kernelopt.models.experience import SearchHit

if TYPE_CHECKING:
    import numpy as np

    from kernelopt.experience.embeddings import Embedder

# Missing situation embeddings that recommend/search compute on the spot; more than
# this and they use what is indexed and ask for `reindex` (a model run is ~10 ms/text).
LAZY_EMBED_LIMIT = 64


def situation_text(kernel: str | None) -> str:
    """The text embedded for a record and for a query: the kernel description, glossed.

    Backend, bottleneck, chip and stall are matched structurally by recommend, so they
    stay out of the text: with them in, the shared boilerplate ("triton backend, dram
    bound") outweighed the kernel words in the similarity.
    """
    return kernel_text(kernel)


@dataclass
class Index:
    """Column arrays over the user's records and the seed (rebuilt when the database changes)."""

    ids: list[str]
    seed: "np.ndarray"
    kernel: list[str]
    backend: "np.ndarray"
    chip_family: "np.ndarray"
    bottleneck: "np.ndarray"
    stall: "np.ndarray"
    strategies: list[list[str]]  # pack ids (imported names mapped: knowledge/name_mappings.yaml)
    recorded: list[list[str]]  # the names as the records hold them
    outcome: list[str | None]
    speedup: "np.ndarray"
    weight: "np.ndarray"
    situations: list[str]
    sit_idx: "np.ndarray"
    source: list[str]
    device: "np.ndarray"  # labels.device_model of the record's device ("" unknown)
    dtype: "np.ndarray"
    family: "np.ndarray"
    shape_class: "np.ndarray"
    time_after: "np.ndarray"  # ms, NaN unknown
    params: list[str | None]  # raw JSON: parsed only for the few records a seed is picked from
    feature_sets: list[frozenset[str]]  # distinct structural-feature sets
    feature_idx: "np.ndarray"  # record -> its set in feature_sets
    has_params: "np.ndarray"  # knob values recorded
    votes: "np.ndarray"  # carries a strategy, or knob values (a bare knob-run record)
    _vectors: dict[str, tuple["np.ndarray", "np.ndarray"]] = field(default_factory=dict)
    _eq: dict[tuple[str, str], "np.ndarray"] = field(default_factory=dict)

    def eq(self, column: str, value: str) -> "np.ndarray":
        """column == value as a bool array, cached: queries ask the same few values again and again,
        and comparing an object array costs ~2 ms at 10,000 records."""
        key = (column, value)
        out = self._eq.get(key)
        if out is None:
            import numpy as np

            values = getattr(self, column)
            out = self._eq[key] = np.asarray(values == value if isinstance(values, np.ndarray)
                                             else [v == value for v in values], dtype=bool)
        return out

    def vectors(self, store: Any, embedder: "Embedder", lazy_limit: int) -> tuple["np.ndarray", "np.ndarray"]:
        """(unique-situation matrix, embedded mask) for `embedder`; rows without a vector are zero."""
        import numpy as np

        cached = self._vectors.get(embedder.name)
        if cached is not None and bool(cached[1].all()):
            return cached
        found = store.embed_texts(self.situations, embedder, limit=lazy_limit)
        mat = np.zeros((len(self.situations), embedder.dim), dtype=np.float32)
        mask = np.zeros(len(self.situations), dtype=bool)
        for i, text in enumerate(self.situations):
            vec = found.get(text)
            if vec is not None:
                mat[i], mask[i] = vec, True
        self._vectors[embedder.name] = (mat, mask)
        return mat, mask

    def knobs(self, i: int) -> dict[str, Any]:
        raw = self.params[i]
        value = json.loads(raw) if raw else {}
        return value if isinstance(value, dict) else {}


_COLUMNS = ("id, kernel, backend, COALESCE(chip, device), bottleneck, stall, strategies, outcome, speedup, "
            "merged_from, source, device, dtype, family, dims, params, time_after_ms, features")


def build_index(store: Any) -> Index:
    import numpy as np

    rows: list[tuple[Any, ...]] = []
    # The chip column falls back to the device name: chip_family knows both spellings.
    sql = f"SELECT {_COLUMNS} FROM records WHERE merged_into IS NULL"
    rows += [(False, *r) for r in store.conn.execute(sql)]
    seed = store._seed()
    if seed is not None:
        rows += [(True, *r) for r in seed.conn.execute(sql)]
    # Computed from the kernel, once per distinct kernel: the stored `situation` column
    # only feeds full-text search.
    text_of: dict[str, str] = {}
    situations: dict[str, int] = {}
    sit_idx = []
    for r in rows:
        text = text_of.get(r[2])
        if text is None:
            text = text_of[r[2]] = situation_text(r[2])
        sit_idx.append(situations.setdefault(text, len(situations)))
    lower = lambda v: (v or "").strip().lower()  # noqa: E731
    from kernelopt.experience.names import load_mappings

    names = load_mappings()
    recorded = [json.loads(r[7] or "[]") for r in rows]
    classes: dict[str | None, str] = {}
    for r in rows:
        if r[15] not in classes:
            try:
                classes[r[15]] = shape_class(json.loads(r[15])) if r[15] else ""
            except ValueError:
                classes[r[15]] = ""
    has_params = np.array([r[16] not in (None, "", "{}") for r in rows], dtype=bool)
    feature_sets: dict[frozenset[str], int] = {}
    parsed: dict[str | None, int] = {}
    feature_idx = []
    for r in rows:
        if r[18] not in parsed:
            parsed[r[18]] = feature_sets.setdefault(frozenset(json.loads(r[18]) if r[18] else ()), len(feature_sets))
        feature_idx.append(parsed[r[18]])
    return Index(
        ids=[r[1] for r in rows],
        seed=np.array([r[0] for r in rows], dtype=bool),
        kernel=[r[2] for r in rows],
        backend=np.array([r[3] or "" for r in rows], dtype=object),
        chip_family=np.array([chip_family(r[4]) or "" for r in rows], dtype=object),
        bottleneck=np.array([r[5] or "" for r in rows], dtype=object),
        stall=np.array([lower(r[6]) for r in rows], dtype=object),
        strategies=[[names.strategy(x, r[3]) for x in rec] for r, rec in zip(rows, recorded)],
        recorded=recorded,
        outcome=[r[8] for r in rows],
        speedup=np.array([np.nan if r[9] is None else r[9] for r in rows], dtype=np.float64),
        weight=np.array([1 + len(json.loads(r[10] or "[]")) for r in rows], dtype=np.float64),
        situations=list(situations),
        sit_idx=np.array(sit_idx, dtype=np.int64),
        source=[r[11] or "" for r in rows],
        device=np.array([device_model(r[12]) or "" for r in rows], dtype=object),
        dtype=np.array([lower(r[13]) for r in rows], dtype=object),
        family=np.array([lower(r[14]) for r in rows], dtype=object),
        shape_class=np.array([classes[r[15]] or "" for r in rows], dtype=object),
        time_after=np.array([np.nan if r[17] is None else r[17] for r in rows], dtype=np.float64),
        params=[r[16] for r in rows],
        feature_sets=list(feature_sets),
        feature_idx=np.array(feature_idx, dtype=np.int64),
        has_params=has_params,
        votes=has_params | np.array([bool(rec) for rec in recorded], dtype=bool),
    )


def semantic_scores(store: Any, idx: Index, text: str, notes: list[str]) -> tuple["np.ndarray", str]:
    """Similarity of `text` to every record's situation: cosine with a model, else BM25."""
    import numpy as np

    from kernelopt.experience.embeddings import load_embedder

    n = len(idx.ids)
    embedder = load_embedder()
    if embedder is not None:
        mat, mask = idx.vectors(store, embedder, LAZY_EMBED_LIMIT)
        if not mask.all():
            notes.append(f"{int((~mask).sum())} situation(s) not embedded yet: run `kernelopt experience reindex`")
        q = store.embed_texts([text], embedder)[text]
        return np.clip(mat @ q, 0.0, 1.0)[idx.sit_idx], "embedding"
    from kernelopt.experience.embeddings import load_error, model_name

    why = load_error()
    notes.append(f"no embedding model could be loaded ({why or model_name()}): ranking by BM25 (SQLite FTS5) "
                 "instead of meaning")
    return lexical_scores(store, idx, text, limit=n or 1), "bm25"


def lexical_scores(store: Any, idx: Index, query: str, limit: int = 200) -> "np.ndarray":
    """BM25 relevance of `query` to every record of the index, the user's and the seed's."""
    import numpy as np

    lex = dict(store.lexical(query, limit=limit))
    seed = store._seed()
    if seed is not None:
        lex.update(seed.lexical(query, limit=limit))
    return np.array([lex.get(i, 0.0) for i in idx.ids], dtype=np.float64)


def search(store: Any, query: str, n: int = 10) -> list[SearchHit]:
    """Records nearest to a free-text query: 0.7 * situation similarity + 0.3 * BM25 over all text."""
    import numpy as np

    notes: list[str] = []
    idx = store.index()
    sem, mode = semantic_scores(store, idx, situation_text(query), notes)
    lexv = lexical_scores(store, idx, query)
    score = lexv if mode == "bm25" else 0.7 * sem + 0.3 * lexv
    seed = store._seed()
    order = [i for i in np.argsort(-score, kind="stable")[:n].tolist() if score[i] > 0]
    hits = []
    for i in order:
        owner = seed if idx.seed[i] and seed is not None else store
        hits.append(SearchHit(record=owner.get(idx.ids[i]), score=round(float(score[i]), 4), seed=bool(idx.seed[i])))
    return hits
