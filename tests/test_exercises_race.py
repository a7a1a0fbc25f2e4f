"""The race harness, short: renameat2 swaps against reads, listings, whole delete flows and
notes_move flows (into, out of and within the swapped folder, and of the swapped note).

With every layer on: zero escapes. The control (validate-then-use reads and moves under the same
attackers) must escape, or the harness would be unable to see an escape at all.
"""

from __future__ import annotations

from typing import Any

import pytest

from fs_notes.exercises.race import RaceOptions, run_race


@pytest.fixture(scope="module")
def race() -> dict[str, Any]:
    return run_race(RaceOptions(attempts=300, seconds=60, control_seconds=1.0))


def test_no_escape_under_renameat2_swaps_with_every_layer_on(race: dict[str, Any]) -> None:
    assert race["escapes"] == 0, race["escape_details"]
    assert race["attempts"] == 300


def test_the_attackers_really_swapped_and_reads_and_listings_went_both_ways(
    race: dict[str, Any],
) -> None:
    assert race["attackers"] == 2 and race["swaps"] > 1000
    assert race["by_operation"]["delete"]["attempts"] == 60
    for kind in ("read", "list", "move"):  # served when the folder was real, refused when not
        counts = race["by_operation"][kind]
        assert 0 < counts["refused"] < counts["attempts"], (kind, counts)


def test_moves_were_driven_on_every_route_and_some_were_done(race: dict[str, Any]) -> None:
    assert race["by_operation"]["move"]["attempts"] == 60
    assert race["moves"] >= 60 and 0 < race["moved"] < race["moves"], race["move_routes"]
    assert {route: c["attempts"] for route, c in race["move_routes"].items()} == {
        "within dir": 15,
        "file.md": 15,
        "into dir": 15,
        "out of dir": 15,
    }


def test_the_control_escapes_so_an_escape_would_be_seen(race: dict[str, Any]) -> None:
    assert race["control"]["reads"]["escapes"] > 0, race["control"]
    assert race["control"]["moves"]["escapes"] > 0, race["control"]  # a move into/out of outside
