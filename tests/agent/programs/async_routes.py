"""An asyncio web server with two routes of known cost, for PYAGENT_ASYNC=1's task samples:
/burn burns 20 ms of CPU in burn_route(), /nap awaits asyncio.sleep(0.02) in nap_route().
Each handler measures its own wall time (time.perf_counter()), summed per route into OUT.json
when the server stops, with the number of requests served.

    python async_routes.py fastapi PORT OUT.json   FastAPI under uvicorn (Debian's packages;
                                                   the asyncio loop, not uvloop); stops on
                                                   SIGTERM (uvicorn's own handling)
    python async_routes.py aiohttp PORT OUT.json   aiohttp's server; stops when stdin ends

Prints "ready" once it listens."""
import asyncio
import json
import sys
import time

from wsgi_burn import app_burn

kind, port, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
spent = {"burn": 0.0, "nap": 0.0, "requests": 0}


async def burn_route():
    t0 = time.perf_counter()
    app_burn(0.02)
    spent["burn"] += time.perf_counter() - t0
    spent["requests"] += 1
    return "burnt\n"


async def nap_route():
    t0 = time.perf_counter()
    await asyncio.sleep(0.02)
    spent["nap"] += time.perf_counter() - t0
    spent["requests"] += 1
    return "napped\n"


async def fastapi_main():
    import uvicorn
    from fastapi import FastAPI
    from fastapi.responses import PlainTextResponse

    app = FastAPI()
    app.get("/burn", response_class=PlainTextResponse)(burn_route)
    app.get("/nap", response_class=PlainTextResponse)(nap_route)
    app.get("/", response_class=PlainTextResponse)(lambda: "ok\n")
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, loop="asyncio",
                                           lifespan="off", log_level="warning"))
    serving = asyncio.create_task(server.serve(), name="uvicorn")
    while not server.started:
        await asyncio.sleep(0.01)
    print("ready", flush=True)
    await serving


async def aiohttp_main():
    from aiohttp import web

    async def handler(route):
        async def handle(request):
            return web.Response(text=await route())
        return handle

    app = web.Application()
    app.router.add_get("/burn", await handler(burn_route))
    app.router.add_get("/nap", await handler(nap_route))
    app.router.add_get("/", await handler(lambda: asyncio.sleep(0, "ok\n")))
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    print("ready", flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
    await runner.cleanup()


asyncio.run(fastapi_main() if kind == "fastapi" else aiohttp_main())
with open(out, "w") as f:
    json.dump(spent, f)
