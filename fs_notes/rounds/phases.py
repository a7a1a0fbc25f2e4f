"""The phases of a multi-round request and their legal transitions: one table, as data.

Spec: basic/patterns/mrtr. A tool that needs the client's input answers `input_required` and is
called again with the answers; the legacy adapter carries those rounds to a handshake-era client
as server-initiated requests. Every such request moves through the phases of its `Flow`, and the
only way to move is `Progress.fire(event)`, which looks the step up in `TRANSITIONS` (like h11
keeps its connection states in one table, `h11/_state.py`):

    flow              phase       event          next phase   (a * phase counts a round)
    notes_delete      start       begin          confirm*
                      confirm     unanswered     confirm*     (the same form, the same state)
                      confirm     finished       done         (deleted, declined or cancelled)
    notes_summarize   start       begin          pick*
                      pick        unanswered     pick*
                      pick        answered       summarize*
                      pick        finished       done         (the model picked nothing)
                      summarize   unanswered     summarize*
                      summarize   finished       done
    legacy            start       begin          handling*    (the modern handler is called)
                      handling    input_required asking       (its requests go to the client)
                      asking      answered       handling*    (called again with the answers)
                      handling    finished       done

Guarantees: a step that is not in the table raises `IllegalTransition`, and a step past the
flow's round bound raises `TooManyRounds`; either way the `Progress` is left exactly as it was
(the new phase and count are computed first and assigned together). `done` has no way out.
Pure data and arithmetic: no I/O, no clock, no imports beyond the standard library.

Not guaranteed here: that the phase a client echoes is authentic (the request state seals it,
`fs_notes.rounds.request`), nor what a round asks or how its answer is judged (the tools).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from types import MappingProxyType
from typing import Final

__all__ = [
    "DELETE",
    "FLOWS",
    "LEGACY",
    "SUMMARIZE",
    "TRANSITIONS",
    "Event",
    "Flow",
    "IllegalTransition",
    "Phase",
    "Progress",
    "TooManyRounds",
]


class Phase(StrEnum):
    START = "start"  # no requestState yet
    CONFIRM = "confirm"  # notes_delete: the delete_choice form is out
    PICK = "pick"  # notes_summarize: the model is asked which notes are relevant
    SUMMARIZE = "summarize"  # notes_summarize: the model is asked for the summary
    HANDLING = "handling"  # legacy adapter: the modern handler runs
    ASKING = "asking"  # legacy adapter: the client is answering server-initiated requests
    DONE = "done"  # the request is answered; nothing follows


class Event(StrEnum):
    BEGIN = "begin"  # a request without requestState
    UNANSWERED = "unanswered"  # a retry that does not answer this phase's request: ask again
    ANSWERED = "answered"  # the answer is taken and there is more to ask
    INPUT_REQUIRED = "input_required"  # legacy: the handler asked for input
    FINISHED = "finished"  # the request is answered in full


class IllegalTransition(Exception):
    """`event` has no step from `phase` in `flow` (a server bug, or a state of another flow)."""

    def __init__(self, flow: str, phase: Phase, event: Event) -> None:
        super().__init__(f"{flow}: no transition from {phase.value!r} on {event.value!r}")
        self.flow, self.phase, self.event = flow, phase, event


class TooManyRounds(Exception):
    """The step is legal but would take the request past its flow's round bound."""

    def __init__(self, flow: str, limit: int) -> None:
        super().__init__(f"{flow}: more than {limit} rounds")
        self.flow, self.limit = flow, limit


_Steps = Mapping[Phase, Mapping[Event, Phase]]


def _frozen(steps: dict[Phase, dict[Event, Phase]]) -> _Steps:
    return MappingProxyType({p: MappingProxyType(dict(e)) for p, e in steps.items()})


