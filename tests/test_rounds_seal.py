"""requestState sealing (fs_notes/rounds/seal.py).

Rules come from the spec (basic/patterns/mrtr: integrity, principal, TTL, request binding) or are
ours (token format, size bound, key file). Tokens are corrupted region by region.
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from clock import Clock

from fs_notes.rounds.seal import (
    MAX_TOKEN_CHARS,
    WIRE_MESSAGE,
    Expectation,
    KeyFileError,
    KeyRing,
    StateRejected,
    StateSealer,
    StateTooLarge,
    args_digest,
)

T0 = 1_800_000_000.0
KEY_A = bytes(range(32))
KEY_B = bytes(range(100, 148))
ARGS = {"workspaceUri": "file:///home/u/notes", "title": "TPS report"}



def payload(**over: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "principal": "alice",
        "method": "tools/call",
        "tool": "notes_delete",
        "args": args_digest(ARGS),
        "workspace": "file:///home/u/notes",
        "candidates": [{"id": "a.md", "identity": [1, 2, 3, 4, 5]}],
        "phase": "confirm",
    }
    base.update(over)
    return base


def expect(**over: Any) -> Expectation:
    fields: dict[str, Any] = {"principal": "alice", "args": args_digest(ARGS)}
    fields.update(over)
    return Expectation(**fields)


def sealer(clock: Clock | None = None, ring: KeyRing | None = None) -> StateSealer:
    return StateSealer(ring or KeyRing([("ka", KEY_A)]), clock=clock or Clock())


def rejection(s: StateSealer, token: object, exp: Expectation | None = None) -> StateRejected:
    with pytest.raises(StateRejected) as info:
        s.open(token, expect=exp or expect())
    return info.value


def _b64u(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64u(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def forge(body_text: str, *, kid: str = "ka", key: bytes = KEY_A) -> str:
    """A token that is authentic (sealed with our key) around arbitrary payload text."""
    ring = KeyRing([(kid, key)])
    box, tag = ring.seal_box(kid, f"v2.{kid}".encode(), body_text.encode())
    return f"v2.{kid}.{_b64u(box)}.{_b64u(tag)}"


def good_claims(**over: Any) -> dict[str, Any]:
    claims = payload(v=1, iat=T0, exp=T0 + 300, nonce="0" * 32)
    claims.update(over)
    return claims


# --- round trip -------------------------------------------------------------------------------


def test_a_sealed_state_opens_with_its_bindings_and_returns_the_stamped_payload() -> None:
    s = sealer()
    opened = s.open(s.seal(payload()), expect=expect(workspace="file:///home/u/notes"))
    assert {k: opened[k] for k in payload()} == payload()
    assert opened["v"] == 1 and opened["iat"] == T0 and opened["exp"] == T0 + 300
    assert len(opened["nonce"]) == 32 and int(opened["nonce"], 16) >= 0


def test_every_seal_gets_a_fresh_nonce() -> None:
    s = sealer()
    nonces = {s.open(s.seal(payload()), expect=expect())["nonce"] for _ in range(50)}
    assert len(nonces) == 50


def test_the_token_has_the_documented_shape_and_an_encrypted_canonical_json_payload() -> None:
    """v2.<kid>.<b64url(salt + nonce + ciphertext)>.<b64url(tag)>: AES-256-GCM under the key of
    this token (HMAC of its salt under the kid's key, derived from the secret with the
    documented label); inside, canonical JSON padded with spaces to a multiple of 1 KiB. Read as
    a delete-only principal would (it holds the token): no claim, identity or id shows."""
    import hmac

    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    token = sealer().seal(payload())
    version, kid, body, tag = token.split(".")
    assert (version, kid, len(tag)) == ("v2", "ka", 22)
    box = _unb64u(body)
    ring_key = hmac.new(KEY_A, b"fs-notes/requestState/v2/aes-256-gcm", hashlib.sha256).digest()
    key = hmac.new(ring_key, box[:16], hashlib.sha256).digest()
    padded = AESGCM(key).decrypt(box[16:28], box[28:] + _unb64u(tag), b"v2.ka").decode("ascii")
    text = padded.rstrip(" ")
    claims = json.loads(text)
    assert text == json.dumps(claims, sort_keys=True, separators=(",", ":"))
    assert claims["candidates"] == [{"id": "a.md", "identity": [1, 2, 3, 4, 5]}]
    assert len(padded) % 1024 == 0 and len(padded) > len(text)
    # what the holder sees: the version, the key id and bytes that say nothing
    for readable in ("alice", "a.md", "identity", "notes_delete", "file:", "[1,2,3,4,5]"):
        assert readable not in token
        assert readable.encode() not in box
    assert len(box) == 28 + len(padded)
    # the positive control of the per-token key: under the kid's key itself, it does not open
    from cryptography.exceptions import InvalidTag

    with pytest.raises(InvalidTag):
        AESGCM(ring_key).decrypt(box[16:28], box[28:] + _unb64u(tag), b"v2.ka")


def test_the_length_of_a_token_tells_nothing_of_a_notes_numbers() -> None:
    """A delete-only principal sees the token's length: it must not move with a candidate's
    size, inode, device or times (the digits of each), only with what the form shows."""
    s = sealer()
    small = [{"id": f"n{i}.md", "identity": [1, 2, 3, 4, 5]} for i in range(8)]
    wide = [
        {"id": f"n{i}.md", "identity": [2**64 - 1, 2**64 - 1, 2**63 - 1, -(2**62), 2**62]}
        for i in range(8)
    ]
    lengths = {len(s.seal(payload(candidates=c))) for c in (small, wide)}
    for size in range(0, 5000, 7):  # every digit count of a size, and the buckets' edges
        one = [{"id": "a.md", "identity": [66306, 1234567, size, 10**18, 10**18]}]
        lengths.add(len(s.seal(payload(candidates=small[:7] + one))))
    assert len(lengths) == 1
    # an mtime as tmpfs keeps it (28 digits), and the widest an identity takes
    for far in (10**27, -(2**96), 2**96 - 1):
        one = [{"id": "a.md", "identity": [66306, 1234567, 7, far, far]}]
        lengths.add(len(s.seal(payload(candidates=small[:7] + one))))
    assert len(lengths) == 1
    # the control: what the principal sees in the form (the ids) may move it
    longer = [{"id": "x" * 3000 + ".md", "identity": [1, 2, 3, 4, 5]}]
    assert len(s.seal(payload(candidates=longer))) > lengths.pop()


def test_seal_refuses_payloads_that_set_sealer_claims_or_lack_a_binding() -> None:
    s = sealer()
    for bad in (payload(exp=T0 + 10**9), payload(nonce="0" * 32), payload(v=2), payload(iat=0)):
        with pytest.raises(ValueError, match="sealer-owned"):
            s.seal(bad)
    for claim in ("principal", "method", "tool", "args", "phase"):
        broken = payload()
        del broken[claim]
        with pytest.raises(ValueError, match=claim):
            s.seal(broken)


def test_ids_in_any_script_or_with_lone_surrogates_round_trip_and_fit_as_before() -> None:
    """The payload is UTF-8 inside the cipher (escaping to ASCII spent six bytes of the size
    bound per character: the padding's review found 16 candidates of 640-character ids no
    longer fitting)."""
    s = sealer()
    ids = ["会议/季度报告.md", "caf\u00e9.md", "bad\udcffname.md", "\U0001f4dd notes.md"]
    cands = [{"id": i, "identity": [1, 2, 3, 4, 5]} for i in ids]
    opened = s.open(s.seal(payload(candidates=cands)), expect=expect())
    assert [c["id"] for c in opened["candidates"]] == ids
    many = [{"id": f"{i:02d}" + "x" * 638 + ".md", "identity": [1, 2, 3, 4, 5]} for i in range(16)]
    assert s.open(s.seal(payload(candidates=many)), expect=expect())["candidates"] == many
    cjk = [{"id": f"{i:02d}" + "报" * 150 + ".md", "identity": [1, 2, 3, 4, 5]} for i in range(16)]
    assert s.open(s.seal(payload(candidates=cjk)), expect=expect())["candidates"] == cjk


def test_seal_refuses_to_mint_a_token_open_would_refuse_as_too_large() -> None:
    big = payload(
        candidates=[{"id": "x" * 300 + f"{i}.md", "identity": [1] * 5} for i in range(60)]
    )
    with pytest.raises(StateTooLarge):
        sealer().seal(big)


# --- tampering, region by region ----------------------------------------------------------------


def _swap_last(text: str) -> str:
    return text[:-1] + ("A" if text[-1] != "A" else "B")


def _flip_payload_byte(token: str) -> str:
    v, kid, body, mac = token.split(".")
    raw = bytearray(_unb64u(body))
    raw[len(raw) // 2] ^= 0x01
    return ".".join([v, kid, _b64u(bytes(raw)), mac])


def _flip_nonce_byte(token: str) -> str:
    v, kid, body, mac = token.split(".")
    raw = bytearray(_unb64u(body))
    raw[0] ^= 0x01
    return ".".join([v, kid, _b64u(bytes(raw)), mac])


def _flip_mac_byte(token: str) -> str:
    head, mac = token.rsplit(".", 1)
    raw = bytearray(_unb64u(mac))
    raw[0] ^= 0x80
    return f"{head}.{_b64u(bytes(raw))}"


def _non_canonical_mac(token: str) -> str:
    # 22 base64url chars carry 132 bits for a 128-bit tag: the last char has 4 spare bits.
    head, mac = token.rsplit(".", 1)
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    last = alphabet.index(mac[-1])
    forged = mac[:-1] + alphabet[last ^ 0x01]
    assert _unb64u(forged) == _unb64u(mac)
    return f"{head}.{forged}"


def _body_of_another(token: str) -> str:
    """The payload of another token under the same key, with this token's tag."""
    other = sealer(ring=KeyRing([("ka", KEY_A), ("kb", KEY_B)])).seal(payload(principal="bob"))
    v, kid, _body, mac = token.split(".")
    return ".".join([v, kid, other.split(".")[2], mac])


