"""Input binding: THE one place that turns a Problem and a Candidate into callables.

`prepare()` imports the problem (overrides applied before `get_inputs()` runs),
builds the reference `Model(*get_init_inputs())`, casts and moves it, and builds
the candidate callable:

- `ModelNew` is constructed with the same init inputs and the same seed, then the
  reference's parameters and buffers are copied in where the names (or, failing
  that, a unique last name component) and shapes match, so both compute with the
  same weights.
- `kernel_function(...)` gets the inputs from `get_inputs()` positionally; every
  further parameter is bound by name from the reference model (see
  `reference_settings`): parameters/buffers such as `weight`, `bias`, settings
  such as `eps`, `stride`, `padding`, `dilation`, `kernel_size`, `groups`, and the
  problem's module-level constants.

Verification, timing and profiling all call this, inside their child processes.
"""

from __future__ import annotations

import inspect
import random
import types
from dataclasses import dataclass, field
from typing import Any, Callable, Literal

from kernelopt.errors import BadInput
from kernelopt.harness.isolate import ChildError
from kernelopt.models.harness import Candidate, Problem
from kernelopt.problem import import_candidate, import_problem

TORCH_DTYPES = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16"}
_SETTING_TYPES = (bool, int, float, str)
_NOT_SETTINGS = {"training"}


class Settings(dict):  # type: ignore[type-arg]
    """reference_settings' answer: name -> value, plus which names are the model's own, bare."""

    model_keys: frozenset[str] = frozenset()


def torch_dtype(name: str | None) -> Any:
    import torch

    return None if name is None else getattr(torch, TORCH_DTYPES[name])


def device_context(device: str) -> Any:
    """`with torch.device(device):` on a GPU (factories without a device allocate there); nothing on the CPU."""
    import contextlib

    if not device.startswith("cuda"):
        return contextlib.nullcontext()
    import torch

    return torch.device(device)


def seed_everything(seed: int) -> None:
    import torch

    random.seed(seed)
    torch.manual_seed(seed)
    try:
        import numpy

        numpy.random.seed(seed % (2**32))
    except ImportError:
        pass


def as_outputs(result: Any) -> list[Any]:
    """A forward's result as a list of outputs (a tensor, or a tuple/list of them)."""
    if isinstance(result, (tuple, list)):
        return list(result)
    return [result]


def to_device(values: list[Any], device: str, dtype: Any | None) -> list[Any]:
    """Move tensors to `device`, casting floating ones to `dtype` when given."""
    import torch

    out = []
    for value in values:
        if isinstance(value, torch.Tensor):
            if dtype is not None and value.is_floating_point():
                value = value.to(dtype)
            value = value.to(device)
        out.append(value)
    return out


def clone_values(values: list[Any]) -> list[Any]:
    import torch

    return [v.clone() if isinstance(v, torch.Tensor) else v for v in values]


def classify_exception(exc: BaseException) -> Literal["compile", "runtime"]:
    """compile: the kernel could not be built (Triton compiler, the Triton interpreter's
    semantic checks, a C++/CUDA extension build); runtime: anything else it raised."""
    names = {cls.__name__ for cls in type(exc).__mro__}
    if names & {"CompilationError", "InterpreterError", "CalledProcessError"}:
        return "compile"
    if isinstance(exc, (ImportError, SyntaxError)):
        return "compile"
    if isinstance(exc, RuntimeError) and "Error building extension" in str(exc):
        return "compile"
    return "runtime"


def describe_exception(exc: BaseException, limit: int = 500) -> str:
    text = f"{type(exc).__name__}: {exc}".strip()
    return text if len(text) <= limit else text[: limit - 3] + "..."


def reference_settings(model: Any, problem_module: types.ModuleType | None = None) -> Settings:
    """Name -> value that a `kernel_function` parameter can be bound to.

    Priority (first wins for a bare name): the root model's own parameters,
    buffers and scalar attributes, then each submodule's in registration order;
    every submodule entry is also available as `<path>_<name>` (`conv_weight`,
    `norm_eps`, `layers_0_bias`); last, the problem's module-level scalar constants.
    """
    settings = Settings()
    bare: set[str] = set()

    def add(name: str, value: Any) -> None:
        settings.setdefault(name, value)

    for path, module in model.named_modules():
        prefix = path.replace(".", "_")
        entries: list[tuple[str, Any]] = []
        # _parameters keeps None entries (Conv2d(bias=False).bias): a `bias`
        # parameter of kernel_function must then receive None.
        entries += list(getattr(module, "_parameters", {}).items())
        entries += list(getattr(module, "_buffers", {}).items())
        for attr, value in vars(module).items():
            if attr.startswith("_") or attr in _NOT_SETTINGS:
                continue
            if isinstance(value, _SETTING_TYPES) or (
                isinstance(value, (tuple, list)) and all(isinstance(v, _SETTING_TYPES) for v in value)
            ):
                entries.append((attr, value))
        for name, value in entries:
            add(name, value)
            bare.add(name)
            if prefix:
                add(f"{prefix}_{name}", value)
    # Which names come from the model itself, bare (for kernel_function(**kwargs)).
    settings.model_keys = frozenset(bare)
    if problem_module is not None:
        for name, value in vars(problem_module).items():
            if not name.startswith("_") and isinstance(value, _SETTING_TYPES):
                add(name, value)
    return settings


