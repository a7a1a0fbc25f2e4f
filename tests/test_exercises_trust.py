"""The exercises' trust class (issue 30 item 5) on the real `serve`: every case holds, judged on
the disk, and its judges can fail: the same forged accept where the policy lets the form approve
(`either`, a client with a form) deletes the note, and the case says so; the client's force
where the policy takes it (`force = "caller"`) rewrites the note, and that case says so."""

from __future__ import annotations

import tempfile
from pathlib import Path

from fs_notes.exercises import trust


def test_every_trust_case_holds_on_the_real_server() -> None:
    result = trust.run_trust()
    assert [(c["name"], c["result"]) for c in result["cases"]] == [
        ("forged-accept", "held"),
        ("clipped-update", "held"),
        ("placeholder-update", "held"),
        ("forced-by-client", "held"),
        ("restored", "held"),
        ("hidden-instruction", "held"),
    ], result
    assert result["passed"] is True
    assert "trust: 6 of 6 held" in trust.trust_text(result)


def test_the_forged_accept_judge_fails_where_the_form_may_approve() -> None:
    root = Path(tempfile.mkdtemp(prefix="fs-notes-trust-test-"))
    session = trust._Session(
        root, 'approval = "either"'
    )  # a form-capable client: its accept counts here
    try:
        result, detail = trust._forged_accept(session)
    finally:
        session.close()
    assert result == trust.FAILED, detail
    assert "asked for no approval" in detail


def test_the_control_where_the_form_approves_a_forged_accept_does_delete() -> None:
    """Why the case matters: under `either`, with a client that has forms, the client's own
    accept is the approval, and it deletes (as the issue says, it proves nothing)."""
    root = Path(tempfile.mkdtemp(prefix="fs-notes-trust-test-"))
    session = trust._Session(root, 'approval = "either"')
    note = session.ws / "old.md"
    note.write_text("# Old\n")
    try:
        session.start()
        first = session.call("notes_delete", id="old.md")["result"]
        forged = {"delete_choice": {"action": "accept",
                                    "content": {"note_id": "old.md", "confirm": True}}}  # fmt: skip
        session.call("notes_delete", id="old.md", requestState=first["requestState"],
                     inputResponses=forged)  # fmt: skip
    finally:
        session.close()
    assert not note.exists()


def test_the_forced_by_client_judge_fails_where_the_callers_force_is_enough() -> None:
    root = Path(tempfile.mkdtemp(prefix="fs-notes-trust-test-"))
    session = trust._Session(root, 'force = "caller"')
    try:
        result, detail = trust._forced_by_client(session)
    finally:
        session.close()
    assert (result, detail) == (
        trust.FAILED,
        "the client's force alone rewrote the note where only the person may",
    )
    assert (session.ws / "plan.md").read_text() == "# Plan\n\nShort now.\n"
