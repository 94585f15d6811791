"""Load problems and candidates: static checks in the parent, execution only in a child.

A problem is a KernelBench-style file: `class Model(nn.Module)`, `get_inputs()`,
`get_init_inputs()` and shape constants at module level. A candidate defines
`class ModelNew` or `def kernel_function(...)`.

The parent process never executes either file: `load_problem`/`load_candidate`
only parse them with `ast`, so a malformed or malicious file is rejected (or
carried into a child process) without running. `import_problem`/`import_candidate`
execute them and are called only inside child processes (see
`kernelopt.harness.binding`). torch is not imported here.
"""

from __future__ import annotations

import ast
import hashlib
import importlib.machinery
import importlib.util
import sys
import types
from pathlib import Path
from typing import Any

from kernelopt.errors import BadInput
from kernelopt.files import read_bytes, read_text
from kernelopt.models.harness import Candidate, Problem

PROBLEM_ENTRIES = ("Model", "get_inputs", "get_init_inputs")
TOLERANCE_NAMES = {"atol": ("atol", "ATOL"), "rtol": ("rtol", "RTOL")}

# Decorator/attribute names that mark a Triton kernel; call names that mark CUDA.
_TRITON_DECORATORS = {"jit", "autotune", "heuristics"}
_CUDA_CALLS = {"load_inline", "load", "compile_extension"}


def _parse(path: Path, source: str) -> ast.Module:
    try:
        return ast.parse(source, filename=str(path))
    except SyntaxError as exc:
        line = f":{exc.lineno}" if exc.lineno else ""
        raise BadInput(f"{path}{line}: syntax error: {exc.msg}") from None
    except ValueError as exc:  # e.g. null bytes in the source
        raise BadInput(f"{path}: cannot parse: {exc}") from None


def _top_level_names(tree: ast.Module) -> dict[str, ast.stmt]:
    """Names bound by top-level class/def/assignment statements."""
    names: dict[str, ast.stmt] = {}
    for node in tree.body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            names[node.name] = node
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    names[target.id] = node
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names[node.target.id] = node
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                names[(alias.asname or alias.name).split(".")[0]] = node
    return names


def _constant_assignments(tree: ast.Module) -> dict[str, ast.Assign | ast.AnnAssign]:
    """Top-level `NAME = <literal>` statements: the constants `--set` may override."""
    out: dict[str, ast.Assign | ast.AnnAssign] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            name, value = node.targets[0].id, node.value
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
            name, value = node.target.id, node.value
        else:
            continue
        try:
            ast.literal_eval(value)
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            continue
        out[name] = node
    return out


def _is_scalar(value: Any) -> bool:
    return isinstance(value, (bool, int, float, str)) or (
        isinstance(value, tuple) and all(isinstance(v, (bool, int, float, str)) for v in value)
    )


def type_override(path: Path, name: str, raw: str, current: Any) -> Any:
    """Type a `--set` value with `ast.literal_eval` (never eval); follow the constant's type."""
    text = raw.strip()
    if text.lower() in ("true", "false"):
        value: Any = text.lower() == "true"
    else:
        try:
            value = ast.literal_eval(text)
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            if isinstance(current, str):
                value = text
            else:
                raise BadInput(f"{path}: --set {name}={raw}: not a Python literal (int, float, bool, string)") from None
    if isinstance(current, bool) or isinstance(value, bool):
        if not isinstance(value, bool) or not isinstance(current, bool):
            raise BadInput(f"{path}: --set {name}={raw}: {name} is {current!r}, expected the same type")
    elif isinstance(current, float) and isinstance(value, int):
        value = float(value)
    elif isinstance(current, int) and isinstance(value, float):
        if not value.is_integer():
            raise BadInput(f"{path}: --set {name}={raw}: {name} is an integer")
        value = int(value)
    if not _is_scalar(value):
        raise BadInput(f"{path}: --set {name}={raw}: only scalars and tuples of scalars are allowed")
    return value


def load_problem(path: str | Path, overrides: dict[str, str] | None = None, dtype: str | None = None) -> Problem:
    """Check a problem file statically and type its overrides; nothing is executed.

    Raises BadInput (exit 2) naming the file for: a missing file, a syntax error, a
    missing `Model`/`get_inputs`/`get_init_inputs`, an override of a name that is not
    a module-level literal constant, or a value that is not a literal.
    """
    p = Path(path)
    source = read_text(p, "problem")
    tree = _parse(p, source)
    names = _top_level_names(tree)
    missing = [n for n in PROBLEM_ENTRIES if n not in names]
    if missing:
        raise BadInput(f"{p}: not a problem file: missing {', '.join(missing)} (needs Model, get_inputs, get_init_inputs)")
    if dtype is not None and dtype not in ("fp32", "fp16", "bf16"):
        raise BadInput(f"--dtype {dtype}: expected fp32, fp16 or bf16")
    assigns = _constant_assignments(tree)
    constants: dict[str, Any] = {name: ast.literal_eval(node.value) for name, node in assigns.items()}  # type: ignore[arg-type]
    constants = {k: v for k, v in constants.items() if _is_scalar(v)}
    typed: dict[str, Any] = {}
    for name, raw in (overrides or {}).items():
        if name not in constants:
            known = ", ".join(sorted(constants)) or "none"
            raise BadInput(f"{p}: --set {name}: no module-level constant {name} (constants: {known})")
        typed[name] = type_override(p, name, str(raw), constants[name])
    constants.update(typed)
    tolerances: dict[str, float | None] = {}
    for key, spellings in TOLERANCE_NAMES.items():
        tolerances[key] = None
        for spelling in spellings:
            value = constants.get(spelling)
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                tolerances[key] = float(value)
    name = p.parent.name if p.stem == "problem" else p.stem
    return Problem(
        path=str(p.resolve()),
        name=name,
        overrides=typed,
        dtype=dtype,  # type: ignore[arg-type]
        constants=constants,
        atol=tolerances["atol"],
        rtol=tolerances["rtol"],
    )


