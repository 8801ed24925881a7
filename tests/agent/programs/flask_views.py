"""The two views of the Flask test applications (flask_labels.py, flask_spans.py): /heavy
burns 30 ms of CPU in heavy_burn(), /light 10 ms in light_burn()."""
from burn import burn_for
from flask import Flask


def heavy_burn():
    return burn_for(0.03)


def light_burn():
    return burn_for(0.01)


def make_app(name):
    app = Flask(name)

    @app.route("/heavy")
    def heavy():
        heavy_burn()
        return "heavy\n"

    @app.route("/light")
    def light():
        light_burn()
        return "light\n"

    return app
