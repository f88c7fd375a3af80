"""The server URLs a user types (RAG_CHROMA_URL, RAG_BASE_URL): their form checked, their credentials hidden.

check_url turns a malformed URL into a one-line UsageError that says what to fix;
redact_url hides the user-info (user:password@ or token@) of every URL in a text, and is
what every message, report and saved file that shows a URL goes through. Connecting is
store.py's and llm.py's job.
"""

import re
from urllib.parse import SplitResult, urlsplit

from rag.errors import UsageError

REDACTED = "***"
CHROMA_URL = ("Chroma URL (--chroma-url, env RAG_CHROMA_URL)", "http://HOST:PORT")   # check_url's what, example
BASE_URL = ("base URL (--base-url, env RAG_BASE_URL)", "http://HOST:PORT/v1")
# scheme://, then everything up to the last @ before the path (or a space): a password may hold ':' '?' '#'
_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^\s/]*@")


def redact_url(text: str) -> str:
    """`text` with the user-info of each URL in it hidden: http://user:secret@host/v1 -> http://***@host/v1.

    Works on malformed URLs and on messages that quote one; text without a URL is unchanged."""
    return _USERINFO.sub(rf"\g<1>{REDACTED}@", text)


def check_token(token: str, where: str) -> None:
    """A token goes into HTTP headers: printable ASCII without spaces, else a UsageError naming `where`."""
    if not re.fullmatch(r"[!-~]+", token):
        raise UsageError(f"{where} must be ASCII letters, digits and punctuation, without spaces")


def check_url(url: str, what: str, example: str) -> SplitResult:
    """The parts of an http(s) URL; a UsageError naming `what` and showing `example` when it is malformed."""
    def bad(problem: str) -> UsageError:
        return UsageError(f"bad {what} {redact_url(url)!r}: {problem}; write it as {example}")

    try:
        parts = urlsplit(url)
    except ValueError:   # only an unbalanced IPv6 bracket gets here
        raise bad("an IPv6 address needs both brackets, as in [::1]") from None
    if parts.scheme not in ("http", "https"):
        raise bad("it must start with http:// or https://")
    if not parts.hostname:
        raise bad("it names no host")
    try:
        port = parts.port
    except ValueError:
        port = -1
    if port is not None and not 0 < port < 65536:
        raise bad("the port must be a number from 1 to 65535")
    return parts

