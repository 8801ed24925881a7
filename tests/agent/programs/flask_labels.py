"""A Flask application that labels every request with its route (pyagent.labels), the way a
program would do it once for all views: before_request enters the labels of the matched
rule, teardown_request leaves them. Its views are flask_views.py's: /heavy burns 30 ms of CPU
in heavy_burn(), /light 10 ms in light_burn() (tests/agent/test_servers.py,
flask_route_labels)."""
from flask import g, request
from flask_views import make_app

import pyagent

app = make_app(__name__)


@app.before_request
def label_route():
    if request.url_rule is not None:
        g.pyagent_labels = pyagent.labels(route=request.url_rule.rule)
        g.pyagent_labels.__enter__()


@app.teardown_request
def unlabel_route(exc):
    labels = g.pop("pyagent_labels", None)
    if labels is not None:
        labels.__exit__(None, None, None)
