"""Calling a subscriber's webhook for one delivery.

Only ``http``/``https`` URLs and the methods GET, POST, PUT and DELETE are
called; anything else fails before a request is made. Redirects are not
followed. A 2xx answer is success; any other status, a timeout or a network
error raises ``WebhookError`` (the task fails and is retried). Failures that
no retry can cure raise ``PermanentWebhookError`` (the dead letter follows at
once): a subscription that cannot be called as stored (its URL, method or
headers; the delivery carries a copy of the subscriber row, so fixing the row
does not fix the delivery) and a 4xx answer other than 408 and 429. A 429 or
503 with a ``Retry-After`` header (seconds or an HTTP date) sets the earliest
next attempt (at most ``MAX_RETRY_AFTER_S`` away). The response body is read
up to ``MAX_BODY_BYTES``. Header values never reach the logs.
"""

from __future__ import annotations

import datetime
import email.utils
import json
import socket
import threading
import time
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import requests
from requests.adapters import HTTPAdapter
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool

from nsj_queue_lib.exceptions import PermanentError
from nsj_queue_lib.log import get_logger
from nsj_queue_lib.retry_policy import MAX_RETRY_AFTER_S

logger = get_logger("webhook")

ALLOWED_SCHEMES = ("http", "https")
ALLOWED_METHODS = ("GET", "POST", "PUT", "DELETE")
METHODS_WITH_BODY = ("POST", "PUT")
MAX_BODY_BYTES = 64 * 1024
BODY_EXCERPT_CHARS = 200


# Client errors a later attempt can cure: a timeout on the server's side, a rate limit.
RETRYABLE_4XX = (408, 429)
RETRY_AFTER_STATUSES = (429, 503)


class WebhookError(Exception):
    """The webhook call failed or was refused; the delivery is retried.

    ``retry_after_s``: the earliest next attempt the server asked for, or None.
    """

    def __init__(self, message: str, retry_after_s: float | None = None) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class PermanentWebhookError(WebhookError, PermanentError):
    """A delivery that can never succeed as stored: not retried, dead-lettered at once."""


def parse_retry_after(value: str | None, now: datetime.datetime) -> float | None:
    """Seconds to wait from a ``Retry-After`` value (delta-seconds or an HTTP date), at most
    ``MAX_RETRY_AFTER_S``; None when absent or unreadable, 0 for a date in the past."""
    if value is None:
        return None
    value = value.strip()
    if value.isascii() and value.isdigit():
        return min(float(value), MAX_RETRY_AFTER_S)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:  # an HTTP date is always GMT
        when = when.replace(tzinfo=datetime.timezone.utc)
    return min(max((when - now).total_seconds(), 0.0), MAX_RETRY_AFTER_S)


def redact_url(url: str) -> str:
    """The URL without credentials, query or fragment: safe to log and store."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    try:
        port = parts.port
    except ValueError:
        port = None
    if port:
        host = f"{host}:{port}"
    return urlunsplit((parts.scheme, host, parts.path, "", ""))


def check_request(subscription: dict[str, Any]) -> tuple[str, str, dict[str, str]]:
    """(method, url, headers) of a subscription, or WebhookError before any request."""
    url = subscription.get("url")
    if not isinstance(url, str) or not url.strip():
        raise PermanentWebhookError(f"subscriber {subscription.get('id')!r} has no url")
    parts = urlsplit(url.strip())
    if parts.scheme.lower() not in ALLOWED_SCHEMES or not parts.hostname:
        raise PermanentWebhookError(
            f"subscriber {subscription.get('id')!r}: only http and https URLs are called, got scheme "
            f"{parts.scheme or '(none)'!r}"
        )
    try:
        _ = parts.port  # urllib parses the port lazily: reading it validates it
    except ValueError:
        raise PermanentWebhookError(
            f"subscriber {subscription.get('id')!r}: the url has an invalid port"
        ) from None
    method = (subscription.get("http_method") or "POST").strip().upper()
    if method not in ALLOWED_METHODS:
        raise PermanentWebhookError(
            f"subscriber {subscription.get('id')!r}: unsupported HTTP method {method!r} "
            f"(supported: {', '.join(ALLOWED_METHODS)})"
        )
    headers = subscription.get("headers") or {}
    if isinstance(headers, str):
        try:
            headers = json.loads(headers)
        except ValueError:
            raise PermanentWebhookError(
                f"subscriber {subscription.get('id')!r}: headers are not valid JSON"
            ) from None
    if not isinstance(headers, dict) or not all(isinstance(k, str) for k in headers):
        raise PermanentWebhookError(
            f"subscriber {subscription.get('id')!r}: headers must be a JSON object"
        )
    cleaned = {k: v if isinstance(v, str) else json.dumps(v) for k, v in headers.items()}
    for name, value in cleaned.items():
        try:
            name.encode("ascii")
            value.encode("latin-1")
        except UnicodeEncodeError:
            # The value itself is never echoed: it may be a secret.
            raise PermanentWebhookError(
                f"subscriber {subscription.get('id')!r}: header {name.encode('ascii', 'replace').decode()!r} "
                "cannot be sent in HTTP (non-latin-1 characters)"
            ) from None
    return method, url.strip(), cleaned


def _body_of(publication: Any) -> tuple[bytes, str]:
    """The request body (the publication as stored) and its default content type."""
    if publication is None:
        return b"", "application/json"
    if not isinstance(publication, str):
        return json.dumps(
            publication, sort_keys=True, separators=(",", ":")
        ).encode(), "application/json"
    try:
        json.loads(publication)
        return publication.encode("utf-8"), "application/json"
    except ValueError:
        return publication.encode("utf-8"), "text/plain; charset=utf-8"


class _CallWatch:
    """The connection a thread's current call uses, so a watchdog can cut it at the deadline."""

    def __init__(self) -> None:
        self.connection = None
        self.cut = False

    def cut_off(self) -> None:
        self.cut = True
        sock = getattr(self.connection, "sock", None)
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)  # wakes a recv blocked on a trickling peer
            except OSError:
                pass


