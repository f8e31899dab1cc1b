"""A provider's HTTP error names the URL it called, with no credential of the URL in it.

A 404 from a wrong ``base_url`` or model is only useful if it says where the
request went: the error's message and its ``url`` attribute carry the URL, with
user info dropped and query values hidden (a key may be in either).
"""

from __future__ import annotations

from functools import partial

import pytest
import trio
from provider_mock import Server, collect, error

from orchestrator import ModelRequest, UserMessage
from orchestrator.providers import BadRequestError, GeminiModel, OpenAIChatModel, ProviderError

HELLO = ModelRequest(messages=[UserMessage("Hello")])
NOT_FOUND = {"error": {"message": "The model `gpt-nope` does not exist", "type": "invalid_request_error"}}


async def test_a_404_names_the_url_called() -> None:
    server = Server(error(404, NOT_FOUND))
    model = OpenAIChatModel("gpt-nope", api_key="sk-secret", base_url="https://llm.example/v1", client=server.client())
    with pytest.raises(BadRequestError) as raised:
        await collect(model, HELLO)
    assert raised.value.status == 404
    assert raised.value.url == "https://llm.example/v1/chat/completions"
    assert "https://llm.example/v1/chat/completions" in str(raised.value)
    assert "sk-secret" not in str(raised.value)


async def test_credentials_in_the_url_are_not_shown() -> None:
    server = Server(error(404, NOT_FOUND))
    base = "https://bob:hunter2@proxy.example:8443/v1"
    model = OpenAIChatModel("gpt-nope", api_key="sk-secret", base_url=base, client=server.client())
    with pytest.raises(BadRequestError) as raised:
        await collect(model, HELLO)
    assert raised.value.url == "https://proxy.example:8443/v1/chat/completions"
    assert "hunter2" not in str(raised.value) and "bob" not in str(raised.value)


def test_query_values_are_hidden_but_harmless_ones() -> None:
    from orchestrator.providers.errors import shown_url

    assert shown_url("https://h.example/p?alt=sse&key=AIza-secret#x") == "https://h.example/p?alt=sse&key=***"


async def test_a_gemini_404_names_its_url_without_its_key() -> None:
    server = Server(error(404, {"error": {"code": 404, "message": "models/nope is not found", "status": "NOT_FOUND"}}))
    model = GeminiModel("nope", api_key="AIza-secret", base_url="https://g.example", client=server.client())
    with pytest.raises(ProviderError) as raised:
        await collect(model, HELLO)
    expected = "https://g.example/v1beta/models/nope:streamGenerateContent?alt=sse"
    assert raised.value.url == expected and expected in str(raised.value)
    assert "AIza-secret" not in str(raised.value)


async def test_a_real_loopback_server_answering_404() -> None:
    async def serve(stream: trio.SocketStream) -> None:
        await stream.receive_some(65536)
        payload = b'{"error": {"message": "no such route", "type": "not_found_error"}}'
        await stream.send_all(
            b"HTTP/1.1 404 Not Found\r\ncontent-type: application/json\r\n"
            + f"content-length: {len(payload)}\r\nconnection: close\r\n\r\n".encode()
            + payload
        )
        await stream.aclose()

    async with trio.open_nursery() as nursery:
        [listener] = await nursery.start(partial(trio.serve_tcp, serve, 0, host="127.0.0.1"))
        port = listener.socket.getsockname()[1]
        base = f"http://user:pw@127.0.0.1:{port}/wrong"
        local = OpenAIChatModel("local-model", api_key="sk-secret", base_url=base, timeout=5.0)
        with trio.fail_after(10), pytest.raises(BadRequestError) as raised:
            await collect(local, HELLO)
        nursery.cancel_scope.cancel()
    assert raised.value.status == 404
    assert raised.value.url == f"http://127.0.0.1:{port}/wrong/chat/completions"
    assert f"http://127.0.0.1:{port}/wrong/chat/completions" in str(raised.value)
    assert "user:pw" not in str(raised.value) and "sk-secret" not in str(raised.value)
