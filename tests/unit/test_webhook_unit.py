"""nsj_queue_lib.webhook without a database.

``check_request``, ``redact_url`` and the body selection are pure; the
``WebhookCaller`` tests talk to a real HTTP server on 127.0.0.1
(``tests.helpers.http_server``), which records what arrives.
"""

from __future__ import annotations

import datetime
import email.utils
import json
import logging
import threading
import time

import pytest

from nsj_queue_lib import PermanentError, webhook
from nsj_queue_lib.retry_policy import MAX_RETRY_AFTER_S, classify
from nsj_queue_lib.webhook import (
    PermanentWebhookError,
    WebhookCaller,
    WebhookError,
    check_request,
    parse_retry_after,
    redact_url,
)
from tests.helpers.http_server import RecordingServer

pytestmark = pytest.mark.timeout(30)


def subscription(**fields):
    base = {"id": "erp", "url": "http://example.test/hook", "http_method": "POST", "headers": None}
    base.update(fields)
    return base


# -- check_request ---------------------------------------------------------------


@pytest.mark.parametrize("http_method", ["GET", "POST", "PUT", "DELETE"])
def test_check_request_accepts_the_four_methods(http_method):
    method, url, headers = check_request(subscription(http_method=http_method))
    assert (method, url, headers) == (http_method, "http://example.test/hook", {})


@pytest.mark.parametrize(
    "given, expected", [("post", "POST"), (" Put ", "PUT"), ("delete", "DELETE")]
)
def test_check_request_normalizes_the_method(given, expected):
    assert check_request(subscription(http_method=given))[0] == expected


@pytest.mark.parametrize("given", [None, ""])
def test_check_request_defaults_to_post(given):
    assert check_request(subscription(http_method=given))[0] == "POST"


@pytest.mark.parametrize(
    "http_method", ["PATCH", "TRACE", "HEAD", "OPTIONS", "CONNECT", "FOO", "GET\r\nX: y"]
)
def test_check_request_refuses_other_methods(http_method):
    with pytest.raises(WebhookError, match="unsupported HTTP method"):
        check_request(subscription(http_method=http_method))


@pytest.mark.parametrize(
    "url",
    [
        "file:///etc/passwd",
        "ftp://example.test/hook",
        "gopher://example.test/",
        "javascript:alert(1)",
        "data:text/plain,hello",
        "example.test/hook",
        "//example.test/hook",
        "http:///no-host",
        "https://",
    ],
)
def test_check_request_refuses_anything_but_http_and_https(url):
    with pytest.raises(WebhookError, match="only http and https"):
        check_request(subscription(url=url))


@pytest.mark.parametrize(
    "url", ["http://example.test/x", "https://example.test/x", "HTTPS://Example.test:8443/x?a=1"]
)
def test_check_request_accepts_http_and_https(url):
    assert check_request(subscription(url=url))[1] == url


def test_check_request_strips_the_url():
    assert (
        check_request(subscription(url="  http://example.test/x \n"))[1] == "http://example.test/x"
    )


@pytest.mark.parametrize("url", [None, "", "   ", 42])
def test_check_request_refuses_a_missing_url(url):
    with pytest.raises(WebhookError, match="has no url"):
        check_request(subscription(url=url))


def test_check_request_headers_from_a_dict_or_json_text():
    headers = {"Authorization": "Bearer x", "X-Num": 5}
    assert check_request(subscription(headers=headers))[2] == {
        "Authorization": "Bearer x",
        "X-Num": "5",
    }
    assert check_request(subscription(headers=json.dumps(headers)))[2] == {
        "Authorization": "Bearer x",
        "X-Num": "5",
    }
    assert check_request(subscription(headers={}))[2] == {}


def test_check_request_returns_a_copy_of_the_headers():
    headers = {"A": "1"}
    returned = check_request(subscription(headers=headers))[2]
    returned["B"] = "2"
    assert headers == {"A": "1"}


@pytest.mark.parametrize(
    "headers", ['{"Authorization": "Bearer s3cr3t"', '["Authorization"]', "[]", 7, ["a"]]
)
def test_check_request_refuses_bad_headers_without_echoing_them(headers):
    with pytest.raises(WebhookError, match="headers") as info:
        check_request(subscription(headers=headers))
    assert "s3cr3t" not in str(info.value)


