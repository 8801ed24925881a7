"""An asyncio service for the side-by-side comparison (sidebyside.sh): a TCP echo-and-hash
server and clients on one event loop, for SECONDS (argv[1], default 6)."""
import asyncio
import hashlib
import json
import sys

SECONDS = float(sys.argv[1]) if len(sys.argv) > 1 else 6.0


async def handle(reader, writer):
    while data := await reader.readline():
        doc = json.loads(data)
        digest = hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()
        writer.write((json.dumps({"id": doc["id"], "digest": digest}) + "\n").encode())
        await writer.drain()
    writer.close()


async def client(port, n, stop):
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    i = 0
    while asyncio.get_running_loop().time() < stop:
        writer.write((json.dumps({"id": i, "items": list(range(n))}) + "\n").encode())
        await writer.drain()
        json.loads(await reader.readline())
        i += 1
    writer.close()
    return i


async def main():
    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    stop = asyncio.get_running_loop().time() + SECONDS
    done = await asyncio.gather(*(client(port, 50 + 40 * k, stop) for k in range(4)))
    server.close()
    await server.wait_closed()
    print("requests", sum(done))


asyncio.run(main())