TAMPERS: list[tuple[str, Callable[[str], object], str]] = [
    ("version bumped", lambda t: "v3" + t[2:], "unknown version"),
    ("the old MAC-only version", lambda t: "v1" + t[2:], "unknown version"),
    ("version case changed", lambda t: "V2" + t[2:], "malformed"),
    ("kid unknown", lambda t: t.replace(".ka.", ".kz.", 1), "unknown key id"),
    ("kid relabelled to another ring key", lambda t: t.replace(".ka.", ".kb.", 1), "bad mac"),
    ("payload byte flipped", _flip_payload_byte, "bad mac"),
    ("nonce byte flipped", _flip_nonce_byte, "bad mac"),
    ("payload of another token", _body_of_another, "bad mac"),
    ("payload char dropped", lambda t: t.replace(".", ".", 1)[:10] + t[11:], "bad mac"),
    ("mac byte flipped", _flip_mac_byte, "bad mac"),
    ("mac with spare bits set", _non_canonical_mac, "bad mac"),
    ("mac last char changed", _swap_last, "bad mac"),
    ("truncated by one char", lambda t: t[:-1], "malformed"),
    ("truncated to the payload", lambda t: t.rsplit(".", 1)[0], "malformed"),
    ("extended with a segment", lambda t: t + ".AAAA", "malformed"),
    ("extended by one char", lambda t: t + "A", "malformed"),
    ("trailing newline", lambda t: t + "\n", "malformed"),
    ("leading space", lambda t: " " + t, "malformed"),
    ("non-ascii char", lambda t: t[:-1] + "\u00e9", "malformed"),
    ("empty", lambda t: "", "malformed"),
    ("int", lambda t: 42, "not a string"),
    ("float", lambda t: 1.5, "not a string"),
    ("list", lambda t: [t], "not a string"),
    ("dict", lambda t: {"requestState": t}, "not a string"),
    ("None", lambda t: None, "not a string"),
    ("bytes", lambda t: t.encode(), "not a string"),
    ("huge string", lambda t: t + "A" * MAX_TOKEN_CHARS, "too large"),
    ("huge garbage", lambda t: "\x00" * (10 * MAX_TOKEN_CHARS), "too large"),
]


