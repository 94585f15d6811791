"""Vocabulary shared by every stage."""

from __future__ import annotations

from typing import Literal, get_args

from pydantic import BaseModel, ConfigDict

Category = Literal["dram", "onchip_memory", "compute", "latency", "occupancy", "launch"]
CATEGORIES: tuple[str, ...] = get_args(Category)

Backend = Literal["triton", "cuda", "torch"]
BACKENDS: tuple[str, ...] = get_args(Backend)

DType = Literal["fp32", "fp16", "bf16"]


class Model(BaseModel):
    """Base for every stage model: unknown fields are errors, JSON round-trips."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)
