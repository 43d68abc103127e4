"""What a wrong endpoint is told (issue 36 item 7): a body that is not the API's JSON summed up
(content type, size, first line escaped and bounded), never pasted; errors of a real server that
is not vLLM, on loopback."""

from __future__ import annotations

import http.server
import threading

import pytest

from abhed.model.client import ModelClient
from abhed.model.connect import connect
from abhed.model.errors import ModelError, NotAnApi, body_gist

PAGE = b"<!DOCTYPE html>\n<html>\n<head><title>502</title></head>\n<body>\n<h1>Bad</h1>\n</body>\n</html>\n"


def test_a_body_is_summed_up_in_one_escaped_bounded_line() -> None:
    assert body_gist(PAGE, "text/html; charset=utf-8") == f'text/html, {len(PAGE)} bytes, first line "<!DOCTYPE html>"'
    hostile = b"\n\n  \x1b[2J\x1b]0;title\x07" + b"y" * 200 + b"\nmore"
    gist = body_gist(hostile, None, whole=False)
    assert gist == f'no content type, more than {len(hostile)} bytes, first line "\\x1b[2J\\x1b]0;title\\x07{"y" * 66} [...]"'
    assert "\x1b" not in gist and "\n" not in gist


class Handler(http.server.BaseHTTPRequestHandler):
    status, kind, body = 500, "text/html", PAGE

    def do_GET(self) -> None:  # noqa: N802
        self.send_response(self.status)
        self.send_header("Content-Type", self.kind)
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()
        self.wfile.write(self.body)

    do_POST = do_GET

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def serve():  # type: ignore[no-untyped-def]
    servers = []

    def start(status: int, kind: str, body: bytes) -> str:
        handler = type("H", (Handler,), {"status": status, "kind": kind, "body": body})
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_address[1]}/v1"
    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def test_an_error_page_is_summed_up_and_a_one_line_text_kept(serve) -> None:
    url = serve(500, "text/html", PAGE)
    with pytest.raises(ModelError) as page:
        ModelClient(url, backoff_s=0, attempts=1).models()
    assert f"(HTTP 500: text/html, {len(PAGE)} bytes, first line \"<!DOCTYPE html>\")" in page.value.message
    assert "<title>" not in page.value.message
    url = serve(500, "text/plain", b"upstream down\n")
    with pytest.raises(ModelError) as line:
        ModelClient(url, backoff_s=0, attempts=1).models()
    assert "(HTTP 500: upstream down)" in line.value.message


def test_json_that_is_no_model_list_is_not_the_api_and_the_root_v1_is_tried(serve) -> None:
    url = serve(200, "application/json", b'{"status": "ok"}')
    with pytest.raises(NotAnApi) as caught:
        connect(url, backoff_s=0)
    assert caught.value.message == (
        f"{url} does not answer as an OpenAI-compatible API: GET {url}/models answered JSON that is no model list "
        "(\"{'status': 'ok'}\"). Is this a vLLM server? It serves the API at http://HOST:8000/v1; check the endpoint "
        "(--endpoint, ABHED_ENDPOINT or model.endpoint).")