def test_check_request_checks_the_scheme_before_the_method_and_headers():
    with pytest.raises(WebhookError, match="only http and https"):
        check_request(subscription(url="ftp://x/", http_method="TRACE", headers="not json"))


# -- redact_url ------------------------------------------------------------------


@pytest.mark.parametrize(
    "url, expected",
    [
        ("http://example.test/hook", "http://example.test/hook"),
        ("https://example.test:8443/a/b?token=abc&x=1#frag", "https://example.test:8443/a/b"),
        ("http://user:p4ss@example.test/hook?k=v", "http://example.test/hook"),
        ("http://user@example.test:81/", "http://example.test:81/"),
        ("HTTP://EXAMPLE.test/Path", "http://example.test/Path"),
        ("http://example.test", "http://example.test"),
    ],
)
def test_redact_url_drops_credentials_query_and_fragment(url, expected):
    assert redact_url(url) == expected


def test_redact_url_keeps_ipv6_brackets():
    assert redact_url("http://[::1]:8080/x?token=1") == "http://[::1]:8080/x"


# -- body selection ----------------------------------------------------------------


def test_a_json_publication_is_sent_as_stored_with_json_content_type():
    text = '{"b":1, "a":  [1,2]}'  # not re-encoded: spacing and key order kept
    assert webhook._body_of(text) == (text.encode("utf-8"), "application/json")


def test_a_json_scalar_publication_is_json_too():
    assert webhook._body_of('"texto"') == (b'"texto"', "application/json")


def test_a_text_publication_is_sent_as_utf8_text():
    assert webhook._body_of("ação") == ("ação".encode(), "text/plain; charset=utf-8")


def test_no_publication_is_an_empty_body():
    assert webhook._body_of(None) == (b"", "application/json")


def test_a_non_text_publication_is_serialized_as_json():
    assert webhook._body_of({"b": 1, "a": 2}) == (b'{"a":2,"b":1}', "application/json")


def test_only_post_and_put_carry_a_body():
    assert set(webhook.METHODS_WITH_BODY) == {"POST", "PUT"}


# -- WebhookCaller against a real server -------------------------------------------------


@pytest.fixture
def server():
    with RecordingServer() as recording:
        yield recording


def envelope(url, http_method="POST", headers=None, publication='{"nota":1}'):
    return {
        "publication": publication,
        "subscription": {"id": "erp", "url": url, "http_method": http_method, "headers": headers},
    }


def test_deliver_posts_the_publication_and_summarizes_the_answer(server):
    server.route("/hook", body=b'  {"ok":\n true}  ')
    summary = WebhookCaller(2).deliver(
        envelope(server.url("/hook?token=abc"), headers={"X-Key": "v"})
    )
    assert summary == f'POST {server.url("/hook")} -> HTTP 200: {{"ok": true}}'
    (request,) = server.snapshot()
    assert (request.method, request.path, request.body) == (
        "POST",
        "/hook?token=abc",
        b'{"nota":1}',
    )
    assert request.header("Content-Type") == "application/json"
    assert request.header("X-Key") == "v"


@pytest.mark.parametrize("http_method", ["GET", "DELETE"])
def test_deliver_sends_no_body_with_get_and_delete(server, http_method):
    WebhookCaller(2).deliver(envelope(server.url("/hook"), http_method))
    (request,) = server.snapshot()
    assert request.method == http_method
    assert request.body == b""
    assert request.header("Content-Type") is None


@pytest.mark.parametrize("status", [199, 300, 304, 400, 404, 500, 503])
def test_deliver_fails_on_any_non_2xx_status(server, status):
    server.route("/hook", statuses=[status], body=b"" if status in (199, 304) else b"nope")
    with pytest.raises(WebhookError, match=f"HTTP {status}"):
        WebhookCaller(2).deliver(envelope(server.url("/hook")))


@pytest.mark.parametrize("status", [200, 201, 202, 204, 299])
def test_deliver_succeeds_on_2xx(server, status):
    server.route("/hook", statuses=[status], body=b"" if status == 204 else b"fine")
    assert f"HTTP {status}" in WebhookCaller(2).deliver(envelope(server.url("/hook")))


def test_deliver_does_not_follow_redirects(server):
    server.route("/moved", statuses=[301], headers={"Location": server.url("/target")})
    with pytest.raises(WebhookError, match="HTTP 301"):
        WebhookCaller(2).deliver(envelope(server.url("/moved")))
    assert [r.route for r in server.snapshot()] == ["/moved"]


