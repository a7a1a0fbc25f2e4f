"""Names made safe where they are shown (fs_notes/render.py), and the exercises' rendering judge
(fs_notes/exercises/shown.py) with its positive control: the renderer turned off from outside."""

from __future__ import annotations

import json
import os
import time
import unicodedata
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from inprocess import InProcess

from fs_notes.confirm import flow
from fs_notes.exercises import shown as judge
from fs_notes.exercises.catalogue import ATTACKS, Attack
from fs_notes.exercises.classes import RENDERING
from fs_notes.exercises.layout import build
from fs_notes.fs import Identity
from fs_notes.policy import Policy
from fs_notes.render import json_shown, shown, shown_id, skeleton, spelled
from fs_notes.rounds.seal import KeyRing
from fs_notes.tools import context, delete, read_tools

HIDDEN = {"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"}
ANY_TEXT = st.text(
    st.one_of(
        st.characters(),
        st.sampled_from(list("\\ \n\t\r\u202e\u2066\u200b\u200d\ufeff\u3164\u2800\u00a0\u3000")),
    ),
    max_size=40,
)


# --- the renderer --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "want"),
    [
        ("plain title", "plain title"),
        ("zz\n- passwords.md", "zz\\n- passwords.md"),
        ("tab\there", "tab\\there"),
        ("photo\u202egpj.md", "photo\\u202egpj.md"),  # RIGHT-TO-LEFT OVERRIDE
        ("a\u2066b", "a\\u2066b"),  # LEFT-TO-RIGHT ISOLATE
        ("plan\u200b.md", "plan\\u200b.md"),  # ZERO WIDTH SPACE
        ("\ufeffbom", "\\ufeffbom"),
        ("hangul\u3164filler", "hangul\\u3164filler"),
        ("braille\u2800blank", "braille\\u2800blank"),
        ("no\u00a0break", "no\\u00a0break"),
        ("\U000e0041tag", "\\U000e0041tag"),  # TAG LATIN CAPITAL LETTER A
        ("back\\slash", "back\\\\slash"),  # so an escape is never ambiguous
        ("café \U0001f600 日本語 עברית", "café \U0001f600 日本語 עברית"),  # visible: as is
        ("cafe\u0301", "cafe\u0301"),  # a combining accent is visible
    ],
)
def test_shown_escapes_exactly_what_cannot_be_seen(raw: str, want: str) -> None:
    assert shown(raw) == want


def test_shown_id_marks_spaces_at_either_end_of_a_component() -> None:
    assert shown_id(" lead.md") == "\\u0020lead.md"
    assert shown_id("trail /x.md") == "trail\\u0020/x.md"
    assert shown_id("in side.md") == "in side.md"
    assert shown_id("a/b\nc.md") == "a/b\\nc.md"


def test_shown_cuts_after_escaping() -> None:
    assert shown("\n" * 10, 5) == "\\n\\n\u2026"
    assert len(shown("x" * 500, 120)) == 120


@settings(max_examples=500, deadline=None)
@given(ANY_TEXT)
def test_nothing_shown_is_hidden_and_no_line_can_start(text: str) -> None:
    for out in (shown(text), shown_id(text), spelled(text), json_shown(text)):
        assert not [c for c in out if unicodedata.category(c) in HIDDEN], (text, out)
        assert "\u3164" not in out and "\u2800" not in out


@settings(max_examples=500, deadline=None)
@given(ANY_TEXT, ANY_TEXT)
def test_two_different_names_are_never_shown_the_same(a: str, b: str) -> None:
    if a != b:
        assert shown(a) != shown(b)
        assert shown_id(a) != shown_id(b)
        assert spelled(a) != spelled(b)


@settings(max_examples=300, deadline=None)
@given(ANY_TEXT.filter(lambda t: not any(0xD800 <= ord(c) <= 0xDFFF for c in t)))
def test_json_shown_gives_the_exact_string_back(text: str) -> None:
    assert json.loads(json_shown(text)) == text


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("caf\u00e9.md", "cafe\u0301.md"),  # NFC / NFD
        ("plan.md", "plan\u200b.md"),  # an invisible character
        ("Plan.md", "plan.md"),  # case
        ("\u0430pple.md", "apple.md"),  # CYRILLIC SMALL LETTER A
        ("\uff21.md", "A.md"),  # fullwidth
        ("\u2026.md", "....md"),  # HORIZONTAL ELLIPSIS
    ],
)
def test_look_alikes_share_a_skeleton(a: str, b: str) -> None:
    assert skeleton(a) == skeleton(b)


