"""Validation of tool arguments against the tool's own `inputSchema`, before the tool runs.

Our input schemas use a small, flat subset of JSON Schema 2020-12 (an object of strings, integers
and booleans with lengths and bounds). `check_schema` refuses any schema outside that subset at
definition time, so `validate` is exact for every schema we publish; tests compare it with the
reference `jsonschema` implementation. The error names the offending field.
"""

from __future__ import annotations

from typing import Any

from ..render import shown

_TYPES = {"string", "integer", "boolean"}
_PROPERTY_KEYS = {"type", "description", "title", "minLength", "maxLength", "minimum", "maximum"}
_OBJECT_KEYS = {"$schema", "type", "properties", "required", "additionalProperties"}


class ArgumentError(ValueError):
    """The arguments do not match the schema; the message names the field."""


def check_schema(schema: dict[str, Any]) -> None:
    """Raise ValueError if the schema uses anything `validate` does not implement exactly."""
    if set(schema) - _OBJECT_KEYS or schema.get("type") != "object":
        raise ValueError(f"unsupported schema keys: {sorted(set(schema) - _OBJECT_KEYS)}")
    if schema.get("additionalProperties") is not False:
        raise ValueError("tool schemas must set additionalProperties: false")
    props = schema.get("properties", {})
    for name, prop in props.items():
        if set(prop) - _PROPERTY_KEYS or prop.get("type") not in _TYPES:
            raise ValueError(f"unsupported property schema for {name!r}")
    for name in schema.get("required", []):
        if name not in props:
            raise ValueError(f"required property {name!r} is not defined")


def _type_ok(kind: str, value: object) -> bool:
    if kind == "string":
        return isinstance(value, str)
    if kind == "boolean":
        return isinstance(value, bool)
    # JSON Schema: an integer is any number with a zero fractional part (1.0 is an integer).
    if isinstance(value, bool):
        return False
    return isinstance(value, int) or (isinstance(value, float) and value.is_integer())


def validate(schema: dict[str, Any], arguments: object) -> dict[str, Any]:
    """Return the arguments if they satisfy the schema, else raise ArgumentError."""
    if not isinstance(arguments, dict):
        raise ArgumentError("arguments must be an object")
    props: dict[str, dict[str, Any]] = schema.get("properties", {})
    for name in schema.get("required", []):
        if name not in arguments:
            raise ArgumentError(f"missing required argument {name!r}")
    for name, value in arguments.items():
        prop = props.get(name)
        if prop is None:
            raise ArgumentError(f"unexpected argument '{shown(str(name), 100)}'")
        kind = prop["type"]
        if not _type_ok(kind, value):
            raise ArgumentError(f"argument {name!r} must be a {kind}")
        if kind == "string":
            if "minLength" in prop and len(value) < prop["minLength"]:
                raise ArgumentError(
                    f"argument {name!r} must be at least {prop['minLength']} characters"
                )
            if "maxLength" in prop and len(value) > prop["maxLength"]:
                raise ArgumentError(
                    f"argument {name!r} must be at most {prop['maxLength']} characters"
                )
        elif kind == "integer":
            if "minimum" in prop and value < prop["minimum"]:
                raise ArgumentError(f"argument {name!r} must be >= {prop['minimum']}")
            if "maximum" in prop and value > prop["maximum"]:
                raise ArgumentError(f"argument {name!r} must be <= {prop['maximum']}")
    return arguments
