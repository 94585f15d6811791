"""Source transforms: executable strategies (one module per transform, found through a Registry).

Built-ins are named in `BUILTIN` ("module:attribute" of a class or factory taking no
arguments); third-party packs register theirs in the entry-point group
`kernelopt.transforms`. A strategy pack entry names a transform in its `transform:` field.
"""

from __future__ import annotations

from kernelopt.errors import BadInput
from kernelopt.optimize.transforms.base import Transform, TransformError, resolve_params
from kernelopt.registry import Registry

ENTRY_POINT_GROUP = "kernelopt.transforms"

# name -> "module:attribute"; imported only when used, so the CLI stays fast.
BUILTIN: dict[str, str] = {
    "block_program_axis": "kernelopt.optimize.transforms.block_program_axis:BlockProgramAxis",
    "cuda_block_template": "kernelopt.optimize.transforms.cuda_block_template:CudaBlockTemplate",
    "cuda_vectorized_loads": "kernelopt.optimize.transforms.cuda_vectorized_loads:CudaVectorizedLoads",
    "autotune_table": "kernelopt.optimize.transforms.autotune_table:AutotuneTable",
    "dot_inner_product": "kernelopt.optimize.transforms.dot_inner_product:DotInnerProduct",
    "dot_rank1_loop": "kernelopt.optimize.transforms.dot_rank1_loop:DotRank1Loop",
    "flat_elementwise": "kernelopt.optimize.transforms.flat_elementwise:FlatElementwise",
    "grouped_program_order": "kernelopt.optimize.transforms.grouped_program_order:GroupedProgramOrder",
    "persistent_grid": "kernelopt.optimize.transforms.persistent_grid:PersistentGrid",
    "rows_per_program": "kernelopt.optimize.transforms.rows_per_program:RowsPerProgram",
    "single_pass_row": "kernelopt.optimize.transforms.single_pass_row:SinglePassRow",
    "specialize_scalars": "kernelopt.optimize.transforms.specialize_scalars:SpecializeScalars",
    "split_reduction": "kernelopt.optimize.transforms.split_reduction:SplitReduction",
}


REGISTRY = Registry("transform", ENTRY_POINT_GROUP, BUILTIN)

__all__ = ["BUILTIN", "REGISTRY", "Transform", "TransformError", "available", "get_transform", "resolve_params"]


def available() -> dict[str, str]:
    """Registry name -> where it comes from ('builtin' or the entry point's value)."""
    return REGISTRY.available()


def get_transform(name: str) -> Transform:
    """The transform registered as `name`; BadInput if unknown or not a Transform."""
    factory = REGISTRY.factory(name)
    if factory is None:
        raise BadInput(f"transform {name!r}: unknown transform (known: {', '.join(sorted(available())) or 'none'})")
    transform = factory()
    if not isinstance(transform, Transform):
        raise BadInput(f"transform {name!r} does not implement sites(source) and apply(source, site, **params)")
    return transform
