"""The lean HTTP/1.1 exchange of plain-http checks (layer 0 for the request bytes and chunk
decoding; trio's in-memory streams for the response reader, no clock): status codes, every
body framing a health endpoint may use, interim responses, and when a connection may be
reused."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from yurt.runtime.client.checks.http1 import ResponseError, _dechunk, build_request, read_response


def test_the_request_carries_host_user_agent_headers_and_body() -> None:
    assert build_request("GET", "10.0.0.1", 8080, "health?x=1", {}, "", "ua") == (
        b"GET /health?x=1 HTTP/1.1\r\nHost: 10.0.0.1:8080\r\nUser-Agent: ua\r\n\r\n")
    request = build_request("POST", "::1", 80, "/h", {"X-A": ["1", "2"], "Host": ["svc"]},
                            "hi", "ua")
    assert request == (b"POST /h HTTP/1.1\r\nUser-Agent: ua\r\nX-A: 1\r\nX-A: 2\r\n"
                       b"Host: svc\r\nContent-Length: 2\r\n\r\nhi")


def test_chunks_decode() -> None:
    assert _dechunk(b"3\r\nabc\r\n2;x=y\r\nde\r\n0\r\n\r\n") == (b"abcde", True)
    assert _dechunk(b"3\r\nabc\r\n2\r\nd") == (b"abcd", False)
    with pytest.raises(ResponseError):
        _dechunk(b"zz\r\n")


async def answer(raw: bytes, *, head_only: bool = False, close: bool = False
                 ) -> tuple[int, bytes, bool]:
    send, receive = trio.testing.memory_stream_pair()
    await send.send_all(raw)
    if close:
        await send.aclose()
    return await read_response(receive, head_only=head_only, max_body=8)


async def test_responses_and_reuse() -> None:
    with trio.fail_after(5):
        assert await answer(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok") == (
            200, b"ok", True)
        assert await answer(b"HTTP/1.1 503 Nope\r\ncontent-length: 12\r\n\r\nnot healthy!") \
            == (503, b"not heal", True)  # the output is cut, the body read to its end
        assert await answer(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n") \
            == (204, b"", True)
        assert await answer(b"HTTP/1.1 500 X\r\nTransfer-Encoding: chunked\r\n\r\n"
                            b"4\r\nbad!\r\n0\r\n\r\n") == (500, b"bad!", True)
        assert await answer(b"HTTP/1.0 200 OK\r\n\r\nold", close=True) == (200, b"old", False)
        assert await answer(b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 0"
                            b"\r\n\r\n") == (200, b"", False)
        assert await answer(b"HTTP/1.1 200 OK\r\nContent-Length: 50\r\n\r\n",
                            head_only=True) == (200, b"", True)
        with pytest.raises(ResponseError, match="malformed HTTP response"):
            await answer(b"SSH-2.0-OpenSSH\r\n\r\n")
        with pytest.raises(ResponseError, match="EOF"):
            await answer(b"HTTP/1.1 200", close=True)
