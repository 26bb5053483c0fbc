"""Reading the project's YAML inputs (manifests, scenarios, prompt sets): every problem is one ManifestError naming
the file and the field (or the line, for a syntax error)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from harness.errors import ManifestError
from harness.readers import read_yaml

__all__ = ["read_yaml_mapping", "validate_as", "field_name"]

M = TypeVar("M", bound=BaseModel)


def read_yaml_mapping(path: str | Path, what: str, expected: str) -> dict[str, Any]:
    """Parse a YAML file whose top level must be a mapping; `what` names the kind of file, `expected` its keys.
    Bounded in size and depth; duplicate keys and non-finite numbers are errors (see harness.readers)."""
    p = Path(path)
    raw = read_yaml(p, what)
    if not isinstance(raw, dict):
        raise ManifestError(p, "(top level)", f"must be a mapping with {expected}")
    return raw


def field_name(loc: tuple) -> str:
    parts = [str(p) for p in loc if not str(p).startswith("function-")]
    return ".".join(parts) or "(top level)"


def validate_as(model: type[M], raw: dict, path: str | Path, context: dict | None = None) -> M:
    """`context` reaches the model's validators (ValidationInfo.context), e.g. the engine kind a manifest names."""
    try:
        return model.model_validate(raw, context=context)
    except ValidationError as exc:
        err = exc.errors()[0]
        raise ManifestError(path, field_name(err["loc"]), err["msg"].removeprefix("Value error, ")) from None
