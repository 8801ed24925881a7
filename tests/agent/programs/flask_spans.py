"""A Flask application traced by OpenTelemetry's Flask instrumentation (sid's, scripts/pythons.sh
--otel) with pyagent.SpanProcessor on the tracer provider: each request's server span, the
root span "GET /heavy" or "GET /light", gives the samples of its request span_id and
span_name. Its views are flask_views.py's: /heavy burns 30 ms of CPU in heavy_burn(), /light
10 ms in light_burn() (tests/agent/test_servers.py, flask_span_profiles). No exporter: the
spans go nowhere else."""
from flask_views import make_app
from opentelemetry import trace
from opentelemetry.instrumentation.flask import FlaskInstrumentor
from opentelemetry.sdk.trace import TracerProvider

import pyagent

provider = TracerProvider()
provider.add_span_processor(pyagent.SpanProcessor())
trace.set_tracer_provider(provider)

app = make_app(__name__)
FlaskInstrumentor().instrument_app(app)
