"""Validation of tool arguments against the tool's own `inputSchema`, before the tool runs.

Our input schemas use a small, flat subset of JSON Schema 2020-12 (an object of strings, integers
and booleans with lengths and bounds, and arrays, with a bounded number of items, of flat objects
of those; added 2026-12-01 for notes_edit's edits; arrays of strings, and an object of any JSON
values with a bounded number of keys, added 2026-12-07 for notes_properties). `check_schema`
refuses any schema outside that subset at definition time, so `validate` is exact for every
schema we publish; tests compare it with the reference `jsonschema` implementation. The error
names the offending field.
Every string, an array item's too, must also be Unicode text (no lone surrogate: valid JSON,
but no UTF-8 form; added 2026-12-02, issue 25), which the schema language does not say.
"""

from __future__ import annotations

from typing import Any

from ..render import shown

_SCALARS = {"string", "integer", "boolean"}
_TYPES = {*_SCALARS, "array"}
_PROPERTY_KEYS = {"type", "description", "title", "minLength", "maxLength", "minimum", "maximum"}
_ARRAY_KEYS = {"type", "description", "title", "items", "minItems", "maxItems"}
_ITEM_KEYS = {"type", "description", "title", "properties", "required", "additionalProperties"}
_OBJECT_KEYS = {"$schema", "type", "properties", "required", "additionalProperties"}
#: An argument that is an object of any JSON values (its keys and strings checked as text).
_FREE_OBJECT_KEYS = {"type", "description", "title", "maxProperties"}
_STRING_ITEM_KEYS = {"type", "minLength", "maxLength"}


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
        if prop.get("type") == "array" and not set(prop) - _ARRAY_KEYS:
            _check_items(name, prop.get("items"))
        elif prop.get("type") == "object" and not set(prop) - _FREE_OBJECT_KEYS:
            if not isinstance(prop.get("maxProperties"), int):
                raise ValueError(f"object property {name!r} must bound maxProperties")
        elif set(prop) - _PROPERTY_KEYS or prop.get("type") not in _SCALARS:
            raise ValueError(f"unsupported property schema for {name!r}")
    for name in schema.get("required", []):
        if name not in props:
            raise ValueError(f"required property {name!r} is not defined")


def _check_items(name: str, items: object) -> None:
    """An array's items: strings, or a closed object of strings, integers and booleans
    (nothing nested)."""
    if isinstance(items, dict) and items.get("type") == "string":
        if set(items) - _STRING_ITEM_KEYS:
            raise ValueError(f"unsupported items schema for {name!r}")
        return
    if (
        not isinstance(items, dict)
        or set(items) - _ITEM_KEYS
        or items.get("type") != "object"
        or items.get("additionalProperties") is not False
    ):
        raise ValueError(f"unsupported items schema for {name!r}")
    props = items.get("properties", {})
    for key, prop in props.items():
        if set(prop) - _PROPERTY_KEYS or prop.get("type") not in _SCALARS:
            raise ValueError(f"unsupported property schema for {name!r} items' {key!r}")
    for key in items.get("required", []):
        if key not in props:
            raise ValueError(f"required property {key!r} of {name!r} items is not defined")


def _type_ok(kind: str, value: object) -> bool:
    if kind == "array":
        return isinstance(value, list)
    if kind == "object":
        return isinstance(value, dict)
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
        _check_value(prop, value, name)
    return arguments


def _check_value(prop: dict[str, Any], value: Any, name: str) -> None:
    """One argument (or an item's field: ``name`` is then "edits[0].oldText") against its schema."""
    kind = prop["type"]
    if not _type_ok(kind, value):
        raise ArgumentError(f"argument {name!r} must be {'an' if kind == 'array' else 'a'} {kind}")
    if kind == "array":
        if "minItems" in prop and len(value) < prop["minItems"]:
            raise ArgumentError(f"argument {name!r} must have at least {prop['minItems']} items")
        if "maxItems" in prop and len(value) > prop["maxItems"]:
            raise ArgumentError(f"argument {name!r} must have at most {prop['maxItems']} items")
        for i, item in enumerate(value):
            if prop["items"]["type"] == "string":
                _check_value(prop["items"], item, f"{name}[{i}]")
            else:
                _check_item(prop["items"], item, f"{name}[{i}]")
        return
    if kind == "object":
        if len(value) > prop["maxProperties"]:
            raise ArgumentError(
                f"argument {name!r} must have at most {prop['maxProperties']} properties"
            )
        _check_json_text(value, name)
        return
    if kind == "string":
        _check_unicode(value, name)
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


def _check_json_text(value: Any, name: str) -> None:
    """Every key and string inside a JSON value is Unicode text (`_check_unicode`); iterative,
    so a deeply nested value cannot exhaust the stack."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            _check_unicode(item, name)
        elif isinstance(item, dict):
            for key, inner in item.items():
                _check_unicode(str(key), name)
                stack.append(inner)
        elif isinstance(item, list):
            stack.extend(item)


def _check_unicode(value: str, name: str) -> None:
    """A string argument must be Unicode text: JSON can carry a lone surrogate ("\\ud800"),
    which no note, id or query can hold (it has no UTF-8 form); refused here, once for every
    string argument of every tool, before any tool runs."""
    if value.isascii():
        return
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ArgumentError(
            f"argument {name!r} is not valid Unicode text: a lone surrogate "
            f"(\\u{ord(value[exc.start]):04x}) at character {exc.start}; nothing was done"
        ) from None


def _check_item(items: dict[str, Any], item: Any, name: str) -> None:
    """One item of an array argument against the array's (closed, flat) items schema."""
    if not isinstance(item, dict):
        raise ArgumentError(f"argument {name!r} must be an object")
    props: dict[str, dict[str, Any]] = items.get("properties", {})
    for key in items.get("required", []):
        if key not in item:
            raise ArgumentError(f"argument {name!r} is missing {key!r}")
    for key, value in item.items():
        prop = props.get(key)
        if prop is None:
            raise ArgumentError(f"unexpected '{shown(str(key), 100)}' in argument {name!r}")
        _check_value(prop, value, f"{name}.{key}")