def small_shape(path: str | Path) -> dict[str, str] | None:
    """The problem's module-level `SMALL` dict (its small shape) as `--set` strings; None when it
    declares none. Read statically, never run."""
    p = Path(path)
    for node in _parse(p, read_text(p, "problem")).body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "SMALL" for t in node.targets):
            try:
                value = ast.literal_eval(node.value)
            except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
                return None
            return {str(k): str(v) for k, v in value.items()} if isinstance(value, dict) and value else None
    return None


def read_families(suite_dir: Path) -> dict[str, str]:
    """problem -> family from a suite README's table (`| name | family | ...`), if it has one."""
    readme = Path(suite_dir) / "README.md"
    if not readme.is_file():
        return {}
    out: dict[str, str] = {}
    for line in readme.read_text(encoding="utf-8", errors="replace").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.lstrip().startswith("|") and len(cells) >= 2 and cells[0] and cells[0] != "problem" \
                and not set(cells[0]) <= set("-: "):
            out.setdefault(cells[0], cells[1])
    return out


def declared_family(path: str | Path) -> str | None:
    """The problem family the problem declares: its module-level `FAMILY = "..."` string, else the
    row for its folder in the README table of the folder above (how a suite such as
    benchmarks/suite lists its problems' families); None when neither says. Read statically."""
    p = Path(path)
    for node in _parse(p, read_text(p, "problem")).body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "FAMILY" for t in node.targets):
            value = node.value.value if isinstance(node.value, ast.Constant) else None
            if not isinstance(value, str) or not value.strip():
                raise BadInput(f"{p}:{node.lineno}: FAMILY must be a non-empty string literal")
            return value.strip()
    folder = p.resolve().parent
    return read_families(folder.parent).get(folder.name) or None