#: flow name -> phase -> event -> next phase. The one place a multi-round step is defined.
TRANSITIONS: Final[Mapping[str, _Steps]] = MappingProxyType(
    {
        "notes_delete": _frozen(
            {
                Phase.START: {Event.BEGIN: Phase.CONFIRM},
                Phase.CONFIRM: {Event.UNANSWERED: Phase.CONFIRM, Event.FINISHED: Phase.DONE},
            }
        ),
        "notes_summarize": _frozen(
            {
                Phase.START: {Event.BEGIN: Phase.PICK},
                Phase.PICK: {
                    Event.UNANSWERED: Phase.PICK,
                    Event.ANSWERED: Phase.SUMMARIZE,
                    Event.FINISHED: Phase.DONE,
                },
                Phase.SUMMARIZE: {Event.UNANSWERED: Phase.SUMMARIZE, Event.FINISHED: Phase.DONE},
            }
        ),
        "legacy": _frozen(
            {
                Phase.START: {Event.BEGIN: Phase.HANDLING},
                Phase.HANDLING: {Event.INPUT_REQUIRED: Phase.ASKING, Event.FINISHED: Phase.DONE},
                Phase.ASKING: {Event.ANSWERED: Phase.HANDLING},
            }
        ),
    }
)


@dataclass(frozen=True)
class Flow:
    """One kind of multi-round request: its row of `TRANSITIONS` and its bounds.

    `asks` maps each phase that asks the client something to the `inputRequests` key it asks
    under (tools only); entering a `counted` phase is one round, at most `max_rounds` of them
    (None: unbounded, the sealed state's expiry bounds it).
    """

    name: str
    asks: Mapping[Phase, str]
    counted: frozenset[Phase]
    max_rounds: int | None

    @property
    def steps(self) -> _Steps:
        return TRANSITIONS[self.name]

    @property
    def waiting(self) -> frozenset[Phase]:
        """The phases a sealed state may be in: those that ask."""
        return frozenset(self.asks)


DELETE: Final = Flow(
    "notes_delete",
    asks=MappingProxyType({Phase.CONFIRM: "delete_choice"}),
    counted=frozenset({Phase.CONFIRM}),
    max_rounds=None,  # asked again with the very same state: its expiry is the bound
)
SUMMARIZE: Final = Flow(
    "notes_summarize",
    asks=MappingProxyType({Phase.PICK: "pick_notes", Phase.SUMMARIZE: "summarize_notes"}),
    counted=frozenset({Phase.PICK, Phase.SUMMARIZE}),
    max_rounds=4,  # input_required results for one call (2 when the client answers each)
)
LEGACY: Final = Flow(
    "legacy",
    asks=MappingProxyType({}),
    counted=frozenset({Phase.HANDLING}),
    max_rounds=8,  # calls of the modern handler for one legacy request
)
FLOWS: Final[Mapping[str, Flow]] = MappingProxyType(
    {f.name: f for f in (DELETE, SUMMARIZE, LEGACY)}
)
assert set(FLOWS) == set(TRANSITIONS)


class Progress:
    """Where one request is in its flow: a phase and the rounds taken so far."""

    __slots__ = ("flow", "phase", "rounds")

    def __init__(self, flow: Flow, phase: Phase = Phase.START, rounds: int = 0) -> None:
        if phase not in flow.steps and phase is not Phase.DONE:
            raise ValueError(f"{flow.name} has no phase {phase.value!r}")
        self.flow, self.phase, self.rounds = flow, phase, rounds

    def after(self, event: Event) -> tuple[Phase, int]:
        """The phase and round count `event` leads to; raises, and changes nothing."""
        target = self.flow.steps.get(self.phase, {}).get(event)
        if target is None:
            raise IllegalTransition(self.flow.name, self.phase, event)
        rounds = self.rounds + (target in self.flow.counted)
        limit = self.flow.max_rounds
        if limit is not None and rounds > limit:
            raise TooManyRounds(self.flow.name, limit)
        return target, rounds

    def fire(self, event: Event) -> Phase:
        """Take the step `event` from the current phase (raises, changing nothing, when
        `TRANSITIONS` has no such step or the round bound would be passed)."""
        self.phase, self.rounds = self.after(event)
        return self.phase

    def __repr__(self) -> str:
        return f"Progress({self.flow.name}, {self.phase.value}, rounds={self.rounds})"
