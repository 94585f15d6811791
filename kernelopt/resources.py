"""Where the data folders (strategies/, knowledge/, templates/) live.

In a checkout (editable install) they sit beside the `kernelopt` package; in a wheel
they are package data under `kernelopt/data/`. Both resolve through `data_dir`, so
a non-editable install and a checkout behave the same.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any, Literal

DataFolder = Literal["strategies", "knowledge", "templates"]


@functools.lru_cache(maxsize=None)
def data_dir(folder: DataFolder) -> Path:
    checkout = Path(__file__).resolve().parent.parent / folder
    if checkout.is_dir() and (checkout.parent / "setup.cfg").is_file():
        return checkout
    import importlib.resources

    return Path(str(importlib.resources.files("kernelopt.data") / folder))


@functools.lru_cache(maxsize=1)
def _template_env() -> Any:
    # One environment per process, so each template is compiled once (10-20 ms each),
    # not on every render; jinja2 still reloads a template whose file changed.
    import jinja2

    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(data_dir("templates"))),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )


def render_template(name: str, **context: Any) -> str:
    """Render `templates/<name>` with jinja2 (autoescape off: the outputs are Markdown/text)."""
    return _template_env().get_template(name).render(**context)
