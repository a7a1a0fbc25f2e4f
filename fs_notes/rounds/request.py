"""The request state of a multi-round tool call: what one round seals, and what a retry must match.

A tool that answers `input_required` seals its progress into the `requestState` it returns
(`RequestState.seal`) and gets it back, echoed by the client, on the retry (`RequestState.open`).
Both sides are built here from one `Binding` and the tool's `Flow` (phases.py), so that every
claim a state carries is sealed and checked in one place:

    claim       sealed from                         checked on open against
    principal   the request's principal              the retry's principal
    method      "tools/call"                         "tools/call"
    tool        the flow's name                      the flow's name
    args        digest of the tool arguments         digest of the retry's arguments
    workspace   the workspace name                   the retry's workspace
    phase       `Progress.phase` (a waiting phase)   the phase the answer names, else any
                                                     waiting phase of the flow
    boot        this boot's id (flows that bind it)  this boot's id
    epoch       the replay store's epoch (flows      not here: by the replay store, inside
                whose store has one)                 the claim (confirm/spent.py)
    round       `Progress.rounds` (bounded flows)    1 .. the flow's `max_rounds`
    (data)      the tool's own claims                the tool's parser, run once, here

Guarantees: `open` returns a `Round` only if the token is authentic and unexpired and every
claim above matches (`StateSealer.open` checks the first seven, and this module the round and,
through the tool's parser, the data); its data is the parsed, typed value (a tool never reads
the raw payload). Anything else raises `StateRejected`, whose precise reason is for the log and
whose wire form is the one refusal, `refuse_state` (rounds/seal.py). The round is chosen from
the parsed `tools/call` params (`Echo.of`): a call that names a requestState, whatever its
value, is a retry.

Not guaranteed here: single use (the replay store, confirm/replay.py), or that what the data
names is still there (the tool re-checks against the filesystem).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Generic, TypeVar

from ..protocol.models import CallToolParams
from .boot import this_boot
from .phases import Flow, Phase, Progress
from .seal import Expectation, StateRejected, StateSealer, args_digest

__all__ = ["METHOD", "Binding", "Echo", "RequestState", "Round"]

METHOD: Final = "tools/call"

#: Claims this module seals itself; a tool's data may not set them (nor the sealer's own).
_OWN_CLAIMS = frozenset({"principal", "method", "tool", "args", "workspace", "phase", "boot",
                         "round", "epoch"})  # fmt: skip

T = TypeVar("T")


@dataclass(frozen=True)
class Binding:
    """Who asks, with which arguments, in which workspace: what a state is bound to."""

    principal: str
    arguments: Mapping[str, Any]
    workspace: str


@dataclass(frozen=True)
class Echo:
    """What a retry echoes: the sealed requestState (any JSON value: a malformed one gets the
    same refusal as a forged one) and the client's inputResponses."""

    token: object
    responses: Mapping[str, Any] | None

    @classmethod
    def of(cls, params: CallToolParams) -> Echo | None:
        """The retry's echo, or None for a first round (no requestState in the params)."""
        if "request_state" not in params.model_fields_set:
            return None
        return cls(params.request_state, params.input_responses)


@dataclass(frozen=True)
class Round(Generic[T]):
    """An opened state: where the request is, the tool's data (parsed once), the answer to
    this phase's request (None when the retry does not give one), and the nonce and expiry."""

    progress: Progress
    data: T
    answer: object
    token: str
    nonce: str
    expires: float
    #: The replay store's epoch the state was sealed under (None: the store has none).
    epoch: str | None = None

    @property
    def phase(self) -> Phase:
        return self.progress.phase


class RequestState(Generic[T]):
    """Seals and opens the states of one flow; `parse` turns a sealed payload's data claims of
    a phase into the tool's typed value (StateRejected if they are malformed). `epoch`, when
    given, is asked at every seal for the replay store's epoch (None: it has none; it may raise,
    and then nothing is sealed); the store checks it when the nonce is claimed."""

    def __init__(
        self,
        sealer: StateSealer,
        flow: Flow,
        parse: Callable[[Phase, Mapping[str, Any]], T],
        *,
        bind_boot: bool = False,
        epoch: Callable[[], str | None] | None = None,
    ) -> None:
        self.sealer, self.flow, self._parse, self._bind_boot = sealer, flow, parse, bind_boot
        self._epoch = epoch

    @property
    def ttl(self) -> float:
        return self.sealer.ttl

    def payload(
        self, bind: Binding, progress: Progress, data: Mapping[str, Any]
    ) -> dict[str, Any]:
        """The claims of a state of `progress` (the sealer adds v, iat, exp and nonce)."""
        if progress.phase not in self.flow.waiting:
            raise ValueError(f"{self.flow.name}: a state is sealed in a phase that asks")
        clash = _OWN_CLAIMS.intersection(data)
        if clash:
            raise ValueError(f"data sets request-state claims: {sorted(clash)}")
        claims: dict[str, Any] = {
            "principal": bind.principal,
            "method": METHOD,
            "tool": self.flow.name,
            "args": args_digest(bind.arguments),
            "workspace": bind.workspace,
            "phase": progress.phase.value,
            **data,
        }
        if self.flow.max_rounds is not None:
            claims["round"] = progress.rounds
        if self._bind_boot:
            claims["boot"] = this_boot()  # states sealed before a reboot are refused (boot.py)
        epoch = self._epoch() if self._epoch is not None else None
        if epoch is not None:
            claims["epoch"] = epoch
        return claims

    def seal(self, bind: Binding, progress: Progress, data: Mapping[str, Any]) -> str:
        """The requestState of `progress`; StateTooLarge past the size bound."""
        return self.sealer.seal(self.payload(bind, progress, data))

    def expectation(self, bind: Binding, responses: Mapping[str, Any] | None) -> Expectation:
        """What the retry's state must match: the answer, if any, names the phase."""
        answered = [p for p, key in self.flow.asks.items() if responses and key in responses]
        phases = answered[:1] or list(self.flow.asks)
        return Expectation(
            principal=bind.principal,
            args=args_digest(bind.arguments),
            method=METHOD,
            tool=self.flow.name,
            phase=frozenset(p.value for p in phases),
            workspace=bind.workspace,
            boot=this_boot() if self._bind_boot else None,
        )

    def open(self, bind: Binding, echo: Echo) -> Round[T]:
        """Verify the echoed state against `bind` and parse it, once; StateRejected."""
        claims = self.sealer.open(echo.token, expect=self.expectation(bind, echo.responses))
        assert isinstance(echo.token, str)  # open accepts nothing else
        phase = Phase(claims["phase"])  # one of the flow's waiting phases: checked above
        limit = self.flow.max_rounds
        rounds = claims.get("round") if limit is not None else 1
        if not (isinstance(rounds, int) and 1 <= rounds <= (limit or 1)):
            raise StateRejected("round out of bounds")
        epoch = claims.get("epoch")
        if epoch is not None and not (isinstance(epoch, str) and 0 < len(epoch) <= 200):
            raise StateRejected("malformed epoch")
        data = self._parse(phase, claims)
        answer = (echo.responses or {}).get(self.flow.asks[phase])
        return Round(
            progress=Progress(self.flow, phase, rounds),
            data=data,
            answer=answer,
            token=echo.token,
            nonce=str(claims["nonce"]),
            expires=float(claims["exp"]),
            epoch=epoch,
        )
