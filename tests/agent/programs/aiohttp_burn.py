"""An aiohttp server (Debian's python3-aiohttp) whose every request burns 20 ms of CPU in
app_burn(), inside the task aiohttp runs the request's handler in.

    python aiohttp_burn.py PORT

Prints "ready" once it listens; stops, and exits 0, when its stdin ends (read by a thread of
the loop's default executor: a thread outside any event loop)."""
import asyncio
import sys

from aiohttp import web
from wsgi_burn import app_burn


async def handle(request):
    app_burn()
    return web.Response(text="ok\n")


async def main(port):
    app = web.Application()
    app.router.add_get("/", handle)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    print("ready", flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
    await runner.cleanup()


asyncio.run(main(int(sys.argv[1])))