@pytest.mark.parametrize(("case", "tamper", "reason"), TAMPERS, ids=[c[0] for c in TAMPERS])
def test_a_tampered_token_is_rejected_with_the_fixed_wire_message(
    case: str, tamper: Callable[[str], object], reason: str
) -> None:
    ring = KeyRing([("ka", KEY_A), ("kb", KEY_B)])
    s = sealer(ring=ring)
    token = s.seal(payload())
    tampered = tamper(token)
    assert tampered != token
    err = rejection(s, tampered)
    assert str(err) == WIRE_MESSAGE
    assert err.args == (WIRE_MESSAGE,)
    assert err.reason.startswith(reason), err.reason


def test_the_wire_message_never_varies_by_cause_but_the_logged_reason_does(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = Clock()
    s = sealer(clock)
    token = s.seal(payload())
    errors = [
        rejection(s, None),
        rejection(s, "x" * (MAX_TOKEN_CHARS + 1)),
        rejection(s, "garbage"),
        rejection(s, "v9" + token[2:]),
        rejection(s, token.replace(".ka.", ".kz.", 1)),
        rejection(s, _flip_mac_byte(token)),
        rejection(s, token, expect(principal="mallory")),
        rejection(s, token, expect(args=args_digest({**ARGS, "title": "x"}))),
        rejection(s, token, expect(tool="notes_update")),
        rejection(s, token, expect(method="resources/read")),
        rejection(s, token, expect(phase="execute")),
        rejection(s, token, expect(workspace="file:///elsewhere")),
    ]
    clock.now = T0 + 301
    errors.append(rejection(s, token))
    assert {str(e) for e in errors} == {WIRE_MESSAGE}
    reasons = [e.reason for e in errors]
    assert len(set(reasons)) == len(reasons)
    logged = " ".join(r.getMessage() for r in caplog.records)
    assert all(reason in logged for reason in reasons)
    assert token not in logged


# --- claims --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("override", "reason"),
    [
        ({"principal": "mallory"}, "principal mismatch"),
        ({"args": args_digest({**ARGS, "title": "Other"})}, "args mismatch"),
        ({"tool": "notes_create"}, "tool mismatch"),
        ({"method": "prompts/get"}, "method mismatch"),
        ({"phase": "done"}, "phase mismatch"),
        ({"workspace": "file:///home/u/other"}, "workspace mismatch"),
    ],
)
def test_state_is_refused_on_a_request_it_was_not_minted_for(
    override: dict[str, str], reason: str
) -> None:
    s = sealer()
    token = s.seal(payload())
    assert rejection(s, token, expect(**override)).reason == reason