def bind_kernel_function(fn: Callable[..., Any], n_inputs: int, settings: dict[str, Any]) -> dict[str, Any]:
    """Keyword arguments for `fn` beyond its first `n_inputs` positional parameters.

    Raises ChildError("runtime") naming the parameter when one can be bound neither
    to an input, nor to a reference setting, nor left to its default.
    """
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError) as exc:
        raise ChildError("runtime", f"kernel_function: cannot read its signature: {exc}") from None
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    has_varargs = any(p.kind == p.VAR_POSITIONAL for p in params)
    if len(positional) < n_inputs and not has_varargs:
        raise ChildError(
            "runtime",
            f"kernel_function takes {len(positional)} positional parameters but get_inputs() returns {n_inputs} inputs",
        )
    kwargs: dict[str, Any] = {}
    if any(p.kind == p.VAR_KEYWORD for p in params):
        # KernelAgent's convention: `kernel_function(x, *args, **kwargs)` looks its
        # settings up by name (weight, bias, stride, padding, dilation, output_padding,
        # groups, kernel_size, eps, ...). Every bare-named setting of the reference model
        # goes in; prefixed aliases (conv_weight) and problem constants do not.
        named = {p.name for p in params}
        kwargs.update({k: v for k, v in settings.items() if k in getattr(settings, "model_keys", ()) and k not in named})
    rest = positional[n_inputs:] + [p for p in params if p.kind == p.KEYWORD_ONLY]
    for param in rest:
        if param.name in settings:
            kwargs[param.name] = settings[param.name]
        elif param.kind == param.POSITIONAL_ONLY and param.default is param.empty:
            raise ChildError("runtime", f"kernel_function: positional-only parameter {param.name!r} cannot be bound by name")
        elif param.default is param.empty:
            known = ", ".join(sorted(settings)) or "none"
            raise ChildError(
                "runtime",
                f"kernel_function parameter {param.name!r} is neither one of the {n_inputs} inputs nor a setting "
                f"of the reference model (available: {known})",
            )
    return kwargs


def copy_reference_state(reference: Any, candidate: Any) -> list[str]:
    """Copy the reference's parameters/buffers into `candidate` where they match; returns copied names."""
    import torch

    ref_state = reference.state_dict()
    by_last: dict[str, list[str]] = {}
    for name in ref_state:
        by_last.setdefault(name.rsplit(".", 1)[-1], []).append(name)
    copied = []
    with torch.no_grad():
        for name, target in candidate.state_dict().items():
            source_name = name if name in ref_state else None
            if source_name is None:
                same_last = [n for n in by_last.get(name.rsplit(".", 1)[-1], []) if ref_state[n].shape == target.shape]
                source_name = same_last[0] if len(same_last) == 1 else None
            if source_name is not None and ref_state[source_name].shape == target.shape:
                target.copy_(ref_state[source_name])
                copied.append(name)
    return copied


@dataclass
class Prepared:
    """A problem and (optionally) a candidate, ready to run on one device."""

    problem: Problem
    candidate_info: Candidate | None
    device: str
    dtype: Any | None  # torch.dtype or None (as the problem declares)
    problem_module: types.ModuleType
    init_inputs: list[Any]
    reference_model: Any
    candidate_module: types.ModuleType | None = None
    candidate_model: Any | None = None
    kernel_function: Callable[..., Any] | None = None
    kernel_kwargs: dict[str, Any] = field(default_factory=dict)
    copied_state: list[str] = field(default_factory=list)

    def make_inputs(self, seed: int) -> list[Any]:
        """Fresh inputs from `get_inputs()` under `seed`, cast and on the device."""
        seed_everything(seed)
        try:
            # Built on the device directly: a multi-GB get_inputs() takes seconds on the CPU and
            # milliseconds on a GPU. Tensors a problem pins to the CPU itself are copied below.
            with device_context(self.device):
                inputs = self.problem_module.get_inputs()
        except Exception as exc:  # noqa: BLE001 - a broken problem is bad input
            raise BadInput(f"{self.problem.path}: get_inputs() failed: {describe_exception(exc)}") from None
        return to_device(list(inputs), self.device, self.dtype)

    def reference(self, inputs: list[Any]) -> list[Any]:
        try:
            return as_outputs(self.reference_model(*inputs))
        except Exception as exc:  # noqa: BLE001
            raise BadInput(f"{self.problem.path}: Model.forward failed: {describe_exception(exc)}") from None

    def candidate(self, inputs: list[Any]) -> list[Any]:
        """Run the candidate; its failures become ChildError("compile"|"runtime")."""
        call = self.bound_call("candidate", inputs)
        try:
            return as_outputs(call())
        except ChildError:
            raise
        except Exception as exc:  # noqa: BLE001 - untrusted code
            raise ChildError(classify_exception(exc), describe_exception(exc)) from exc

    def bound_call(self, which: Literal["candidate", "reference"], inputs: list[Any]) -> Callable[[], Any]:
        """A zero-argument callable running one forward on `inputs` (for timing/profiling)."""
        if which == "reference":
            model = self.reference_model
            return lambda: model(*inputs)
        if self.candidate_model is not None:
            model = self.candidate_model
            return lambda: model(*inputs)
        if self.kernel_function is not None:
            fn, kwargs = self.kernel_function, self.kernel_kwargs
            return lambda: fn(*inputs, **kwargs)
        raise ValueError("prepared without a candidate")


