"""Every escape case (fs_notes/exercises/cases.py) is an attack of the catalogue, by its name.

Issue 15: one table of cases drives the unit tests of every layer and the exercises. "Is an
attack" means more than sharing a name: the attack of that name is of the case's class, builds
every entry of the case's layout, sends the case's id, and protects the case's paths outside the
workspace. Positive controls: a catalogue missing a case's attack, or holding an attack that only
borrows a case's name (another id, another layout), is caught.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator

import pytest

from fs_notes.exercises.cases import BY_NAME, CASES, EscapeCase
from fs_notes.exercises.catalogue import ATTACKS, Attack
from fs_notes.exercises.steps import Race, Request, read


def _sent_ids(attack: Attack) -> Iterator[object]:
    for step in attack.steps:
        request = step.request if isinstance(step, Race) else step
        if isinstance(request, Request):
            yield request.params.get("arguments", {}).get("id")
            yield request.params.get("arguments", {}).get("newId")  # a move's target


def not_included(cases: Iterable[EscapeCase], attacks: Iterable[Attack]) -> list[str]:
    """The names of the cases that are not an attack of ``attacks`` (see the module docstring)."""
    by_name = {attack.name: attack for attack in attacks}
    missing = []
    for case in cases:
        attack = by_name.get(case.name)
        outside = {p for p in case.protected if not p.startswith("ws/")}
        if (
            attack is None
            or attack.kind != case.kind
            or not set(case.layout) <= set(attack.layout)
            or case.note_id not in set(_sent_ids(attack))
            or not outside <= set(attack.protected)
        ):
            missing.append(case.name)
    return missing


def test_every_escape_case_is_an_attack_of_the_catalogue() -> None:
    assert not_included(CASES, ATTACKS) == []


@pytest.mark.parametrize("name", ["plain-note", "symlink-final", "fifo-note", "empty-id"])
def test_a_catalogue_without_a_cases_attack_fails_the_check(name: str) -> None:
    assert not_included(CASES, [a for a in ATTACKS if a.name != name]) == [name]


def test_an_attack_that_only_borrows_a_cases_name_fails_the_check() -> None:
    """As the catalogue's "deep-path" (41 components) and "magic-link-fd" (a leaked fd) once did."""
    case = BY_NAME["deep-path"]
    attack = next(a for a in ATTACKS if a.name == case.name)
    other_id = dataclasses.replace(attack, steps=(read("d/" * 40 + "x.md"),))
    other_layout = dataclasses.replace(attack, layout=("ws/" + "d/" * 40 + "x.md",))
    unprotected = dataclasses.replace(
        next(a for a in ATTACKS if a.name == "dangling-symlink-create"),
        protected=("outside/secret.md",),
    )
    assert not_included([case], [other_id]) == [case.name]
    assert not_included([case], [other_layout]) == [case.name]
    assert not_included([BY_NAME["dangling-symlink-create"]], [unprotected]) != []
    assert not_included([case], [attack]) == []


def test_case_and_attack_names_are_unique() -> None:
    assert len(BY_NAME) == len(CASES)
    assert len({a.name for a in ATTACKS}) == len(ATTACKS)
