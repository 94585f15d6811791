"""Reading user-given files: one place that turns I/O errors into one-line BadInput."""

from __future__ import annotations

import os
from pathlib import Path

from kernelopt.errors import BadInput


def read_text(path: str | Path, what: str = "") -> str:
    """The file's UTF-8 text; BadInput naming the file when it is missing or unreadable.

    `what` names the kind of file in the message for a missing one ("no such problem file").
    """
    path = Path(path)
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise BadInput(f"{path}: no such {what + ' ' if what else ''}file") from None
    except IsADirectoryError:
        raise BadInput(f"{path}: is a directory, expected a file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise BadInput(f"{path}: cannot read: {exc}") from None


def read_bytes(path: str | Path, what: str = "") -> bytes:
    """The file's bytes exactly as stored (what a hash must be taken of); BadInput as `read_text`."""
    path = Path(path)
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise BadInput(f"{path}: no such {what + ' ' if what else ''}file") from None
    except IsADirectoryError:
        raise BadInput(f"{path}: is a directory, expected a file") from None
    except OSError as exc:
        raise BadInput(f"{path}: cannot read: {exc}") from None


def cache_dir() -> Path:
    """kernelopt's directory under the user's cache directory: $XDG_CACHE_HOME/kernelopt, else
    ~/.cache/kernelopt (the measured device ceilings and the baseline cache live there)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "kernelopt"
