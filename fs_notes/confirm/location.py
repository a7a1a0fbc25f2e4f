"""Where a shared replay store is: `--replay-store URL` (or the policy file's [replay_store]).

    redis://[USER@]HOST[:PORT][/DB][?key_prefix=P]
    rediss://[USER@]HOST[:PORT][/DB][?ca_file=F&cert_file=F&key_file=F&server_name=N&key_prefix=P]

`rediss` is Redis over TLS: the server's certificate is verified against `ca_file` (else the
system's CAs) and its name (`server_name`, else HOST); `cert_file`/`key_file` present a client
certificate. The password is never part of the URL (a command line is readable by every user
of the host, and a policy file holds no secrets): it comes from `--replay-store-password-file`
(or `password_file` in the policy), a file only the server's user can read (secretfile.py).

Guarantees: `parse_location` accepts only the forms above and returns a `RedisLocation` whose
`describe()` never contains a secret; anything else is a `ValueError` that says what is wrong
(it never echoes a password written into the URL by mistake). Does not: connect (that is
redis_store.py), or check that the files named exist (the store reads them when it opens).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from urllib.parse import parse_qs, unquote, urlsplit

__all__ = ["DEFAULT_PORT", "RedisLocation", "StoreSetting", "parse_location"]

DEFAULT_PORT = 6379
_QUERY_KEYS = {
    "redis": {"key_prefix"},
    "rediss": {"key_prefix", "ca_file", "cert_file", "key_file", "server_name"},
}
_PREFIX_RE = re.compile(r"[A-Za-z0-9._-]{1,64}")
_HOST_RE = re.compile(r"[A-Za-z0-9._:-]{1,253}")
_SERVER_NAME_RE = re.compile(r"[A-Za-z0-9.-]{1,253}")
USAGE = (
    "redis://[USER@]HOST[:PORT][/DB] or rediss://... (TLS); the password goes in "
    "--replay-store-password-file"
)


@dataclass(frozen=True)
class StoreSetting:
    """The [replay_store] table of a policy file, as written (the password file is read by
    the configuration, config.py, when the server starts)."""

    url: str
    password_file: str | None = None


@dataclass(frozen=True)
class RedisLocation:
    host: str
    port: int = DEFAULT_PORT
    db: int = 0
    tls: bool = False
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    server_name: str | None = None
    key_prefix: str = "fs-notes"

    @property
    def host_is_name(self) -> bool:
        """Whether HOST must be looked up (a name, not an IP literal)."""
        import ipaddress

        try:
            ipaddress.ip_address(self.host)
        except ValueError:
            return True
        return False

    def describe(self) -> str:
        """The URL without secrets, and how it authenticates."""
        scheme = "rediss" if self.tls else "redis"
        host = f"[{self.host}]" if ":" in self.host else self.host
        user = f"{self.username}@" if self.username else ""
        auth = ", password from file" if self.password is not None else ", no password"
        tls = ""
        if self.tls:
            tls = f", TLS verified against {self.ca_file or 'the system CAs'}"
            tls += ", client certificate" if self.cert_file else ""
        return f"Redis {scheme}://{user}{host}:{self.port}/{self.db}{auth}{tls}"


def _labels_fit(name: str) -> bool:
    """A DNS name's labels are 1 to 63 characters (a trailing dot aside)."""
    return all(1 <= len(label) <= 63 for label in name.removesuffix(".").split("."))


def parse_location(url: str, *, password: str | None = None) -> RedisLocation:
    """Parse `url` (see the module docstring); `password` is the content of the password file."""
    if not isinstance(url, str) or not url or len(url) > 2048:
        raise ValueError(f"--replay-store takes {USAGE}")
    if any(ord(c) < 0x21 or ord(c) == 0x7F for c in url):
        raise ValueError("the replay store URL contains spaces or control characters")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        raise ValueError(f"the replay store URL is malformed; it takes {USAGE}") from None
    if port == 0:
        raise ValueError("the replay store URL's port must be from 1 to 65535")
    scheme = parts.scheme.lower()
    if scheme not in _QUERY_KEYS:
        shown = scheme or "none"
        raise ValueError(
            f"the replay store URL's scheme is {shown!r}; it takes {USAGE} "
            "(for a SQLite file on this host use --replay-db FILE)"
        )
    if parts.password is not None:
        raise ValueError(
            "the replay store URL holds a password: put it in a file only you can read "
            "(chmod 600) and pass --replay-store-password-file FILE (or password_file in the "
            "policy), so that it is not shown to every user of the host"
        )
    host = parts.hostname or ""
    if not _HOST_RE.fullmatch(host):
        raise ValueError(f"the replay store URL needs a host: {USAGE}")
    if parts.fragment:
        raise ValueError("the replay store URL has a #fragment; remove it")
    path = parts.path.strip("/")
    if path and not (path.isascii() and path.isdigit() and len(path) <= 5):
        raise ValueError("the replay store URL's path is the database number (/0, /1, ...)")
    query = parse_qs(parts.query, keep_blank_values=True, strict_parsing=False)
    if parts.query and not query:
        raise ValueError("the replay store URL's query is malformed (key=value&...)")
    unknown = sorted(set(query) - _QUERY_KEYS[scheme])
    if unknown:
        allowed = ", ".join(sorted(_QUERY_KEYS[scheme]))
        hint = " (TLS options need rediss://)" if scheme == "redis" else ""
        raise ValueError(
            f"the replay store URL has unknown options {unknown}; known: {allowed}{hint}"
        )
    options: dict[str, str] = {}
    for key, values in query.items():
        if len(values) != 1 or not values[0]:
            raise ValueError(f"the replay store URL's {key} needs exactly one non-empty value")
        options[key] = values[0]
    if "server_name" in options and not _SERVER_NAME_RE.fullmatch(options["server_name"]):
        raise ValueError("server_name takes a host name (A-Z a-z 0-9 . -)")
    prefix = options.pop("key_prefix", "fs-notes")
    if not _PREFIX_RE.fullmatch(prefix):
        raise ValueError("key_prefix takes 1 to 64 of A-Z a-z 0-9 . _ -")
    username = unquote(parts.username) if parts.username else None
    for name, value in [("user name", username or ""), *options.items()]:
        if any(ord(c) < 0x20 or ord(c) == 0x7F for c in value):
            raise ValueError(f"the replay store URL's {name} contains control characters")
    for name, label in (("host", host), ("server_name", options.get("server_name"))):
        if label is not None and ":" not in label and not _labels_fit(label):
            raise ValueError(f"the replay store URL's {name} has an empty or too long label")
    if ("cert_file" in options) != ("key_file" in options):
        raise ValueError("a client certificate needs both cert_file and key_file")
    if password is not None and (not password or "\n" in password or "\r" in password):
        raise ValueError("the replay store password file must hold one line")
    return RedisLocation(
        host=host,
        port=DEFAULT_PORT if port is None else port,
        db=int(path or 0),
        tls=scheme == "rediss",
        username=username,
        password=password,
        ca_file=options.get("ca_file"),
        cert_file=options.get("cert_file"),
        key_file=options.get("key_file"),
        server_name=options.get("server_name"),
        key_prefix=prefix,
    )