def test_deliver_times_out(server):
    server.route("/slow", delays=[3.0])
    started = time.monotonic()
    with pytest.raises(WebhookError, match="timed out after 0.3 s"):
        WebhookCaller(0.3).deliver(envelope(server.url("/slow?token=abc")))
    assert time.monotonic() - started < 1.5


def test_a_network_error_is_a_webhook_error_without_the_query_string():
    import socket

    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(WebhookError) as info:
        WebhookCaller(1).deliver(envelope(f"http://127.0.0.1:{port}/hook?token=abc"))
    assert "ConnectionError" in str(info.value)
    assert "token" not in str(info.value)


@pytest.mark.parametrize(
    "url, http_method",
    [
        ("file:///etc/passwd", "POST"),
        ("ftp://127.0.0.1:{port}/hook", "POST"),
        ("http://127.0.0.1:{port}/hook", "PATCH"),
        ("http://127.0.0.1:{port}/hook", "TRACE"),
        (None, "POST"),
    ],
)
def test_refused_requests_are_never_sent_and_are_permanent(server, url, http_method):
    with pytest.raises(PermanentWebhookError):
        WebhookCaller(1).deliver(envelope(url and url.format(port=server.port), http_method))
    time.sleep(0.05)
    assert server.snapshot() == []


@pytest.mark.parametrize("value", ["a\r\nX-Injected: 1", "caf\u20ac-s3cr3t"])
def test_an_unsendable_header_value_fails_without_a_request_or_echoing_the_value(server, value):
    # Any error fails the task; what matters is below.
    with pytest.raises(Exception) as info:
        WebhookCaller(1).deliver(envelope(server.url("/hook"), headers={"X-Key": value}))
    assert "s3cr3t" not in str(info.value) and "Injected" not in str(info.value)
    time.sleep(0.05)
    assert server.snapshot() == []


def test_a_huge_body_is_read_only_up_to_the_bound(server):
    size = 64 * 1024 * 1024
    route = server.route("/big", body_size=size)
    started = time.monotonic()
    summary = WebhookCaller(5).deliver(envelope(server.url("/big")))
    assert time.monotonic() - started < 3
    assert summary.endswith("x" * webhook.BODY_EXCERPT_CHARS)
    assert len(summary) < 300
    time.sleep(0.1)
    assert route.bytes_sent < size // 2


def test_the_excerpt_is_bounded_and_whitespace_is_collapsed(server):
    server.route("/hook", statuses=[500], body=b"linha 1\n\n   linha 2\t" + b"y" * 10_000)
    with pytest.raises(WebhookError) as info:
        WebhookCaller(2).deliver(envelope(server.url("/hook")))
    message = str(info.value)
    assert message.startswith(f"POST {server.url('/hook')} -> HTTP 500: linha 1 linha 2 yyy")
    assert (
        len(message)
        <= len(f"POST {server.url('/hook')} -> HTTP 500: ") + webhook.BODY_EXCERPT_CHARS
    )


@pytest.mark.parametrize("phase", ["headers", "body"])
def test_a_trickling_answer_is_cut_at_the_timeout(server, phase):
    server.route("/drip", drip_interval=0.1, drip_seconds=1.5, drip_headers=phase == "headers")
    started = time.monotonic()
    try:
        WebhookCaller(0.5).deliver(envelope(server.url("/drip")))
    except WebhookError:
        pass
    assert time.monotonic() - started < 1.1  # 0.5 s timeout; the server trickles for 1.5 s


def test_one_session_per_thread_reuses_its_connection(server):
    caller = WebhookCaller(2)
    for _ in range(3):
        caller.deliver(envelope(server.url("/hook")))
    ports = {r.client_port for r in server.snapshot()}
    assert len(ports) == 1

    sessions = []
    thread = threading.Thread(target=lambda: sessions.append(caller._session()))
    thread.start()
    thread.join()
    assert sessions[0] is not caller._session()  # another thread gets its own session
    assert caller._session().trust_env is False  # no proxy or .netrc from the environment


