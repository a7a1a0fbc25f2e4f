"""Multi-round requests (spec: basic/patterns/mrtr): their phases and the state sealed between them.

`phases` holds the one table of phases and legal transitions of every multi-round request
(notes_delete, notes_summarize, the legacy adapter's server-initiated rounds); `request` builds
and checks every claim of a sealed requestState (bindings, phase, round, boot id, the tool's data
parsed once). What a round asks and how its answer is judged stays with the tool (notes_delete's
form and decision table: `fs_notes.confirm.flow`); `seal` holds the token format, the sealer and
the key ring; `boot` the kernel's id of this boot, which a state binds (read on first use, not at
import). Nothing here imports `fs_notes.confirm` (which uses this package). Each module states
what it guarantees and what it does not.
"""
