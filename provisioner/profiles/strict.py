"""The base of every profile model: unknown keys refused, defaults validated, no inf/nan."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Strict(BaseModel):
    # allow_inf_nan=False: .inf or .nan as a floor would pass or fail every host whatever it measures.
    model_config = ConfigDict(extra="forbid", validate_default=True, allow_inf_nan=False)
