"""The tools' argument checker (fs_notes/protocol/argcheck.py) held against the reference
JSON Schema implementation (jsonschema, Draft 2020-12), one way for every property test."""

from __future__ import annotations

from typing import Any

import jsonschema

from fs_notes.protocol.argcheck import ArgumentError, check_schema, validate


def agrees_with_reference(schema: dict[str, Any], arguments: Any) -> None:
    """`validate` accepts `arguments` exactly when the reference does (the schema itself first
    passes `check_schema`, as a tool's does at definition)."""
    check_schema(schema)
    reference = jsonschema.Draft202012Validator(schema).is_valid(arguments)
    try:
        validate(schema, arguments)
        ours = True
    except ArgumentError:
        ours = False
    assert ours == reference, (arguments, reference)