def _dotted(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    if isinstance(node, ast.Call):
        return _dotted(node.func)
    return ""


def detect_backend(tree: ast.Module) -> str:
    """`triton` if any function is decorated with triton.jit/autotune, `cuda` for
    cpp_extension.load_inline/load or raw CUDA source (`__global__`), else `torch`."""
    imports_triton = False
    cpp_functions: set[str] = set()  # names imported from cpp_extension
    cpp_modules: set[str] = set()  # names the cpp_extension module is bound to
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imports_triton |= any(a.name.split(".")[0] == "triton" for a in node.names)
            cpp_modules.update(a.asname for a in node.names if a.asname and a.name.endswith("cpp_extension"))
        elif isinstance(node, ast.ImportFrom) and node.module:
            if node.module.split(".")[0] == "triton":
                imports_triton = True
            if node.module.endswith("cpp_extension"):
                cpp_functions.update(a.asname or a.name for a in node.names)
            cpp_modules.update(a.asname or a.name for a in node.names if a.name == "cpp_extension")
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for dec in node.decorator_list:
                dotted = _dotted(dec)
                parts = dotted.split(".")
                if parts[-1] in _TRITON_DECORATORS and (parts[0] == "triton" or (imports_triton and len(parts) == 1)):
                    return "triton"
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            dotted = _dotted(node.func)
            parts = dotted.split(".")
            owner = ".".join(parts[:-1])
            if parts[-1] in _CUDA_CALLS and ("cpp_extension" in parts or owner in cpp_modules or dotted in cpp_functions):
                return "cuda"
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and "__global__" in node.value:
            return "cuda"
    return "torch"


def load_candidate(path: str | Path) -> Candidate:
    """Check a candidate file statically: entry point, backend, sha256. Nothing is executed."""
    p = Path(path)
    # One read: the bytes parsed are the bytes hashed (the runner compares what it loads with this hash).
    data = read_bytes(p, "candidate")
    try:
        source = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadInput(f"{p}: cannot read: {exc}") from None
    tree = _parse(p, source)
    names = _top_level_names(tree)
    if "ModelNew" in names:
        entry = "ModelNew"
    elif "kernel_function" in names:
        entry = "kernel_function"
    else:
        raise BadInput(f"{p}: not a candidate: defines neither class ModelNew nor function kernel_function")
    return Candidate(
        path=str(p.resolve()),
        name=p.stem,
        backend=detect_backend(tree),  # type: ignore[arg-type]
        entry=entry,  # type: ignore[arg-type]
        sha256=hashlib.sha256(data).hexdigest(),
    )


def normalized_source_hash(source: str) -> str:
    """sha256 of a candidate's source without comments, blank lines and indentation tokens: two
    files that differ only there are the same candidate (the loop and every optimizer dedup by it)."""
    import io
    import tokenize

    try:
        tokens = [
            (tok.type, tok.string)
            for tok in tokenize.generate_tokens(io.StringIO(source).readline)
            if tok.type not in (tokenize.COMMENT, tokenize.NL, tokenize.INDENT, tokenize.DEDENT)
        ]
        text = repr(tokens)
    except (tokenize.TokenError, IndentationError, SyntaxError):
        text = "\n".join(line.rstrip() for line in source.splitlines() if line.strip())
    return hashlib.sha256(text.encode()).hexdigest()


def cuda_sources(path: str | Path) -> list[str]:
    """String literals of a candidate that hold CUDA code (for compiling without a GPU)."""
    p = Path(path)
    tree = _parse(p, read_text(p, "candidate"))
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and "__global__" in node.value:
            out.append(node.value)
    return out


# --- execution: child processes only -------------------------------------------------


class _SourceLoader(importlib.machinery.SourceFileLoader):
    """Compile from source every time, with `--set` overrides substituted into the tree.

    No bytecode cache is read or written: a cached .pyc would carry another run's
    overrides, and examples/ folders stay clean.
    """

    def __init__(self, fullname: str, path: str, overrides: dict[str, Any]) -> None:
        super().__init__(fullname, path)
        self.overrides = overrides

    def get_code(self, fullname: str) -> types.CodeType:
        path = Path(self.get_filename(fullname))
        tree = _parse(path, read_text(path, "source"))
        _apply_overrides(path, tree, self.overrides)
        return compile(tree, str(path), "exec", dont_inherit=True)


def _apply_overrides(path: Path, tree: ast.Module, overrides: dict[str, Any]) -> None:
    # The constant's assignment is rewritten before the module runs, so constants
    # derived from it (`N = ROWS * COLS`) and `get_inputs()` both see the new value.
    assigns = _constant_assignments(tree)
    for name, value in overrides.items():
        node = assigns.get(name)
        if node is None:
            raise BadInput(f"{path}: --set {name}: no module-level constant {name}")
        if isinstance(value, (tuple, list)):  # a tuple comes back from JSON as a list
            new: ast.expr = ast.Tuple([ast.Constant(v) for v in value], ast.Load())
        else:
            new = ast.Constant(value)
        node.value = ast.copy_location(new, node.value)
    ast.fix_missing_locations(tree)


def _import_file(path: Path, module_name: str, overrides: dict[str, Any]) -> types.ModuleType:
    loader = _SourceLoader(module_name, str(path), overrides)
    spec = importlib.util.spec_from_file_location(module_name, path, loader=loader)
    if spec is None:
        raise BadInput(f"{path}: cannot import")
    module = importlib.util.module_from_spec(spec)
    # Triton and inspect find kernel source through sys.modules and the file name.
    sys.modules[module_name] = module
    loader.exec_module(module)
    return module


def import_problem(problem: Problem) -> types.ModuleType:
    """Execute the problem file (child processes only) with its overrides applied."""
    digest = hashlib.sha256(problem.path.encode()).hexdigest()[:12]
    return _import_file(Path(problem.path), f"kernelopt_problem_{digest}", problem.overrides)


def import_candidate(candidate: Candidate, module_name: str | None = None, *,
                     source: str | None = None) -> types.ModuleType:
    """Import the candidate file (child processes only), its folder on sys.path for helpers.

    `source`: the text to run, as the verifier read it and checked against the hash the
    engine sent (the file itself may have been rewritten since); without it the file is
    read once. Either way the text is put in `linecache` under the file's name, so
    Triton's `inspect.getsource` compiles this very text even if the file changes on disk
    meanwhile. The module records the hash of what ran as `__kernelopt_sha256__`.
    """
    import linecache

    path = Path(candidate.path)
    folder = str(path.parent)
    if folder not in sys.path:
        sys.path.insert(0, folder)
    data = source.encode("utf-8") if source is not None else path.read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    source = data.decode("utf-8")
    lines = source.splitlines(keepends=True)
    # mtime None: linecache.checkcache() never drops or re-reads this entry.
    linecache.cache[str(path)] = (len(source), None, lines, str(path))
    code = compile(_parse(path, source), str(path), "exec", dont_inherit=True)
    name = module_name or f"kernelopt_candidate_{digest[:12]}"
    module = types.ModuleType(name)
    module.__file__ = str(path)
    module.__kernelopt_sha256__ = digest  # type: ignore[attr-defined]
    # Triton and inspect find kernel source through sys.modules and the file name.
    sys.modules[name] = module
    exec(code, module.__dict__)  # noqa: S102 - the candidate is the code under test, run in a worker
    return module
