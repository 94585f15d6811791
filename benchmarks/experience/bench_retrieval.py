"""Retrieval quality: does recommend put the strategy that helped at the top?

  python benchmarks/experience/bench_retrieval.py

The labelled set (retrieval_set.jsonl, see README.md for how it was built) holds
situations (kernel description, backend, chip, bottleneck, stall) and the strategy
id(s) known to address each. The records searched are the seed shipped in
knowledge/experience/ (an empty user database, as on a new install). A situation is
a top-k hit when one of its expected strategies is among the first k recommendations.

Compared:
  kernelopt            ExperienceStore.recommend, experience only (packs left out)
  kernelopt+packs      the same with the strategy packs merged in (the default)
  kernelopt_bm25_fallback
                       experience only, no embedding model (KERNELOPT_NO_EMBEDDINGS=1): FTS5 BM25
  exact-match baseline each successful record scores kernel +40, backend +50, chip +20,
                       bottleneck +30 on exact (case-insensitive) equality; a strategy
                       scores its best record; ties go to more records, then the id
                       (alphabetical)

Writes benchmarks/experience/results/retrieval.json.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import provenance, write_result  # noqa: E402

from kernelopt.experience.store import ExperienceStore, seed_store  # noqa: E402
from kernelopt.models import ExperienceRecord, Situation  # noqa: E402
from kernelopt.recommend import recommend  # noqa: E402

HERE = Path(__file__).parent


def exact_match(records: list[ExperienceRecord], s: Situation) -> list[str]:
    def eq(a: str | None, b: str | None) -> bool:
        return bool(a) and bool(b) and a.strip().lower() == b.strip().lower()  # type: ignore[union-attr]

    best: dict[str, float] = {}
    count: dict[str, int] = defaultdict(int)
    for r in records:
        if r.outcome != "success":
            continue
        score = 40 * eq(r.kernel, s.kernel) + 50 * eq(r.backend, s.backend) + 20 * eq(r.chip, s.chip) \
            + 30 * eq(r.bottleneck, s.bottleneck)
        for sid in r.strategies:
            best[sid] = max(best.get(sid, 0), score)
            count[sid] += 1
    return sorted(best, key=lambda sid: (-best[sid], -count[sid], sid))


def main() -> None:
    prov = provenance("python benchmarks/experience/bench_retrieval.py")  # at the start: loadavg before the run
    cases = [json.loads(line) for line in (HERE / "retrieval_set.jsonl").read_text().splitlines() if line.strip()]
    seed = seed_store()
    assert seed is not None
    records = seed.list()
    hits: dict[str, dict[str, int]] = {m: {"top1": 0, "top3": 0} for m in ("kernelopt", "kernelopt+packs", "kernelopt_bm25_fallback", "exact_match")}
    rows = []
    with tempfile.TemporaryDirectory() as tmp, ExperienceStore(Path(tmp) / "empty.db") as store:
        for case in cases:
            expected = set(case.pop("expected"))
            s = Situation(**case)
            ranked = {
                "kernelopt": [r.strategy for r in recommend(s, n=10, include_packs=False, store=store).recommendations],
                "kernelopt+packs": [r.strategy for r in recommend(s, n=10, store=store).recommendations],
                "exact_match": exact_match(records, s),
            }
            os.environ["KERNELOPT_NO_EMBEDDINGS"] = "1"
            try:
                ranked["kernelopt_bm25_fallback"] = [
                    r.strategy for r in recommend(s, n=10, include_packs=False, store=store).recommendations]
            finally:
                del os.environ["KERNELOPT_NO_EMBEDDINGS"]
            row = {"situation": case, "expected": sorted(expected)}
            for method, order in ranked.items():
                hits[method]["top1"] += bool(expected & set(order[:1]))
                hits[method]["top3"] += bool(expected & set(order[:3]))
                row[method] = order[:3]
            rows.append(row)
    n = len(cases)
    result = {
        "situations": n,
        "records_searched": len(records),
        "rates": {m: {"top1": round(h["top1"] / n, 3), "top3": round(h["top3"] / n, 3),
                   "top1_hits": h["top1"], "top3_hits": h["top3"]} for m, h in hits.items()},
        "per_situation": rows,
        "provenance": prov,
    }
    print(write_result("retrieval", result))
    print(json.dumps(result["rates"], indent=1))


if __name__ == "__main__":
    main()
