"""Sealing of the MRTR `requestState` that carries a multi-round request (a pending deletion, a
summary in progress) between two requests, and the key ring that seals it.

Threat model: the token travels through the client and comes back as attacker-controlled input
(spec: basic/patterns/mrtr, "Server Requirements" 4-5). `StateSealer.open` returns a payload only
if the token was minted by a key in our ring, unmodified, for this principal, this method, this
tool, these exact arguments, one of the phases expected, this workspace and this boot (when the
`Expectation` names them), and has not expired. Every failure goes through one
rejecting helper: the precise reason goes to the log and to `StateRejected.reason`; `str()` of the
exception is one fixed message, so a client cannot learn which check failed.

Choice: authenticated encryption (AES-256-GCM, from the `cryptography` package), not only a
MAC. Integrity is what the deletion needs: the candidate set, the identities and the bindings must
be exactly what the server minted. Secrecy is what a principal without read needs (issue 27): the
payload carries per candidate (dev, ino, size, mtime_ns, ctime_ns), which a delete-only principal
must not learn (a note's exact size, its times to the nanosecond), besides the principal name, the
workspace URI and the argument digest. Sealed with a MAC only, the client that holds the token
could read all of it; encrypted, it reads the version and the key id, nothing else. Its length
says no more: the plaintext is padded with spaces to a multiple of `PAD_BYTES`, counting every
integer in the payload at its widest (`_INT_WIDTH`), so the length depends on the ids (which the
form shows anyway), the bindings and the stamps, never on a note's size, inode or times. Stdlib
has no AEAD, and a home-made cipher would be the riskiest code in the server: `cryptography` is
the well-kept binding of OpenSSL that Python's own ecosystem relies on.

Token: ``v2.<kid>.<b64url(16-byte salt + 12-byte nonce + AES-256-GCM ciphertext of the padded
canonical JSON payload, UTF-8)>.<b64url(16-byte tag)>``; the version and kid are the associated data
(every byte before the second dot is bound). Each token is sealed under a key of its own,
HMAC-SHA256 of its random salt under the kid's key (itself derived from the key-file secret
with a fixed label, for domain separation), so GCM's bound on random nonces per key (2^32
messages) never applies, however long a key ring lives: salts would have to repeat (2^64
tokens) before a (key, nonce) pair could. Tokens longer than `MAX_TOKEN_CHARS` are refused
before any other work.

Key file format (`KeyRing.from_file`), UTF-8 text, one key per line::

    # comments and blank lines are ignored
    k2026b:<standard base64 of >= 32 random bytes>     <- first key: signs and verifies
    k2026a:<standard base64>                           <- further keys: verify only

kid is 1-32 of ``[A-Za-z0-9_-]``. Rotation: add the new key as the first line and keep the old one
below it for one TTL, then remove it. Or the file holds one bare secret and nothing else: at least
64 hex digits (``openssl rand -hex 32``), else standard base64 of at least 32 bytes; its kid is
``s`` + the first 12 hex digits of the SHA-256 of the secret, the same in every instance given the
file. The file must be a regular file owned by this user or root, not accessible by others and not
writable by the group (like an ssh private key; `fs_notes.secretfile`); anything else is refused
with `KeyFileError`. Generate a line with ``printf 'k1:%s\\n' "$(openssl rand -base64 32)"``.

What a multi-round tool seals and expects is built in one place, `fs_notes.rounds.request`;
this module knows claims, not tools.

Not guaranteed here: single use. A valid token can be presented again until it expires; the
replay store (`replay.py`) makes a confirmation single-use. Nor does a valid token prove that the
note is still the same file: the caller re-checks the live identity before deleting.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import logging
import math
import os
import re
import secrets
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NoReturn

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from ..protocol.errors import INVALID_PARAMS, ProtocolError
from ..secretfile import SecretFileError, read_secret_file

__all__ = [
    "DEFAULT_TTL",
    "MAX_TOKEN_CHARS",
    "WIRE_MESSAGE",
    "Expectation",
    "KeyFileError",
    "KeyRing",
    "StateRejected",
    "StateSealer",
    "StateTooLarge",
    "args_digest",
    "refuse_state",
]

logger = logging.getLogger(__name__)

WIRE_MESSAGE = "requestState is invalid or expired"


def refuse_state(reason: str) -> ProtocolError:
    """The one refusal of a requestState, whichever tool's: -32602 with `WIRE_MESSAGE` on the
    wire (a client learns nothing of why), `reason` only in the server's log."""
    return ProtocolError(INVALID_PARAMS, WIRE_MESSAGE, log_detail=f"requestState refused: {reason}")