def test_header_values_never_reach_the_logs(server, caplog):
    logger = logging.getLogger("nsj_queue_lib")
    logger.addHandler(caplog.handler)
    caplog.set_level(logging.DEBUG, logger="nsj_queue_lib")
    try:
        server.route("/fail", statuses=[500])
        caller = WebhookCaller(1)
        headers = {"Authorization": "Bearer s3cr3t-one", "X-Other": "s3cr3t-two"}
        caller.deliver(envelope(server.url("/ok?token=abc"), headers=headers))
        with pytest.raises(WebhookError):
            caller.deliver(envelope(server.url("/fail"), headers=headers))
    finally:
        logger.removeHandler(caplog.handler)
    text = "\n".join(r.getMessage() for r in caplog.records)
    assert "Authorization" in text  # header names are logged...
    assert "s3cr3t" not in text  # ...values never
    assert "token=abc" not in text


def test_check_request_refuses_a_header_http_cannot_carry_without_echoing_it():
    with pytest.raises(WebhookError) as info:
        check_request({"id": "s", "url": "http://example.test/", "headers": {"X-Key": "s3cret€"}})
    assert "X-Key" in str(info.value)
    assert "s3cret" not in str(info.value)


def test_check_request_refuses_an_invalid_port():
    with pytest.raises(WebhookError, match="invalid port"):
        check_request({"id": "s", "url": "http://example.test:99999/"})


def test_check_request_sends_non_text_header_values_as_json():
    _, _, headers = check_request(
        {"id": "s", "url": "http://example.test/", "headers": {"X-On": True}}
    )
    assert headers == {"X-On": "true"}


# -- which failures are permanent, and Retry-After ---------------------------------------


@pytest.mark.parametrize("status", [400, 401, 403, 404, 405, 409, 410, 413, 422, 451, 499])
def test_a_4xx_answer_is_permanent(server, status):
    server.route("/hook", statuses=[status], body=b"refused")
    with pytest.raises(PermanentWebhookError, match=f"HTTP {status}") as info:
        WebhookCaller(2).deliver(envelope(server.url("/hook")))
    assert isinstance(info.value, PermanentError) and classify(info.value).permanent


@pytest.mark.parametrize("status", [300, 301, 408, 429, 500, 502, 503, 504])
def test_408_429_5xx_and_redirects_are_retried(server, status):
    server.route("/hook", statuses=[status], body=b"later")
    with pytest.raises(WebhookError, match=f"HTTP {status}") as info:
        WebhookCaller(2).deliver(envelope(server.url("/hook")))
    assert not isinstance(info.value, PermanentError)
    assert info.value.retry_after_s is None  # no Retry-After header


@pytest.mark.parametrize("status", [429, 503])
def test_retry_after_seconds_on_429_and_503_is_carried_by_the_error(server, status):
    server.route("/hook", statuses=[status], headers={"Retry-After": "120"})
    with pytest.raises(WebhookError) as info:
        WebhookCaller(2).deliver(envelope(server.url("/hook")))
    assert info.value.retry_after_s == 120.0
    assert classify(info.value).retry_after_s == 120.0


def test_retry_after_as_an_http_date_is_read_against_the_clock(server):
    when = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=90)
    server.route(
        "/hook",
        statuses=[429],
        headers={"Retry-After": email.utils.format_datetime(when, usegmt=True)},
    )
    with pytest.raises(WebhookError) as info:
        WebhookCaller(2).deliver(envelope(server.url("/hook")))
    assert 80 <= info.value.retry_after_s <= 90


@pytest.mark.parametrize("status", [500, 408, 400])
def test_retry_after_on_other_statuses_is_ignored(server, status):
    server.route("/hook", statuses=[status], headers={"Retry-After": "120"})
    with pytest.raises(WebhookError) as info:
        WebhookCaller(2).deliver(envelope(server.url("/hook")))
    assert info.value.retry_after_s is None


NOW = datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=datetime.timezone.utc)


@pytest.mark.parametrize(
    "value, expected",
    [
        ("0", 0.0),
        (" 30 ", 30.0),
        ("86401", MAX_RETRY_AFTER_S),
        ("99999999999999999999", MAX_RETRY_AFTER_S),
        ("Fri, 02 Jan 2026 03:05:05 GMT", 60.0),
        ("Fri, 02 Jan 2026 03:00:00 GMT", 0.0),  # in the past: retry as the policy says
        ("Sat, 02 Jan 2027 03:04:05 GMT", MAX_RETRY_AFTER_S),
        (None, None),
        ("", None),
        ("-5", None),
        ("1.5", None),
        ("soon", None),
        ("\u00b2", None),
    ],
)
def test_parse_retry_after(value, expected):
    assert parse_retry_after(value, NOW) == expected