def test_state_is_refused_one_second_after_exp_and_at_exp_but_not_before() -> None:
    clock = Clock()
    s = sealer(clock)
    token = s.seal(payload())
    clock.now = T0 + 299
    assert s.open(token, expect=expect())["nonce"]
    clock.now = T0 + 300
    assert rejection(s, token).reason.startswith("expired")
    clock.now = T0 + 301
    assert rejection(s, token).reason.startswith("expired")


def test_state_minted_beyond_the_clock_skew_in_the_future_is_refused() -> None:
    clock = Clock(T0 + 120)
    s = sealer(clock)
    token = s.seal(payload())
    clock.now = T0
    assert rejection(s, token).reason.startswith("issued in the future")
    clock.now = T0 + 70
    assert s.open(token, expect=expect())


def test_a_nan_or_failing_clock_rejects_instead_of_accepting() -> None:
    clock = Clock()
    s = sealer(clock)
    token = s.seal(payload())
    clock.now = float("nan")
    assert rejection(s, token).reason.startswith("issued in the future")

    def broken() -> float:
        raise RuntimeError("clock gone")

    s2 = StateSealer(KeyRing([("ka", KEY_A)]), clock=broken)
    assert rejection(s2, token).reason == "clock error"


FORGED: list[tuple[str, str, str]] = [
    ("payload not json", "not json", "payload is not canonical JSON"),
    ("payload a list", "[1,2]", "payload is not an object"),
    ("payload a string", '"x"', "payload is not an object"),
    ("NaN literal", json.dumps(good_claims()).replace(str(T0 + 300), "NaN"), "payload is not"),
    ("Infinity literal", json.dumps(good_claims(exp=0)).replace(": 0", ": Infinity"), "payload"),
    ("duplicate key", json.dumps(good_claims())[:-1] + ', "principal": "alice"}', "payload is"),
    ("version missing", json.dumps({k: v for k, v in good_claims().items() if k != "v"}), "payl"),
    ("version 2", json.dumps(good_claims(v=2)), "payload version"),
    ("version true", json.dumps(good_claims(v=True)), "payload version"),
    ("principal missing", json.dumps(good_claims(principal=None)), "principal mismatch"),
    ("principal a list", json.dumps(good_claims(principal=["alice"])), "principal mismatch"),
    ("iat missing", json.dumps(good_claims(iat=None)), "issued in the future or missing"),
    ("iat a string", json.dumps(good_claims(iat=str(T0))), "issued in the future or missing"),
    ("exp missing", json.dumps(good_claims(exp=None)), "expired or missing"),
    ("exp a string", json.dumps(good_claims(exp=str(T0 + 300))), "expired or missing"),
    ("exp true", json.dumps(good_claims(exp=True)), "expired or missing"),
    ("exp overflows to inf", json.dumps(good_claims()).replace(str(T0 + 300), "1e999"), "life"),
    ("exp far away", json.dumps(good_claims(exp=T0 + 86400)), "lifetime longer"),
    ("nonce missing", json.dumps(good_claims(nonce=None)), "nonce"),
    ("nonce short", json.dumps(good_claims(nonce="0" * 31)), "nonce"),
    ("nonce upper case", json.dumps(good_claims(nonce="A" * 32)), "nonce"),
    ("nonce an int", json.dumps(good_claims(nonce=10**31)), "nonce"),
]


