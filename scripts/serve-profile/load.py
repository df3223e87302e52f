"""Drive a running `harness serve` with N concurrent streaming chat clients for S seconds."""
import asyncio
import json
import sys
import time

import httpx

URL, MODEL, N, SECONDS = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])

async def client(c: httpx.AsyncClient, end: float, counts: list[int]) -> None:
    body = {"model": MODEL, "stream": True, "max_tokens": 64, "temperature": 0, "ignore_eos": True,
            "messages": [{"role": "user", "content": "Write a long story about a lighthouse keeper."}]}
    while time.monotonic() < end:
        async with c.stream("POST", URL + "/v1/chat/completions", json=body) as r:
            async for line in r.aiter_lines():
                if line.startswith("data: ") and line != "data: [DONE]":
                    counts[0] += 1

async def main() -> None:
    counts = [0]
    end = time.monotonic() + SECONDS
    async with httpx.AsyncClient(timeout=120) as c:
        await asyncio.gather(*(client(c, end, counts) for _ in range(N)))
    print(json.dumps({"chunks": counts[0], "seconds": SECONDS, "chunks_per_s": counts[0] / SECONDS}))

asyncio.run(main())
