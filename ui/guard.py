"""What the UI server lets through to gradio: its own host and origin, no files, logins at a bounded rate.

`Guard` is an ASGI middleware in front of gradio's app. It answers

- 400 to a request whose Host header names a host this server does not serve: a page on
  another site that re-points its own DNS name at 127.0.0.1 (DNS rebinding) reaches a
  loopback server with that name in Host;
- 403 to a request whose Origin is another site: gradio serves those and only withholds
  its CORS headers, so a cross-site form could still post questions or files;
- 404 to gradio's file routes: the page serves no files, and `file=<URL>` would make the
  server fetch any public URL for whoever asks; 413 to its upload routes: it takes none
  (launch's max_file_size limits only the size, and an empty file is still stored);
- 429 to a login from an address that failed too often (LoginThrottle).

It does not check passwords (gradio does) and knows nothing of the chat.
"""

import ipaddress
import json
import socket
import time
from dataclasses import dataclass, field
from typing import Callable, Iterable
from urllib.parse import urlsplit

WILDCARD_HOSTS = ("0.0.0.0", "::")
DEFAULT_PORTS = {"http": 80, "ws": 80, "https": 443, "wss": 443}
FILE_ROUTES = ("/gradio_api/file=", "/gradio_api/file/")
UPLOAD_ROUTES = ("/gradio_api/upload", "/gradio_api/process_recording")
LOGIN_ROUTES = ("/login", "/login/")
MAX_FAILED_LOGINS = 5            # failures in a row from one address before its logins are refused
LOCKOUT_S = 30.0                 # the first refusal lasts this long; each further failure doubles it
MAX_LOCKOUT_S = 15 * 60.0
FORGET_S = 60 * 60.0             # an address with no failure for this long starts afresh
MAX_TRACKED = 10_000             # addresses remembered at most (the idle ones are dropped first)


@dataclass(frozen=True)
class HostPolicy:
    """The host names a request's Host header may carry (lowercase, IPv6 without brackets)."""

    names: frozenset[str]
    any_address: bool = False   # also any IP address: the server listens on all of them

    @classmethod
    def for_bind(cls, host: str, extra: Iterable[str] = ()) -> "HostPolicy":
        """localhost, loopback addresses, the bound address and `extra`; on a wildcard address, any
        IP address and this machine's name too. An IP address cannot be rebound, a DNS name can."""
        wildcard = _bare(host) in WILDCARD_HOSTS
        names = {"localhost", _bare(host)} | {_bare(name) for name in extra}
        if wildcard:
            names.add(socket.gethostname().lower())
        return cls(frozenset(names), wildcard)

    def allows(self, hostname: str | None) -> bool:
        if not hostname:
            return False
        if hostname in self.names:
            return True
        try:
            address = ipaddress.ip_address(hostname)
        except ValueError:
            return False
        return address.is_loopback or self.any_address


def _bare(host: str) -> str:
    return host.strip().strip("[]").lower()


@dataclass
class LoginThrottle:
    """Failed logins per client address. After `max_failures` in a row, logins from that address are refused
    for `lockout_s`, doubled by each further failure (at most `max_lockout_s`); a success clears the count.

    An attempt counts as failed from the moment it starts, so parallel attempts cannot slip past the count;
    succeeded() or forgive() takes it back."""

    max_failures: int = MAX_FAILED_LOGINS
    lockout_s: float = LOCKOUT_S
    max_lockout_s: float = MAX_LOCKOUT_S
    clock: Callable[[], float] = time.monotonic
    _failures: dict[str, tuple[int, float, float]] = field(default_factory=dict)   # address: (count, last, until)

    def retry_after(self, address: str) -> float:
        """Seconds until `address` may try again; 0 when it may now."""
        count, last, until = self._failures.get(address, (0, 0.0, 0.0))
        now = self.clock()
        if count and now - last > FORGET_S and now >= until:
            del self._failures[address]
            return 0.0
        return max(0.0, until - now)

    def attempt(self, address: str) -> None:
        """Count a login attempt from `address` as failed until it is known to have succeeded."""
        count, _last, until = self._failures.get(address, (0, 0.0, 0.0))
        now = self.clock()
        count += 1
        if count >= self.max_failures:
            until = now + min(self.lockout_s * 2 ** (count - self.max_failures), self.max_lockout_s)
        if len(self._failures) >= MAX_TRACKED and address not in self._failures:
            self._forget_idle(now)
        self._failures[address] = (count, now, until)

    def succeeded(self, address: str) -> None:
        self._failures.pop(address, None)

    def forgive(self, address: str) -> None:
        """Take back the attempt that attempt() counted: it was neither right nor wrong (a malformed form)."""
        count, last, until = self._failures.get(address, (0, 0.0, 0.0))
        if count <= 1:
            self._failures.pop(address, None)
        else:
            self._failures[address] = (count - 1, last, until if count - 1 >= self.max_failures else 0.0)

    def _forget_idle(self, now: float) -> None:
        for address in [a for a, (_c, _l, until) in self._failures.items() if until <= now]:
            del self._failures[address]
        while len(self._failures) >= MAX_TRACKED:   # every one is locked out: drop the oldest
            del self._failures[next(iter(self._failures))]