_current_watch = threading.local()


class _WatchedMixin(HTTPConnection):
    def request(self, *args: Any, **kwargs: Any) -> None:
        watch = getattr(_current_watch, "watch", None)
        if watch is not None:
            watch.connection = self
        return super().request(*args, **kwargs)


class _WatchedHTTPConnection(_WatchedMixin, HTTPConnection):
    pass


class _WatchedHTTPSConnection(_WatchedMixin, HTTPSConnection):
    pass


class _WatchedHTTPPool(HTTPConnectionPool):
    ConnectionCls = _WatchedHTTPConnection


class _WatchedHTTPSPool(HTTPSConnectionPool):
    ConnectionCls = _WatchedHTTPSConnection


class _WatchedAdapter(HTTPAdapter):
    """Pools whose connections report themselves to the calling thread's watchdog."""

    def init_poolmanager(self, *args, **kwargs):
        super().init_poolmanager(*args, **kwargs)
        self.poolmanager.pool_classes_by_scheme = {
            "http": _WatchedHTTPPool,
            "https": _WatchedHTTPSPool,
        }


class WebhookCaller:
    """Delivers envelopes over HTTP; one ``requests.Session`` per thread (connection reuse).

    ``timeout_seconds`` bounds the whole call (connect, headers and body): a
    watchdog shuts the socket down at the deadline, so a peer that trickles
    bytes cannot hold an executor thread.
    """

    def __init__(self, timeout_seconds: float):
        self.timeout = timeout_seconds
        self._local = threading.local()

    def _session(self) -> requests.Session:
        session = getattr(self._local, "session", None)
        if session is None:
            session = requests.Session()
            session.trust_env = False  # no proxies or .netrc picked up from the environment
            adapter = _WatchedAdapter()
            session.mount("http://", adapter)
            session.mount("https://", adapter)
            self._local.session = session
        return session

    def deliver(self, envelope: dict[str, Any]) -> str:
        subscription = envelope["subscription"]
        method, url, headers = check_request(subscription)
        safe_url = redact_url(url)
        body = None
        if method in METHODS_WITH_BODY:
            body, content_type = _body_of(envelope.get("publication"))
            if not any(k.lower() == "content-type" for k in headers):
                headers["Content-Type"] = content_type
        logger.info(
            "webhook subscriber=%s: %s %s (headers: %s)",
            subscription.get("id"),
            method,
            safe_url,
            ", ".join(sorted(headers)) or "none",
        )
        started = time.monotonic()
        timed_out = f"{method} {safe_url}: timed out after {self.timeout:g} s"
        watch = _CallWatch()
        _current_watch.watch = watch
        watchdog = threading.Timer(self.timeout, watch.cut_off)
        watchdog.daemon = True
        watchdog.start()
        try:
            try:
                response = self._session().request(
                    method,
                    url,
                    data=body,
                    headers=headers,
                    timeout=self.timeout,
                    allow_redirects=False,
                    stream=True,
                )
            # "from None": the driver's exception text carries the URL's query string.
            except requests.Timeout:
                raise WebhookError(timed_out) from None
            except requests.RequestException as exc:
                if watch.cut:
                    raise WebhookError(timed_out) from None
                raise WebhookError(f"{method} {safe_url}: {type(exc).__name__}") from None
            else:
                try:
                    excerpt = self._read_excerpt(response, started)
                finally:
                    response.close()
        finally:
            watchdog.cancel()
            _current_watch.watch = None
        if watch.cut:
            raise WebhookError(timed_out)
        summary = f"{method} {safe_url} -> HTTP {response.status_code}"
        if excerpt:
            summary += f": {excerpt}"
        if not 200 <= response.status_code < 300:
            raise _failure(response, summary)
        return summary

    def _read_excerpt(self, response: requests.Response, started: float) -> str:
        """Read at most MAX_BODY_BYTES, within the timeout overall; return its start as text."""
        received = bytearray()
        try:
            for chunk in response.iter_content(chunk_size=8192):
                received.extend(chunk)
                if len(received) >= MAX_BODY_BYTES or time.monotonic() - started > self.timeout:
                    break
        except requests.RequestException:
            pass  # the status line is what matters; a broken body is not a failure by itself
        text = bytes(received[:MAX_BODY_BYTES]).decode(
            response.encoding or "utf-8", errors="replace"
        )
        text = " ".join(text.split())
        return text[:BODY_EXCERPT_CHARS]


def _failure(response: requests.Response, summary: str) -> WebhookError:
    """The error of a non-2xx answer: permanent for most 4xx, with the server's Retry-After."""
    status = response.status_code
    if 400 <= status < 500 and status not in RETRYABLE_4XX:
        return PermanentWebhookError(summary)
    retry_after = None
    if status in RETRY_AFTER_STATUSES:
        now = datetime.datetime.now(datetime.timezone.utc)
        retry_after = parse_retry_after(response.headers.get("Retry-After"), now)
    return WebhookError(summary, retry_after_s=retry_after)
