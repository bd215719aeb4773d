"""A chat turn's drafts (bridge/agntchat_bridge/runtime.py, Drafts): coalesced to one frame every
80 ms at most, each the whole text so far, the latest always sent last."""

import asyncio
import itertools
import time

from agntchat_bridge.runtime import DRAFT_SECONDS, Drafts


class Socket:
    """What Drafts sends through (the bridge's ``send``), recorded with the time it was sent."""

    def __init__(self):
        self.sent: list[tuple[float, dict]] = []

    async def send(self, frame: dict) -> None:
        self.sent.append((time.monotonic(), frame))


async def test_deltas_are_coalesced_and_the_latest_text_goes_last():
    socket = Socket()
    drafts = Drafts(socket, "item-1")
    words = [f"w{n} " for n in range(40)]
    for word in words:  # a delta every 10 ms for 400 ms
        drafts.add(word)
        await asyncio.sleep(0.01)
    await asyncio.sleep(3 * DRAFT_SECONDS)
    texts = [frame["text"] for _, frame in socket.sent]
    assert {frame["type"] for _, frame in socket.sent} == {"draft"}
    assert {frame["id"] for _, frame in socket.sent} == {"item-1"}
    assert 3 <= len(texts) <= len(words) // 2, texts  # not one frame per delta
    assert texts[-1] == "".join(words)
    assert all(b.startswith(a) and len(b) > len(a) for a, b in itertools.pairwise(texts))
    gaps = [b - a for (a, _), (b, _) in itertools.pairwise(socket.sent)]
    assert min(gaps) >= DRAFT_SECONDS * 0.9, gaps


async def test_closed_drafts_send_nothing_more():
    socket = Socket()
    drafts = Drafts(socket, "item-1")
    drafts.add("first")
    await asyncio.sleep(0.01)
    drafts.add(" second")  # waits for the interval…
    drafts.close()  # …but the reply is being posted: it is never sent
    await asyncio.sleep(2 * DRAFT_SECONDS)
    assert [frame["text"] for _, frame in socket.sent] == ["first"]
