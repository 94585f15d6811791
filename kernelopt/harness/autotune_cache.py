"""Triton's autotune results, kept for the runners of one verifier (one engine, one device).

A kernel with an `@triton.autotune` table benchmarks every config on its first call for each key,
in every process, and each evaluation runs in a fresh runner: the finish's A-B-B-A re-timing ran
each autotuned version's table twice more, the winner's last verification once more (issue #23).
Triton (>= 3.4) can keep an autotuner's choice on disk (`TRITON_CACHE_AUTOTUNING`), keyed by
Triton's version, the target (`cuda:90`: an H100 and an H200 share it), the kernel's source hash,
the autotune key's values and dtypes, and the configs; the file lands in Triton's cache dir with
the compiled kernels, which is per user and outlives runs and devices.

So the runners of one verifier get their own store for these files only, a directory the
verifier makes and removes (`KERNELOPT_AUTOTUNE_DIR`), through a cache manager that routes
`*.autotune.json` there and everything else (the compiled kernels) to Triton's own dir
(`TRITON_CACHE_MANAGER`). A later runner of the same candidate in the same engine then uses the
config its first runner chose on this device, and on one GPU the re-timing and the final
verification run the config the search timed (with several, they run on the first verifier, whose
store lacks the choices made on the others: those versions benchmark their table again). A choice never crosses engines (a resumed run, a shape check, another
run) nor devices. The timed calls and the verification are unchanged; only which config runs.

A candidate could already write Triton's cache (compiled kernels included) in worker and
candidate isolation: this store gives it nothing new. Sandboxed runners write only their own
private dir, so they share nothing and autotune caching stays off there. Where the user names a
cache manager of their own, results could not be kept apart: caching stays off too.
"""

from __future__ import annotations

import functools
import os
import tempfile
from pathlib import Path
from typing import Any

AUTOTUNE_DIR_VAR = "KERNELOPT_AUTOTUNE_DIR"
CACHE_FLAG_VAR = "TRITON_CACHE_AUTOTUNING"
MANAGER_VAR = "TRITON_CACHE_MANAGER"
MANAGER = "kernelopt.harness.autotune_cache:RunAutotuneCache"
# The name Triton's autotuner gives its result file (`Autotuner.check_disk_cache`).
SUFFIX = ".autotune.json"


def _users_own_manager() -> bool:
    own_manager = os.environ.get(MANAGER_VAR)
    return bool(own_manager) and own_manager != MANAGER


def keeps_choices(isolate: str) -> bool:
    """Whether an engine's runners under `isolate` keep their autotune choices (the verifier makes
    a store for every mode but `sandbox`, and it is used unless the user names a cache manager)."""
    return isolate != "sandbox" and not _users_own_manager()


def runner_autotune_env(autotune_dir: Path | None) -> dict[str, str]:
    """What a runner's environment adds: autotune results kept in `autotune_dir` (shared by the
    runners of one verifier), or, without one, autotune caching off (whatever the user's
    environment says: a result in Triton's per-user dir would cross runs and devices)."""
    if autotune_dir is None or _users_own_manager():
        return {CACHE_FLAG_VAR: "0"}
    return {CACHE_FLAG_VAR: "1", MANAGER_VAR: MANAGER, AUTOTUNE_DIR_VAR: str(autotune_dir)}


@functools.cache
def _manager_class() -> type:
    from triton.runtime.cache import FileCacheManager

    class RunAutotuneCache(FileCacheManager):  # type: ignore[misc, valid-type]
        """Triton's file cache, with the autotuner's result files in `$KERNELOPT_AUTOTUNE_DIR`."""

        def __init__(self, key: str, override: bool = False, dump: bool = False) -> None:
            super().__init__(key, override=override, dump=dump)
            root = os.environ.get(AUTOTUNE_DIR_VAR)
            self.tuned_dir = os.path.join(root, key) if root and not (override or dump) else None

        def get_file(self, filename: str) -> str | None:
            if filename.endswith(SUFFIX):
                if self.tuned_dir is None:
                    return None  # no store of this verifier's: never Triton's per-user dir
                path = os.path.join(self.tuned_dir, filename)
                return path if os.path.isfile(path) else None
            return super().get_file(filename)

        def put(self, data: Any, filename: str, binary: bool = True) -> str:
            if not filename.endswith(SUFFIX):
                return super().put(data, filename, binary)
            if self.tuned_dir is None:
                return ""  # not kept (see get_file)
            os.makedirs(self.tuned_dir, exist_ok=True)
            path = os.path.join(self.tuned_dir, filename)
            fd, tmp = tempfile.mkstemp(dir=self.tuned_dir, prefix=".tmp-")
            with os.fdopen(fd, "wb") as out:
                out.write(data if isinstance(data, bytes) else str(data).encode())
            os.replace(tmp, path)  # a reader sees the whole file or none
            return path

    return RunAutotuneCache


def __getattr__(name: str) -> Any:
    # Triton imports `MANAGER` by name in the runner; the class needs Triton, so it is built on
    # that first lookup and this module stays importable (and cheap) where Triton is not.
    if name == "RunAutotuneCache":
        return _manager_class()
    raise AttributeError(name)