class Guard:
    """ASGI middleware: refuses foreign hosts and origins, the file and upload routes, and throttled logins."""

    def __init__(self, app, hosts: HostPolicy, throttle: LoginThrottle):
        self.app = app
        self.hosts = hosts
        self.throttle = throttle

    async def __call__(self, scope, receive, send):
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        headers = {name.decode("latin-1").lower(): value.decode("latin-1") for name, value in scope["headers"]}
        host = headers.get("host", "")
        hostname = _hostname(host)
        if not self.hosts.allows(hostname):
            await _refuse(scope, send, 400, f"rag ui does not serve the host {host!r}: open it by the address "
                          "it printed, or start it with --allowed-host NAME")
            return
        origin = headers.get("origin")
        if origin is not None and not _same_origin(origin, host, scope.get("scheme", "http")):
            await _refuse(scope, send, 403, f"cross-origin request from {origin!r} refused")
            return
        path = scope.get("path", "")
        if path.startswith(FILE_ROUTES):
            await _refuse(scope, send, 404, "rag ui serves no files")
            return
        if path.rstrip("/") in UPLOAD_ROUTES:
            await _refuse(scope, send, 413, "rag ui takes no uploads")
            return
        if scope["type"] == "http" and scope["method"] == "POST" and path in LOGIN_ROUTES:
            await self._login(scope, receive, send)
            return
        await self.app(scope, receive, send)

    async def _login(self, scope, receive, send):
        address = (scope.get("client") or ("unknown", 0))[0]
        wait_s = self.throttle.retry_after(address)
        if wait_s > 0:
            await _refuse(scope, send, 429, f"too many failed logins from {address}: try again in {wait_s:.0f} s",
                          [(b"retry-after", str(max(1, round(wait_s))).encode())])
            return
        self.throttle.attempt(address)
        status = {}

        async def noting_status(message):
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, noting_status)
        finally:
            code = status.get("code")
            if code == 200:
                self.throttle.succeeded(address)
            elif code != 400:   # gradio answers 400 to a wrong user or password; anything else is no guess
                self.throttle.forgive(address)


def _hostname(host: str) -> str | None:
    try:
        return urlsplit(f"//{host}").hostname
    except ValueError:
        return None


def _same_origin(origin: str, host: str, scheme: str) -> bool:
    """Whether a browser's Origin header names the host and port this request was sent to."""
    try:
        sent_to = urlsplit(f"//{host}")
        sent_to_port = sent_to.port or DEFAULT_PORTS.get(scheme)
        parts = urlsplit(origin)
        origin_port = parts.port or DEFAULT_PORTS.get(parts.scheme)
    except ValueError:
        return False
    return bool(parts.hostname) and (parts.hostname, origin_port) == (sent_to.hostname, sent_to_port)


async def _refuse(scope, send, status: int, detail: str, extra_headers=()) -> None:
    if scope["type"] == "websocket":
        await send({"type": "websocket.close", "code": 1008, "reason": detail[:120]})
        return
    body = json.dumps({"detail": detail}).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                            *extra_headers]})
    await send({"type": "http.response.body", "body": body})