def test_different_names_have_different_skeletons() -> None:
    assert skeleton("plan.md") != skeleton("plans.md")
    assert skeleton("a/b.md") != skeleton("ab.md")


# --- the delete form -----------------------------------------------------------------------

IDENT = Identity(1, 2, 3, 1_767_323_045_000_000_000, 5)


def _labels(candidates: list[flow.Candidate]) -> list[str]:
    schema = flow.requested_schema("Cafe", candidates)
    return [o["title"] for o in schema["properties"]["note_id"]["oneOf"]]


def test_each_option_shows_its_own_title_and_id() -> None:
    labels = _labels(
        [
            flow.Candidate("a.md", IDENT, "Cafe au lait"),
            flow.Candidate("b.md", IDENT, "Cafe noir"),
        ]
    )
    assert labels[0].startswith('"Cafe au lait" \u2014 a.md (modified ')
    assert labels[1].startswith('"Cafe noir" \u2014 b.md (modified ')


def test_look_alike_ids_are_marked_and_spelled_out_so_no_two_options_look_alike() -> None:
    labels = _labels(
        [
            flow.Candidate("caf\u00e9.md", IDENT, "Cafe"),
            flow.Candidate("cafe\u0301.md", IDENT, "Cafe"),
            flow.Candidate("other.md", IDENT, "Cafe"),
        ]
    )
    assert labels[0] == '"Cafe" \u2014 caf\\u00e9.md [look-alike name, spelled out] ' + (
        "(modified 2026-01-02T03:04:05Z)"
    )
    assert labels[1].startswith('"Cafe" \u2014 cafe\\u0301.md [look-alike name, spelled out]')
    assert labels[2] == '"Cafe" \u2014 other.md (modified 2026-01-02T03:04:05Z)'


def test_ids_cut_to_the_same_text_still_give_distinct_options() -> None:
    # Review finding: two 300-character ids sharing their first 200 characters.
    a, b = "x" * 250 + "-one.md", "x" * 250 + "-two.md"
    labels = _labels([flow.Candidate(a, IDENT, "T"), flow.Candidate(b, IDENT, "T")])
    assert len(set(labels)) == 2
    assert labels[0].endswith("-one.md (modified 2026-01-02T03:04:05Z)")  # the end is kept
    same = "y" * 300 + ".md"
    twins = [flow.Candidate(same[:-4] + "a.md", IDENT, "T"), flow.Candidate(same, IDENT, "T")]
    assert len(set(_labels(twins))) == 2


def test_right_to_left_fields_are_isolated_so_they_cannot_swap_places() -> None:
    # Review finding: option "\u05d0/x.md" titled "Plan \u05d1" displayed as the other's label.
    labels = _labels(
        [
            flow.Candidate("\u05d0/x.md", IDENT, "Plan \u05d1"),
            flow.Candidate("\u05d1/x.md", IDENT, "Plan \u05d0"),
        ]
    )
    assert labels[0].startswith('\u2068"Plan \u05d1"\u2069 \u2014 \u2068\u05d0/x.md\u2069 (')
    assert judge.harm([{"result": {"content": [{"type": "text", "text": labels[0]}]}}], ()) == []


def test_a_title_cannot_fake_the_rest_of_a_label() -> None:
    labels = _labels([flow.Candidate("real.md", IDENT, 'Plan" \u2014 plan.md (modified x)   ')])
    assert labels[0].startswith('"Plan\\" \u2014 plan.md (modified x)" \u2014 real.md (')


def test_stacked_and_leading_combining_marks_are_escaped() -> None:
    assert shown("a\u0336\u0489\u0336.md") == "a\u0336\u0489\\u0336.md"
    assert shown("\u20ddx") == "\\u20ddx"
    assert shown_id("a/\u0338b.md") == "a/\\u0338b.md"
    assert shown("cafe\u0301") == "cafe\u0301"


def test_the_retry_validates_against_the_sealed_ids_whatever_the_labels() -> None:
    sealed = [flow.Candidate("caf\u00e9.md", IDENT), flow.Candidate("cafe\u0301.md", IDENT)]
    payload = flow.candidate_claims(sealed)
    answer = {"delete_choice": {"action": "accept", "content": {"note_id": "cafe\u0301.md",
                                                                "confirm": True}}}  # fmt: skip
    outcome = flow.decide(flow.candidates_from_payload(payload), answer, title="Cafe")
    assert outcome == flow.Decision.Delete("cafe\u0301.md", IDENT)


