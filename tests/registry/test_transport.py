"""The registry client's HTTP, standard library alone: what it answers of requests' interface, the
proxy rules, and the bodies it must not take quietly. The client's own rules (origins, bounds, TLS,
credentials) are tested through it in the other files here."""

from __future__ import annotations

import gzip
import http.server
import socketserver
import subprocess
import sys
import threading

import pytest

from imagekit.registry import transport
from helpers.registry_standin import Reply, Seen, Server


@pytest.mark.parametrize("url, no_proxy, bypass", [
    ("https://reg.example:5000/v2/", "reg.example", True),
    ("https://a.reg.example/v2/", ".reg.example", True),
    ("https://a.reg.example/v2/", "reg.example", True),
    ("https://notreg.example/v2/", "reg.example", False),
    ("https://reg.example:5000/v2/", "reg.example:5000", True),
    ("https://reg.example:5001/v2/", "reg.example:5000", False),
    ("http://10.1.2.3:5000/v2/", "10.0.0.0/8", True),
    ("http://11.1.2.3:5000/v2/", "10.0.0.0/8", False),
    ("http://127.0.0.1:5000/v2/", "localhost, 127.0.0.1", True),
    ("https://anything/v2/", "*", True),
    ("https://anything/v2/", "", False),
])
def test_no_proxy_follows_requests_and_curl(url, no_proxy, bypass):
    assert transport.bypasses_proxy(url, no_proxy) is bypass


def _answer(status: int, headers: dict[str, str], body: bytes):
    return lambda seen, server: Reply(status, headers, body)


def test_a_response_answers_what_the_client_reads():
    link = '</v2/t/referrers/sha256:ab?n=1&last=x,y>; rel="next", <https://other/x>; rel="alt"'
    with Server(_answer(200, {"Link": link, "Docker-Content-Digest": "sha256:ab"}, b"abc")) as standin:
        session = transport.Session()
        resp = session.request("GET", f"{standin.url}/v2/", headers={"Accept": "x/y"})
        assert resp.status_code == 200 and resp.url == f"{standin.url}/v2/" and resp.request.method == "GET"
        assert resp.headers.get("docker-content-digest") == resp.headers["Docker-Content-Digest"] == "sha256:ab"
        assert resp.links["next"]["url"] == "/v2/t/referrers/sha256:ab?n=1&last=x,y"
        assert resp.links["alt"]["url"] == "https://other/x"
        assert resp.raw.read1(2, decode_content=True) == b"ab" and resp.raw.read1(10) == b"c"
        resp.close()
        again = session.request("HEAD", f"{standin.url}/v2/")
        again.raw.release_conn()
        assert again.status_code == 200
    assert [s.headers["accept"] for s in standin.requests("GET")] == ["x/y"]
    assert {s.headers["user-agent"] for s in standin.seen} == {"imagekit"}


def test_a_gzip_body_is_decoded_as_urllib3_did():
    data = b'{"schemaVersion": 2}' * 100
    with Server(_answer(200, {"Content-Encoding": "gzip"}, gzip.compress(data))) as standin:
        resp = transport.Session().request("GET", f"{standin.url}/v2/m")
        assert resp.raw.read() == data


def test_a_body_shorter_than_its_length_is_an_error_not_an_end():
    with Server(lambda seen, server: Reply(200, {"Content-Length": "100"}, b"x" * 10, length=False)) as standin:
        resp = transport.Session().request("GET", f"{standin.url}/v2/b")
        assert resp.raw.read1(100) == b"x" * 10
        with pytest.raises(transport.TransportError, match="IncompleteRead"):
            resp.raw.read1(100)


def test_nothing_listening_and_a_timeout_are_transport_errors():
    with pytest.raises(transport.TransportError, match=r"\[Errno 111\]"):
        transport.Session().request("GET", "http://127.0.0.1:1/v2/")

    def slow(seen: Seen, server: Server) -> Reply:
        server.stop.wait(3)
        return Reply(200, {}, b"")

    with Server(slow) as standin:
        with pytest.raises(transport.TransportTimeout, match="Read timed out"):
            transport.Session().request("GET", f"{standin.url}/v2/", timeout=(5, 0.5))


class _Proxy(http.server.BaseHTTPRequestHandler):
    """A plain-HTTP forward proxy that answers itself and records the request line it got."""

    lines: list[tuple[str, str | None]] = []

    def log_message(self, *args):  # quiet
        pass

    def do_GET(self):  # noqa: N802 - http.server's naming
        type(self).lines.append((self.requestline, self.headers.get("Proxy-Authorization")))
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")


def test_a_plain_http_proxy_gets_the_absolute_form_and_its_credentials():
    with socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Proxy) as proxy:
        threading.Thread(target=proxy.serve_forever, daemon=True).start()
        port = proxy.server_address[1]
        try:
            resp = transport.Session().request("GET", "http://reg.example:5000/v2/x?a=1",
                                               proxies={"http": f"http://u%40s:p%3Aw@127.0.0.1:{port}"})
            assert resp.raw.read() == b"ok"
        finally:
            proxy.shutdown()
    line, auth = _Proxy.lines[-1]
    assert line == "GET http://reg.example:5000/v2/x?a=1 HTTP/1.1"
    assert auth == "Basic dUBzOnA6dw=="          # u@s:p:w


def test_the_registry_client_no_longer_loads_requests():
    probe = ("import sys\nfrom imagekit.registry import RegistryClient\nRegistryClient('127.0.0.1:5000')\n"
             "print(sorted(m for m in sys.modules if m.split('.')[0] in ('requests', 'urllib3')))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
