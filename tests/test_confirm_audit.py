"""The audit trail (fs_notes/confirm/audit.py): one JSON line per destructive decision."""

from __future__ import annotations

import json
import logging
import os
import stat
import threading
from pathlib import Path

import pytest

from fs_notes.confirm.audit import MAX_FIELD_CHARS, OUTCOMES, AuditLog

T0 = 1_800_000_000.25
KEYS = {"time", "principal", "workspace", "note_id", "outcome"}


def lines(path: Path) -> list[dict[str, object]]:
    text = path.read_text()
    assert text.endswith("\n")
    return [json.loads(line) for line in text.splitlines()]


def test_a_record_is_one_json_line_with_exactly_the_allowed_keys(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    with AuditLog(path, clock=lambda: T0) as log:
        log.record(
            principal="alice",
            workspace="file:///home/alice/notes",
            note_id="projects/tps-report.md",
            outcome="deleted",
        )
        log.record(
            principal="alice",
            workspace="file:///home/alice/notes",
            note_id=None,
            outcome="state-refused",
            reason="bad-mac",
        )
    first, second = lines(path)
    assert first == {
        "time": "2027-01-15T08:00:00.250Z",
        "principal": "alice",
        "workspace": "file:///home/alice/notes",
        "note_id": "projects/tps-report.md",
        "outcome": "deleted",
    }
    assert set(second) == KEYS | {"reason"}
    assert second["note_id"] is None and second["reason"] == "bad-mac"


def test_the_file_is_created_0600_and_appended_to_never_truncated(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    old_umask = os.umask(0)
    try:
        log = AuditLog(path)
    finally:
        os.umask(old_umask)
    with log:
        log.record(principal="p", workspace="w", note_id="n.md", outcome="declined")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    path.write_text('{"earlier":"line","outcome":"deleted"}\n')
    with AuditLog(path) as log:
        log.record(principal="p", workspace="w", note_id="n.md", outcome="cancelled")
    assert [entry.get("outcome") for entry in lines(path)] == ["deleted", "cancelled"]


def test_every_outcome_in_the_vocabulary_is_accepted_and_others_are_refused(
    tmp_path: Path,
) -> None:
    path = tmp_path / "audit.jsonl"
    with AuditLog(path) as log:
        for outcome in sorted(OUTCOMES):
            log.record(principal="p", workspace="w", note_id="n.md", outcome=outcome)
        for bad in ("DELETED", "deleted ", "ok", ""):
            with pytest.raises(ValueError, match="outcome"):
                log.record(principal="p", workspace="w", note_id="n.md", outcome=bad)
    assert sorted(str(e["outcome"]) for e in lines(path)) == sorted(OUTCOMES)
    assert len(OUTCOMES) == 9  # "confirmed" (issue 13): written before the note is removed


@pytest.mark.parametrize(
    "reason",
    ["", "Bad-Mac", "note content: quarterly numbers", "v1.ka.eyJ4IjoxfQ.mac", "a" * 65, "-x"],
)
def test_a_reason_must_be_a_short_code_so_free_text_and_tokens_cannot_enter(
    tmp_path: Path, reason: str
) -> None:
    path = tmp_path / "audit.jsonl"
    with AuditLog(path) as log, pytest.raises(ValueError, match="reason"):
        log.record(principal="p", workspace="w", note_id="n.md", outcome="deleted", reason=reason)
    assert path.read_text() == ""


def test_control_characters_in_fields_cannot_forge_a_second_line(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    evil = 'x.md\n{"outcome":"deleted"}\r\u2028'
    with AuditLog(path) as log:
        log.record(principal="p", workspace="w", note_id=evil, outcome="declined")
    (entry,) = lines(path)
    assert entry["note_id"] == evil and entry["outcome"] == "declined"


def test_long_fields_are_cut_and_lone_surrogates_are_escaped(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    with AuditLog(path) as log:
        log.record(principal="p" * 5000, workspace="w", note_id="\udcff.md", outcome="deleted")
    (entry,) = lines(path)
    assert len(str(entry["principal"])) == MAX_FIELD_CHARS
    assert entry["note_id"] == "\udcff.md"


def test_the_record_api_has_no_place_for_content_secrets_or_state(tmp_path: Path) -> None:
    with AuditLog(tmp_path / "audit.jsonl") as log:
        for extra in ("content", "requestState", "token", "secret"):
            with pytest.raises(TypeError):
                log.record(
                    principal="p", workspace="w", note_id="n", outcome="deleted", **{extra: "x"}
                )
    assert (tmp_path / "audit.jsonl").read_text() == ""


def test_concurrent_writers_never_interleave_within_a_line(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    logs = [AuditLog(path) for _ in range(4)]
    long_id = "n" * 400 + ".md"

    def write(log: AuditLog, who: str) -> None:
        for _ in range(200):
            log.record(principal=who, workspace="w", note_id=long_id, outcome="deleted")

    threads = [threading.Thread(target=write, args=(log, f"p{i}")) for i, log in enumerate(logs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for log in logs:
        log.close()
    entries = lines(path)
    assert len(entries) == 800
    assert all(set(e) == KEYS and e["note_id"] == long_id for e in entries)


def test_without_a_path_records_go_to_the_fs_notes_audit_logger(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="fs_notes.audit")
    AuditLog(None, clock=lambda: T0).record(
        principal="alice", workspace="w", note_id="a.md", outcome="replay-refused"
    )
    (rec,) = [r for r in caplog.records if r.name == "fs_notes.audit"]
    entry = json.loads(rec.getMessage())
    assert set(entry) == KEYS and entry["outcome"] == "replay-refused"


def test_a_closed_log_refuses_to_record(tmp_path: Path) -> None:
    log = AuditLog(tmp_path / "audit.jsonl")
    log.close()
    with pytest.raises(ValueError, match="closed"):
        log.record(principal="p", workspace="w", note_id="n", outcome="deleted")
