"""Confirmation machinery of notes_delete: sealed requestState, replay store, audit, decisions.

Each module states what it guarantees and what it does not; the public API is `__all__`.
"""

from fs_notes.confirm.audit import OUTCOMES, AuditLog
from fs_notes.confirm.flow import (
    ELICITATION_KEY,
    MAX_CANDIDATES,
    Candidate,
    Decision,
    Outcome,
    ResponseInvalid,
    build_elicitation,
    candidates_from_payload,
    confirm_expectation,
    confirm_payload,
    decide,
    input_request,
    requested_schema,
)
from fs_notes.confirm.replay import ReplayStore, ReplayStoreFull, default_replay_path
from fs_notes.confirm.state import (
    WIRE_MESSAGE,
    Expectation,
    KeyFileError,
    KeyRing,
    StateRejected,
    StateSealer,
    StateTooLarge,
    args_digest,
)

__all__ = [
    "ELICITATION_KEY",
    "MAX_CANDIDATES",
    "OUTCOMES",
    "WIRE_MESSAGE",
    "AuditLog",
    "Candidate",
    "Decision",
    "Expectation",
    "KeyFileError",
    "KeyRing",
    "Outcome",
    "ReplayStore",
    "ReplayStoreFull",
    "ResponseInvalid",
    "StateRejected",
    "StateSealer",
    "StateTooLarge",
    "args_digest",
    "build_elicitation",
    "candidates_from_payload",
    "confirm_expectation",
    "confirm_payload",
    "decide",
    "default_replay_path",
    "input_request",
    "requested_schema",
]