# --- the judge, and its positive control ---------------------------------------------------

RENDER_ATTACKS = [a for a in ATTACKS if a.kind == RENDERING]
FORM: dict[str, object] = {"elicitation": {"form": {}}}


def test_the_catalogue_has_the_four_rendering_attacks() -> None:
    assert {a.name for a in RENDER_ATTACKS} == {
        "newline-forges-line",
        "bidi-hides-extension",
        "nfd-twin-in-form",
        "zero-width-twin",
    }


def _identity(text: str, limit: int | None = None) -> str:
    return text if limit is None else text[:limit]


@pytest.fixture
def renderer_off(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Every module that shows names gets the identity instead of the renderer (from outside:
    the product has no switch for this)."""
    for module in (read_tools, context, delete, flow):
        for name in ("shown", "shown_id", "spelled"):
            if hasattr(module, name):
                monkeypatch.setattr(module, name, _identity)
    monkeypatch.setattr(flow, "skeleton", lambda text: text)
    yield


def _responses(tmp_path: Path, attack: Attack) -> tuple[list[dict[str, Any]], set[str]]:
    """The listing, a search and round 1 of a delete of ``attack``'s layout, in process."""
    root = tmp_path / attack.name
    build(root, attack.layout, "SECRET-x")
    ws = root / "ws"
    past = time.time() - 3600  # identical mtimes: labels cannot differ by their times alone
    for p in ws.iterdir():
        os.utime(p, (past, past))
    uri = "file://" + urllib.parse.quote(str(ws))
    policy = Policy.for_single_workspace(str(ws), "me", token_sha256=None)
    me = policy.local_principal()
    srv = InProcess(policy, tmp_path / f"{attack.name}-state", keyring=KeyRing([("k", b"k" * 32)]),
                    clock=time.time)  # fmt: skip
    try:
        out = [srv.call(me, "notes_list", {"workspaceUri": uri})]
        titles = {n["title"] for n in out[0]["result"]["structuredContent"]["notes"]}
        for title in sorted(titles):
            out.append(srv.call(me, "notes_search", {"workspaceUri": uri, "query": title}))
            out.append(srv.call(me, "notes_delete", {"workspaceUri": uri, "title": title}, FORM))
    finally:
        srv.close()
    served = set().union(*(judge.served_ids(r) for r in out))
    return out, served


@pytest.mark.parametrize("attack", RENDER_ATTACKS, ids=lambda a: a.name)
def test_with_the_renderer_nothing_shown_misleads_and_the_name_is_served_exactly(
    tmp_path: Path, attack: Attack
) -> None:
    (tmp_path / f"{attack.name}-state").mkdir()
    responses, served = _responses(tmp_path, attack)
    assert judge.harm(responses, attack.forged) == []
    assert attack.served in served


@pytest.mark.parametrize("attack", RENDER_ATTACKS, ids=lambda a: a.name)
def test_positive_control_without_the_renderer_the_judge_sees_every_attack(
    tmp_path: Path, attack: Attack, renderer_off: None
) -> None:
    (tmp_path / f"{attack.name}-state").mkdir()
    responses, served = _responses(tmp_path, attack)
    assert judge.harm(responses, attack.forged) != []
    assert attack.served in served


def test_the_judge_reads_form_labels_and_ignores_structured_content() -> None:
    response = {
        "result": {
            "resultType": "input_required",
            "inputRequests": {
                "delete_choice": {
                    "method": "elicitation/create",
                    "params": {
                        "message": "ok",
                        "requestedSchema": {
                            "properties": {
                                "note_id": {
                                    "oneOf": [
                                        {"const": "a", "title": "Same (modified 1)"},
                                        {"const": "b", "title": "Same\u200b (modified 2)"},
                                    ]
                                }
                            }
                        },
                    },
                }
            },
            "structuredContent": {"notes": [{"id": "raw\nid"}]},
        }
    }
    found = judge.harm([response], ())
    assert "two delete options look the same: 'Same'" in found
    assert "shown text carries hidden characters U+200B" in found
    assert judge.served_ids(response) == {"a", "b", "raw\nid"}
