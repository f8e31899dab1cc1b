"""GET /sessions/{id}/export: a session as Markdown or as a self-contained HTML page, over a real socket."""

from __future__ import annotations

import httpx
import trio

from orchestrator import AgentRunConfig, AssistantMessage, ScriptedModel, create_agent
from tests.server.support import serving


async def test_a_session_is_exported_as_markdown_and_as_html() -> None:
    client = await create_agent(ScriptedModel([AssistantMessage("Use <b>bold</b> & <script>x</script>.")]))
    async with serving(client) as base, httpx.AsyncClient(timeout=10) as http:
        with trio.fail_after(20):
            await client.run("How do I <em>?", config=AgentRunConfig("s1"))
            markdown = await http.get(f"{base}/sessions/s1/export")
            assert markdown.status_code == 200
            assert markdown.headers["content-type"] == "text/markdown; charset=utf-8"
            assert (
                markdown.text
                == "# s1\n\n## User\n\nHow do I <em>?\n\n## Assistant\n\nUse <b>bold</b> & <script>x</script>.\n"
            )
            page = await http.get(f"{base}/sessions/s1/export", params={"format": "html"})
            assert page.status_code == 200 and page.headers["content-type"] == "text/html; charset=utf-8"
            assert "<script>" not in page.text and "&lt;script&gt;x&lt;/script&gt;" in page.text
            bad = await http.get(f"{base}/sessions/s1/export", params={"format": "pdf"})
            assert bad.status_code == 400
            assert bad.json() == {
                "error": {"type": "BadRequest", "message": "format must be markdown or html, got 'pdf'"}
            }
            missing = await http.get(f"{base}/sessions/nobody/export")
            assert missing.status_code == 404 and missing.json()["error"]["type"] == "NotFound"
