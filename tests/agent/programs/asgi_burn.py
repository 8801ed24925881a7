"""An ASGI application whose every request burns 20 ms of CPU in app_burn() (uvicorn test)."""
from wsgi_burn import app_burn


async def app(scope, receive, send):
    if scope["type"] != "http":
        return
    app_burn()
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
    await send({"type": "http.response.body", "body": b"ok\n"})