def _prepare_model(model: Any, device: str, dtype: Any | None) -> Any:
    if hasattr(model, "to"):
        if dtype is not None:
            model = model.to(dtype)
        model = model.to(device)
    if hasattr(model, "requires_grad_"):
        # No autograd graph is recorded: outputs compare and time as in inference.
        model.requires_grad_(False)
    if hasattr(model, "eval"):
        model.eval()
    return model


def prepare(problem: Problem, candidate: Candidate | None, *, device: str, seed: int = 0) -> Prepared:
    """Import, construct and bind everything (call inside a child process only).

    Problem failures raise BadInput (exit 2: the problem is broken); candidate
    failures raise ChildError("compile"|"runtime").
    """
    dtype = torch_dtype(problem.dtype)
    try:
        module = import_problem(problem)
    except BadInput:
        raise
    except Exception as exc:  # noqa: BLE001
        raise BadInput(f"{problem.path}: importing the problem failed: {describe_exception(exc)}") from None
    try:
        init_inputs = list(module.get_init_inputs())
        seed_everything(seed)
        with device_context(device):
            model = module.Model(*init_inputs)
        reference_model = _prepare_model(model, device, dtype)
    except Exception as exc:  # noqa: BLE001
        raise BadInput(f"{problem.path}: building Model(*get_init_inputs()) failed: {describe_exception(exc)}") from None
    prepared = Prepared(
        problem=problem,
        candidate_info=candidate,
        device=device,
        dtype=dtype,
        problem_module=module,
        init_inputs=init_inputs,
        reference_model=reference_model,
    )
    if candidate is not None:
        bind_candidate(prepared, candidate, seed=seed)
    return prepared


def bind_candidate(prepared: Prepared, candidate: Candidate, *, seed: int = 0, n_inputs: int | None = None,
                   module_name: str | None = None, source: str | None = None) -> Prepared:
    """Import `candidate` and bind it to `prepared`'s reference (weights, settings).

    Failures raise ChildError("compile"|"runtime"). `n_inputs` saves building inputs
    just to count them. A worker binds candidate after candidate to one Prepared,
    each in its own module (`module_name`). `source`: the text to run (the verifier's
    checked copy), not the file as it is now.
    """
    prepared.candidate_info = candidate
    prepared.candidate_model = None
    prepared.kernel_function = None
    prepared.kernel_kwargs = {}
    prepared.copied_state = []
    try:
        cand_module = import_candidate(candidate, module_name, source=source)
    except Exception as exc:  # noqa: BLE001 - untrusted code
        raise ChildError("compile", f"importing {candidate.path} failed: {describe_exception(exc)}") from None
    prepared.candidate_module = cand_module
    init_inputs = prepared.init_inputs
    reference_model = prepared.reference_model
    if candidate.entry == "ModelNew":
        try:
            seed_everything(seed)
            with device_context(prepared.device):
                model = cand_module.ModelNew(*init_inputs)
            if hasattr(model, "state_dict") and hasattr(reference_model, "state_dict"):
                prepared.copied_state = copy_reference_state(reference_model, model)
            prepared.candidate_model = _prepare_model(model, prepared.device, prepared.dtype)
        except Exception as exc:  # noqa: BLE001
            raise ChildError(classify_exception(exc), f"ModelNew(*get_init_inputs()): {describe_exception(exc)}") from None
    else:
        fn = getattr(cand_module, "kernel_function", None)
        if not callable(fn):
            raise ChildError("runtime", f"{candidate.path}: kernel_function is not callable")
        if n_inputs is None:
            n_inputs = len(prepared.make_inputs(seed))
        prepared.kernel_function = fn
        prepared.kernel_kwargs = bind_kernel_function(fn, n_inputs, reference_settings(reference_model, prepared.problem_module))
    return prepared