MAX_TOKEN_CHARS = 24 * 1024  # base64 of 16 KiB of padded payload, and room
DEFAULT_TTL = 300.0
FUTURE_SKEW = 60.0
MIN_KEY_BYTES = 32
MAX_KEY_FILE_BYTES = 64 * 1024

_VERSION = "v2"
_PAYLOAD_VERSION = 1
_KEY_LABEL = b"fs-notes/requestState/v2/aes-256-gcm"
_NONCE_BYTES = 12
_SALT_BYTES = 16
#: The plaintext is padded to a multiple of this (see the module docstring).
PAD_BYTES = 1024
#: The widest an integer of a payload is counted: an identity's times reach -2**96 (30
#: characters; tmpfs keeps 28-digit mtimes), its device and inode 2**64 - 1 (20).
_INT_WIDTH = len(str(-(2**96)))
_KID_RE = re.compile(r"[A-Za-z0-9_-]{1,32}")
_TOKEN_RE = re.compile(
    r"([a-z0-9]{1,8})\.([A-Za-z0-9_-]{1,32})\.([A-Za-z0-9_-]+)\.([A-Za-z0-9_-]{22})"
)
_NONCE_RE = re.compile(r"[0-9a-f]{32}")
# Claims the sealer stamps itself; a caller's payload may not set them.
_SEALER_CLAIMS = frozenset({"v", "iat", "exp", "nonce"})
# Claims every payload must bind (checked against an `Expectation` on open).
_BOUND_CLAIMS = ("principal", "method", "tool", "args", "phase")


class StateRejected(Exception):
    """The echoed `requestState` failed verification.

    `str()` is always `WIRE_MESSAGE`, whatever the cause; `.reason` is the precise cause, for the
    log only.
    """

    def __init__(self, reason: str) -> None:
        super().__init__(WIRE_MESSAGE)
        self.reason = reason

    def __str__(self) -> str:
        return WIRE_MESSAGE


class StateTooLarge(ValueError):
    """`seal` would produce a token `open` refuses (more than `MAX_TOKEN_CHARS`)."""


class KeyFileError(ValueError):
    """The key file is missing, unsafe or malformed (the message is one line, no key bytes)."""


def _reject(reason: str) -> NoReturn:
    """The only way `open` fails: precise reason to the log, fixed message to the caller."""
    logger.warning("requestState rejected: %s", reason)
    raise StateRejected(reason)


