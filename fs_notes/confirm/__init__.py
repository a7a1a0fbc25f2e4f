"""Confirmation machinery of notes_delete: the form and its decision table (flow.py), the replay
stores (spent.py: their contract; replay.py: SQLite, one host; redis_store.py: Redis, several
hosts; location.py: how one is named), the boot id (boot.py) and the audit trail (audit.py).

The requestState token and its key ring are `fs_notes.rounds.seal`; the phases of the
multi-round request and every claim sealed between its rounds are `fs_notes.rounds`. Each module
states what it guarantees and what it does not. Import the module you need: this package
re-exports nothing (importing it loads none of them).
"""
