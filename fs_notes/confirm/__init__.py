"""Confirmation machinery of notes_delete: the form and its decision table, the requestState
token and keys, the replay stores (spent.py: their contract; replay.py: SQLite, one host;
redis_store.py: Redis, several hosts; location.py: how one is named), the boot id and the audit
trail.

The phases of the multi-round request and every claim sealed between its rounds are
`fs_notes.rounds`. Each module states what it guarantees and what it does not; the public API is
`__all__`.
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
    candidate_claims,
    candidates_from_payload,
    decide,
    input_request,
    requested_schema,
)
from fs_notes.confirm.replay import ReplayStore, ReplayStoreFull, default_replay_path
from fs_notes.rounds.seal import (
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
    "candidate_claims",
    "candidates_from_payload",
    "decide",
    "default_replay_path",
    "input_request",
    "requested_schema",
]
