"""The race harness, short: renameat2 swaps against reads, listings and whole delete flows.

With every layer on: zero escapes. The control (validate-then-use under the same attackers) must
escape, or the harness would be unable to see an escape at all.
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
    assert race["by_operation"]["delete"]["attempts"] == 75
    for kind in ("read", "list"):  # served when the folder was real, refused when a symlink
        counts = race["by_operation"][kind]
        assert 0 < counts["refused"] < counts["attempts"], (kind, counts)


def test_the_control_escapes_so_an_escape_would_be_seen(race: dict[str, Any]) -> None:
    assert race["control"]["escapes"] > 0, race["control"]