@pytest.mark.parametrize(("case", "text", "reason"), FORGED, ids=[c[0] for c in FORGED])
def test_claims_are_checked_positively_even_under_a_valid_mac(
    case: str, text: str, reason: str
) -> None:
    err = rejection(sealer(), forge(text))
    assert str(err) == WIRE_MESSAGE
    assert err.reason.startswith(reason), err.reason


def test_a_forged_token_with_good_claims_opens_so_the_forge_helper_is_sound() -> None:
    assert sealer().open(forge(json.dumps(good_claims())), expect=expect())["principal"] == "alice"


# --- keys ----------------------------------------------------------------------------------------


def test_old_key_verifies_while_in_the_ring_as_verify_only_and_not_after_removal() -> None:
    clock = Clock()
    old = StateSealer(KeyRing([("k1", KEY_A)]), clock=clock)
    token = old.seal(payload())
    rotated = StateSealer(KeyRing([("k2", KEY_B), ("k1", KEY_A)]), clock=clock)
    assert rotated.open(token, expect=expect())["principal"] == "alice"
    assert rotated.seal(payload()).split(".")[1] == "k2"
    retired = StateSealer(KeyRing([("k2", KEY_B)]), clock=clock)
    assert rejection(retired, token).reason == "unknown key id"


def test_a_key_id_reused_for_a_different_key_does_not_verify() -> None:
    token = sealer().seal(payload())
    assert rejection(sealer(ring=KeyRing([("ka", KEY_B)])), token).reason == "bad mac"


def test_ephemeral_rings_do_not_accept_each_others_state() -> None:
    a, b = KeyRing.ephemeral(), KeyRing.ephemeral()
    assert a.signing_kid != b.signing_kid
    token = sealer(ring=a).seal(payload())
    assert sealer(ring=a).open(token, expect=expect())
    assert rejection(sealer(ring=b), token).reason == "unknown key id"


def test_a_key_ring_refuses_short_duplicate_and_badly_named_keys() -> None:
    with pytest.raises(ValueError, match="need >= 32"):
        KeyRing([("k", b"x" * 31)])
    with pytest.raises(ValueError, match="twice"):
        KeyRing([("k", KEY_A), ("k", KEY_B)])
    with pytest.raises(ValueError, match="key id"):
        KeyRing([("k.1", KEY_A)])
    with pytest.raises(ValueError, match="at least one"):
        KeyRing([])


def _key_file(path: Path, text: str, mode: int = 0o600) -> Path:
    path.write_text(text)
    os.chmod(path, mode)
    return path


def _b64(key: bytes) -> str:
    return base64.b64encode(key).decode()


def test_two_instances_given_the_same_key_file_accept_each_others_state(tmp_path: Path) -> None:
    text = f"# rotated 2026-01\nk2:{_b64(KEY_B)}\n\nk1:{_b64(KEY_A)}\n"
    f = _key_file(tmp_path / "state.key", text)
    ring1, ring2 = KeyRing.from_file(f), KeyRing.from_file(f)
    assert ring1.signing_kid == "k2" and ring1.kids == ("k2", "k1")
    token = sealer(ring=ring1).seal(payload())
    assert sealer(ring=ring2).open(token, expect=expect())["principal"] == "alice"
    old_token = sealer(ring=KeyRing([("k1", KEY_A)])).seal(payload())
    assert sealer(ring=ring2).open(old_token, expect=expect())


@pytest.mark.parametrize("mode", [0o644, 0o604, 0o620, 0o666, 0o601, 0o640, 0o610])
def test_a_key_file_readable_by_the_group_or_others_is_refused(
    tmp_path: Path, mode: int
) -> None:
    f = _key_file(tmp_path / "state.key", f"k1:{_b64(KEY_A)}\n", mode)
    with pytest.raises(KeyFileError, match="chmod 600"):
        KeyRing.from_file(f)


