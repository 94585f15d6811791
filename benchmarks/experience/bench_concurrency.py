"""8 processes each add 500 records to one database at the same time; count what is there.

  python benchmarks/experience/bench_concurrency.py [--procs 8] [--adds 500]

Each add is its own transaction (the way `kernelopt experience add` writes), so the
processes contend for the write lock 4,000 times. Writes
benchmarks/experience/results/concurrency.json with the expected and the counted total.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import provenance, synthetic_records, write_result  # noqa: E402


def worker(path: str, index: int, adds: int, start: "mp.synchronize.Event") -> None:
    from kernelopt.experience.importers import record_from_dict
    from kernelopt.experience.store import ExperienceStore

    records = [record_from_dict(r) for r in synthetic_records(adds, 50, seed=index)]
    store = ExperienceStore(path, seed=False)
    start.wait()
    for r in records:
        store.add(r)
    store.close()


def main() -> None:
    prov = provenance("python benchmarks/experience/bench_concurrency.py " + " ".join(sys.argv[1:]))  # at the start: loadavg before the run
    ap = argparse.ArgumentParser()
    ap.add_argument("--procs", type=int, default=8)
    ap.add_argument("--adds", type=int, default=500)
    args = ap.parse_args()
    from kernelopt.experience.store import ExperienceStore

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "concurrent.db")
        ExperienceStore(path, seed=False).close()
        ctx = mp.get_context("spawn")
        start = ctx.Event()
        procs = [ctx.Process(target=worker, args=(path, i, args.adds, start)) for i in range(args.procs)]
        for p in procs:
            p.start()
        time.sleep(3.0)  # let every process import and open the database before the race starts
        t0 = time.perf_counter()
        start.set()
        for p in procs:
            p.join()
        elapsed = time.perf_counter() - t0
        with ExperienceStore(path, seed=False) as store:
            total = store.count()
            distinct = len({r.id for r in store.list()})
            integrity = store.conn.execute("PRAGMA integrity_check").fetchone()[0]
    result = {
        "procs": args.procs, "adds_per_proc": args.adds, "expected": args.procs * args.adds,
        "counted": total, "distinct_ids": distinct, "exit_codes": [p.exitcode for p in procs],
        "integrity_check": integrity, "seconds": round(elapsed, 2),
        "adds_per_second": round(total / elapsed, 1),
        "ok": total == args.procs * args.adds == distinct and all(p.exitcode == 0 for p in procs),
        "provenance": prov,
    }
    print(write_result("concurrency", result))
    print({k: v for k, v in result.items() if k != "provenance"})


if __name__ == "__main__":
    main()