def _b64u(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _b64u_decode(text: str) -> bytes:
    """Strict inverse of `_b64u`: only the canonical unpadded encoding is accepted."""
    raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    if _b64u(raw) != text:
        raise ValueError("non-canonical base64url")
    return raw


# One encoder per form: json.dumps with options builds a new encoder on every call.
_CANONICAL = {
    ascii_only: json.JSONEncoder(
        sort_keys=True, separators=(",", ":"), ensure_ascii=ascii_only, allow_nan=False
    ).encode
    for ascii_only in (True, False)
}


def _canonical(value: Any, *, ensure_ascii: bool) -> str:
    return _CANONICAL[ensure_ascii](value)


def args_digest(arguments: Mapping[str, Any]) -> str:
    """Hex SHA-256 of the canonical JSON of tool arguments (sorted keys, no whitespace, UTF-8).

    Total over anything JSON can carry, including lone surrogates (encoded with surrogatepass;
    the digest is one-way). Raises ValueError/TypeError for what JSON cannot represent (NaN,
    infinities, non-string keys): callers pass arguments parsed from a JSON request.
    """
    text = _canonical(dict(arguments), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def _int_slack(value: Any) -> int:
    """How many characters the integers in `value` fall short of `_INT_WIDTH` each."""
    if isinstance(value, bool) or value is None or isinstance(value, str | float):
        return 0
    if isinstance(value, int):
        return max(0, _INT_WIDTH - len(str(value)))
    if isinstance(value, Mapping):
        return sum(_int_slack(v) for v in value.values())
    return sum(_int_slack(v) for v in value)


def _padded(plain: str, payload: Mapping[str, Any]) -> bytes:
    """`plain` as UTF-8 (lone surrogates passed through: an id may hold them), with trailing
    spaces to a length that no integer of `payload` moves. Not escaped to ASCII: it is
    encrypted, and escaping would spend six bytes of the size bound per character of an id."""
    raw = plain.encode("utf-8", "surrogatepass")
    widest = len(raw) + _int_slack(payload)  # (digits are one byte each)
    return raw + b" " * (-widest % PAD_BYTES + widest - len(raw))


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _ring_key(secret: bytes) -> bytes:
    return hmac.new(secret, _KEY_LABEL, hashlib.sha256).digest()


def _token_cipher(ring_key: bytes, salt: bytes) -> AESGCM:
    """The AES-256-GCM key of one token: its salt under the kid's key."""
    return AESGCM(hmac.new(ring_key, salt, hashlib.sha256).digest())


class NotAuthentic(ValueError):
    """A sealed box that this key did not make, or that was changed since."""


#: The key ring serve keeps beside the replay database when no --state-key-file is given.
KEPT_NAME = "state.keys"


class KeyRing:
    """Named keys: the first one seals, every one opens."""

    def __init__(self, keys: Sequence[tuple[str, bytes]]) -> None:
        if not keys:
            raise ValueError("a key ring needs at least one key")
        self._keys: dict[str, bytes] = {}
        for kid, secret in keys:
            if not _KID_RE.fullmatch(kid):
                raise ValueError(f"key id {kid!r} is not 1-32 of [A-Za-z0-9_-]")
            if len(secret) < MIN_KEY_BYTES:
                raise ValueError(f"key {kid!r} has {len(secret)} bytes, need >= {MIN_KEY_BYTES}")
            if kid in self._keys:
                raise ValueError(f"key id {kid!r} appears twice")
            self._keys[kid] = _ring_key(bytes(secret))
        self._signing_kid = keys[0][0]
        # once now, before a server confines itself: OpenSSL initialises on first use
        kid = self._signing_kid
        if self.open_box(kid, b"", *self.seal_box(kid, b"", b"warm")) != b"warm":
            raise ValueError("the cipher does not round-trip")

    @classmethod
    def ephemeral(cls) -> KeyRing:
        """A random key held only by this process (tokens die with it)."""
        return cls([(f"e{secrets.token_hex(6)}", secrets.token_bytes(32))])

    @classmethod
    def kept_in(cls, folder: str) -> KeyRing:
        """The ring in `folder`/`KEPT_NAME`, made there (one random key, mode 0600) if there is
        none: without --state-key-file, a confirmation in flight survives a restart. Made by
        writing a temporary file and linking it into place, so two servers starting at once
        end up with one ring and nobody reads half a file. KeyFileError or OSError."""
        path = os.path.join(folder, KEPT_NAME)
        if not os.path.lexists(path):
            kid, secret = f"k{secrets.token_hex(6)}", secrets.token_bytes(32)
            line = f"{kid}:{base64.b64encode(secret).decode()}\n".encode()
            tmp = os.path.join(folder, f".{KEPT_NAME}.{secrets.token_hex(6)}.tmp")
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
            try:
                os.write(fd, line)
                os.fsync(fd)
            finally:
                os.close(fd)
            try:
                os.link(tmp, path)
            except FileExistsError:
                pass  # another server made it first: use theirs
            finally:
                os.unlink(tmp)
        return cls.from_file(path)

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> KeyRing:
        """Read a key file (format in the module docstring); raises KeyFileError."""
        try:
            data = read_secret_file(os.fspath(path), limit=MAX_KEY_FILE_BYTES)
        except SecretFileError as exc:
            raise KeyFileError(str(exc)) from None
        return cls(_parse_key_lines(data))

    @property
    def signing_kid(self) -> str:
        return self._signing_kid

    @property
    def kids(self) -> tuple[str, ...]:
        return tuple(self._keys)

    def seal_box(self, kid: str, header: bytes, plaintext: bytes) -> tuple[bytes, bytes]:
        """(salt + nonce + ciphertext, tag) of `plaintext` under a key of its own derived from
        key `kid` and a random salt, `header` bound."""
        salt, nonce = secrets.token_bytes(_SALT_BYTES), secrets.token_bytes(_NONCE_BYTES)
        sealed = _token_cipher(self._keys[kid], salt).encrypt(nonce, plaintext, header)
        return salt + nonce + sealed[:-16], sealed[-16:]

    def open_box(self, kid: str, header: bytes, box: bytes, tag: bytes) -> bytes:
        """The plaintext of a `seal_box` result; KeyError for an unknown kid, NotAuthentic for
        anything this key did not seal with this header, or changed since."""
        ring_key = self._keys[kid]
        start = _SALT_BYTES + _NONCE_BYTES
        if len(box) < start or len(tag) != 16:
            raise NotAuthentic("too short")
        cipher = _token_cipher(ring_key, box[:_SALT_BYTES])
        try:
            return cipher.decrypt(box[_SALT_BYTES:start], box[start:] + tag, header)
        except InvalidTag:
            raise NotAuthentic("bad tag") from None


_HEX = re.compile(r"[0-9a-fA-F]+")


def _bare_secret(line: str) -> tuple[str, bytes]:
    """A line without a kid: all hex digits is hex (64 or more, an even count), anything else
    must be canonical base64 (padded) of 32 or more bytes. A short, typo'd or constant secret is
    refused rather than read as something else."""
    if _HEX.fullmatch(line):
        if len(line) < 2 * MIN_KEY_BYTES or len(line) % 2:
            raise KeyFileError(
                f"state key file: a hex secret needs an even count of at least "
                f"{2 * MIN_KEY_BYTES} digits, this one has {len(line)} (openssl rand -hex 32)"
            )
        secret = bytes.fromhex(line)
    else:
        try:
            secret = base64.b64decode(line, validate=True)
        except (binascii.Error, ValueError):
            secret = b""
        if not secret or base64.b64encode(secret).decode() != line:
            raise KeyFileError(
                "state key file line 1: expected kid:base64key, or one bare secret "
                "(64+ hex digits, or padded base64 of 32+ bytes)"
            )
    _check_secret(secret, "the secret")
    return f"s{hashlib.sha256(secret).hexdigest()[:12]}", secret


def _check_secret(secret: bytes, what: str) -> None:
    if len(secret) < MIN_KEY_BYTES:
        raise KeyFileError(
            f"state key file: {what} has {len(secret)} bytes, need >= {MIN_KEY_BYTES}"
        )
    if len(set(secret)) == 1:
        raise KeyFileError(f"state key file: {what} is one byte repeated, not a random key")


def _parse_key_lines(data: bytes) -> list[tuple[str, bytes]]:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise KeyFileError("state key file is not UTF-8 text") from None
    lines = [line.strip() for line in text.splitlines()]
    lines = [line for line in lines if line and not line.startswith("#")]
    if len(lines) == 1 and ":" not in lines[0]:  # one bare secret: a one-key ring
        return [_bare_secret(lines[0])]
    keys: list[tuple[str, bytes]] = []
    for number, raw_line in enumerate(text.splitlines(), start=1):
        line = raw_line.strip()
        if not line or line.startswith("#"):
            continue
        kid, sep, encoded = line.partition(":")
        if not sep or not _KID_RE.fullmatch(kid):
            raise KeyFileError(f"state key file line {number}: expected kid:base64key")
        try:
            secret = base64.b64decode(encoded.strip(), validate=True)
        except (binascii.Error, ValueError):
            raise KeyFileError(f"state key file line {number}: key is not base64") from None
        _check_secret(secret, f"line {number}: the key")
        if any(kid == seen for seen, _ in keys):
            raise KeyFileError(f"state key file line {number}: key id {kid!r} repeated")
        keys.append((kid, secret))
    if not keys:
        raise KeyFileError("state key file holds no key")
    return keys


@dataclass(frozen=True)
class Expectation:
    """What the retry that presents a token must match (each compared for equality).

    `phase` is one phase, or the set of phases the retry may be in (the sealed one is then
    read from the token). `workspace` and `boot` are checked only when given; every tool gives
    the workspace, and notes_delete the boot id too (`fs_notes.rounds.request` builds both).
    """

    principal: str
    args: str
    method: str = "tools/call"
    tool: str = "notes_delete"
    phase: str | frozenset[str] = "confirm"
    workspace: str | None = None
    boot: str | None = None


def _strict_object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise ValueError("duplicate key")
        result[key] = value
    return result


def _no_constants(name: str) -> NoReturn:
    raise ValueError(f"non-finite number {name}")


class StateSealer:
    """Mints and verifies `requestState` tokens; clock and randomness are injectable."""

    def __init__(
        self,
        keyring: KeyRing,
        *,
        clock: Callable[[], float] = time.time,
        ttl: float = DEFAULT_TTL,
        token_hex: Callable[[int], str] = secrets.token_hex,
    ) -> None:
        if not (math.isfinite(ttl) and ttl > 0):
            raise ValueError("ttl must be a positive finite number of seconds")
        self._keyring = keyring
        self._clock = clock
        self._ttl = float(ttl)
        self._token_hex = token_hex

    @property
    def ttl(self) -> float:
        return self._ttl

    def seal(self, payload: Mapping[str, Any]) -> str:
        """Stamp v, iat, exp, nonce onto `payload` and return the sealed token.

        The payload must bind principal, method, tool, args and phase (strings) and must not set
        the stamped claims. Raises ValueError for such misuse, StateTooLarge past the size bound.
        """
        clash = _SEALER_CLAIMS.intersection(payload)
        if clash:
            raise ValueError(f"payload sets sealer-owned claims: {sorted(clash)}")
        for claim in _BOUND_CLAIMS:
            if not isinstance(payload.get(claim), str):
                raise ValueError(f"payload claim {claim!r} must be a string")
        now = float(self._clock())
        if not math.isfinite(now):
            raise ValueError("clock returned a non-finite time")
        nonce = self._token_hex(16)
        if not isinstance(nonce, str) or not _NONCE_RE.fullmatch(nonce):
            raise ValueError("nonce source must return 32 lowercase hex characters")
        claims = {**payload, "v": _PAYLOAD_VERSION, "iat": now, "exp": now + self._ttl}
        claims["nonce"] = nonce
        kid = self._keyring.signing_kid
        header = f"{_VERSION}.{kid}"
        plain = _padded(_canonical(claims, ensure_ascii=False), payload)
        box, tag = self._keyring.seal_box(kid, header.encode("ascii"), plain)
        token = f"{header}.{_b64u(box)}.{_b64u(tag)}"
        if len(token) > MAX_TOKEN_CHARS:
            raise StateTooLarge(f"sealed state is {len(token)} characters, max {MAX_TOKEN_CHARS}")
        return token

    def open(self, token: object, *, expect: Expectation) -> dict[str, Any]:
        """Verify `token` against `expect` and return its payload, or raise StateRejected."""
        if not isinstance(token, str):
            _reject(f"not a string ({type(token).__name__})")
        if len(token) > MAX_TOKEN_CHARS:
            _reject("too large")
        match = _TOKEN_RE.fullmatch(token)
        if match is None:
            _reject("malformed")
        version, kid, body, tag = match.groups()
        if version != _VERSION:
            _reject("unknown version")
        if kid not in self._keyring.kids:
            _reject("unknown key id")
        try:
            plain = self._keyring.open_box(
                kid, f"{version}.{kid}".encode("ascii"), _b64u_decode(body), _b64u_decode(tag)
            )
        except (ValueError, binascii.Error):  # NotAuthentic, or not canonical base64url
            _reject("bad mac")
        return self._check_claims(plain, expect)

    def _check_claims(self, plain: bytes, expect: Expectation) -> dict[str, Any]:
        try:
            text = plain.decode("utf-8", "surrogatepass")
            claims = json.loads(
                text, object_pairs_hook=_strict_object, parse_constant=_no_constants
            )
        except (ValueError, UnicodeDecodeError):
            _reject("payload is not canonical JSON")
        if not isinstance(claims, dict):
            _reject("payload is not an object")
        version = claims.get("v")
        if not (_is_number(version) and version == _PAYLOAD_VERSION):
            _reject("payload version")
        phases = {expect.phase} if isinstance(expect.phase, str) else expect.phase
        wanted: dict[str, frozenset[str] | set[str]] = {
            "principal": {expect.principal},
            "method": {expect.method},
            "tool": {expect.tool},
            "args": {expect.args},
            "phase": phases,
        }
        if expect.workspace is not None:
            wanted["workspace"] = {expect.workspace}
        if expect.boot is not None:
            wanted["boot"] = {expect.boot}
        for claim, allowed in wanted.items():
            got = claims.get(claim)
            if not (isinstance(got, str) and got in allowed):
                _reject(f"{claim} mismatch")
        try:
            now = float(self._clock())
        except Exception:  # a raising clock is a rejection, never an acceptance
            logger.exception("requestState clock failed")
            _reject("clock error")
        iat: Any = claims.get("iat")
        exp: Any = claims.get("exp")
        if not (_is_number(iat) and iat <= now + FUTURE_SKEW):
            _reject("issued in the future or missing iat")
        if not (_is_number(exp) and now < exp):
            _reject("expired or missing exp")
        if not (exp <= now + self._ttl + FUTURE_SKEW):
            _reject("lifetime longer than the ttl")
        nonce = claims.get("nonce")
        if not (isinstance(nonce, str) and _NONCE_RE.fullmatch(nonce)):
            _reject("nonce")
        return claims