def test_a_private_key_file_is_accepted(tmp_path: Path) -> None:
    for mode in (0o600, 0o400):  # the positive control of the refusals above
        f = _key_file(tmp_path / "state.key", f"k1:{_b64(KEY_A)}\n", mode)
        assert KeyRing.from_file(f).kids == ("k1",)
        f.unlink()


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("", "no key"),
        ("# only a comment\n", "no key"),
        (f"{_b64(KEY_A)}\n{_b64(KEY_B)}\n", "expected kid:base64key"),
        ("not-hex-nor-base64!\n", "or one bare secret"),
        (f"{KEY_A.hex()[:48]}\n", "a hex secret needs an even count of at least 64 digits"),
        (f"{KEY_A.hex()[:63]}\n", "a hex secret needs an even count"),
        (f"{_b64(KEY_A)[:-1]}\n", "or one bare secret"),  # padding dropped: not canonical
        ("0" * 64 + "\n", "one byte repeated"),
        (f"k1:{_b64(bytes(32))}\n", "one byte repeated"),
        (f"{_b64(b'short' * 6)}\n", "need >= 32"),
        (f"k 1:{_b64(KEY_A)}\n", "expected kid:base64key"),
        ("k1:not base64!!\n", "not base64"),
        (f"k1:{_b64(b'short' * 6)}\n", "need >= 32"),
        (f"k1:{_b64(KEY_A)}\nk1:{_b64(KEY_B)}\n", "repeated"),
    ],
)
def test_a_malformed_key_file_is_refused_without_echoing_key_bytes(
    tmp_path: Path, text: str, match: str
) -> None:
    f = _key_file(tmp_path / "state.key", text)
    with pytest.raises(KeyFileError, match=match) as info:
        KeyRing.from_file(f)
    assert _b64(KEY_A) not in str(info.value) and _b64(KEY_B) not in str(info.value)


def test_a_missing_key_file_or_a_directory_is_a_key_file_error(tmp_path: Path) -> None:
    with pytest.raises(KeyFileError, match="does not exist"):
        KeyRing.from_file(tmp_path / "absent.key")
    os.chmod(tmp_path, 0o700)
    with pytest.raises(KeyFileError, match="not a regular file"):
        KeyRing.from_file(tmp_path)


@pytest.mark.parametrize("encode", [bytes.hex, _b64], ids=["hex", "base64"])
def test_a_bare_secret_is_a_one_key_ring_with_the_same_kid_everywhere(
    tmp_path: Path, encode: Callable[[bytes], str]
) -> None:
    f = _key_file(tmp_path / "state.key", f"# made with openssl rand\n{encode(KEY_A)}\n")
    ring1, ring2 = KeyRing.from_file(f), KeyRing.from_file(f)
    kid = "s" + hashlib.sha256(KEY_A).hexdigest()[:12]
    assert ring1.kids == ring2.kids == (kid,)
    token = sealer(ring=ring1).seal(payload())
    assert sealer(ring=ring2).open(token, expect=expect())["principal"] == "alice"
    # positive control: the same secret under a named kid is a different key id, same key
    named = KeyRing([("k1", KEY_A)])
    assert named.kids == ("k1",) and sealer(ring=named).seal(payload()) != token


def test_a_huge_key_file_is_refused(tmp_path: Path) -> None:
    f = _key_file(tmp_path / "state.key", "#" * (70 * 1024) + "\n")
    with pytest.raises(KeyFileError, match="too large"):
        KeyRing.from_file(f)


# --- argument digest -----------------------------------------------------------------------------


def test_args_digest_is_sha256_of_canonical_utf8_json_and_ignores_key_order() -> None:
    args = {"title": "Réunion — 会議", "workspaceUri": "file:///n"}
    canonical = '{"title":"Réunion — 会議","workspaceUri":"file:///n"}'
    assert args_digest(args) == hashlib.sha256(canonical.encode()).hexdigest()
    assert args_digest(dict(reversed(list(args.items())))) == args_digest(args)
    assert args_digest({**args, "title": "Reunion"}) != args_digest(args)
    assert args_digest({**args, "extra": None}) != args_digest(args)


def test_args_digest_is_total_over_lone_surrogates_and_refuses_nan() -> None:
    assert len(args_digest({"title": "bad \udcff name"})) == 64
    assert args_digest({"title": "\udcff"}) != args_digest({"title": "\udcfe"})
    with pytest.raises(ValueError):
        args_digest({"limit": float("nan")})


def test_rejections_are_logged_at_warning_with_the_reason_only(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="fs_notes.rounds.seal")
    s = sealer()
    token = s.seal(payload())
    rejection(s, token, expect(principal="bob"))
    assert [r.getMessage() for r in caplog.records] == ["requestState rejected: principal mismatch"]
