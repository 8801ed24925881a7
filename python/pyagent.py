"""Labels for the samples of pyagent, the in-process CPU profiler.

    import pyagent

    with pyagent.labels(endpoint="/api", tenant="t1"):
        handle()

    @pyagent.labels(job="reindex")
    def reindex(): ...

Samples taken while a `with` block (or a decorated function) runs carry its labels: in the
folded output as a `labels:endpoint=/api,tenant=t1` frame under the thread, in pprof and in
uploads as sample labels, so that a query such as `shop.cpu{endpoint="/api"}` selects them.
Labels nest (an inner block adds to and overrides the outer one; a value of None removes a
label) and follow contextvars: each thread and each asyncio task sees its own, and a task
starts with the labels of the code that created it.

Without the agent (libpyagent.so not preloaded, or not sampling this process) every call
still checks its labels and otherwise does nothing. Names are letters, digits, '_' and '.',
not first a digit, at most 64 characters, not reserved (service_name, pyroscope_spy, names
starting with "__", and span_id and span_name, which SpanProcessor sets); values are non-empty str of at most 2048 bytes of UTF-8 without
control characters; at most 16 labels at a time. Anything else raises ValueError or
TypeError, with or without the agent, so a program behaves the same either way.

Span profiles: `pyagent.SpanProcessor()` is an OpenTelemetry span processor (importing it
imports opentelemetry.sdk; nothing else in this module does). Samples taken while a root
span (one without a parent, or whose parent is remote) or any of its children runs carry
the labels span_id (the root span's id, 16 lowercase hex digits) and span_name (the root
span's name), the labels Grafana Pyroscope's span profiles use:

    provider = TracerProvider()
    provider.add_span_processor(pyagent.SpanProcessor())

One pure-Python file, installed beside libpyagent.so; docs/architecture.md, "Labels" and
"Span profiles".
"""

import contextvars
import functools
import gc
import inspect
import re
import struct
import threading
import warnings

__all__ = ["labels", "current", "enabled", "SpanProcessor"]

MAX_LABELS = 16
MAX_NAME = 64
MAX_VALUE = 2048
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*\Z")
_RESERVED = frozenset(("service_name", "pyroscope_spy", "span_id", "span_name"))
_CONTROL = re.compile("[\x00-\x1f\x7f]")

# The current label set: None, or a bytes value naming an interned set. The agent's signal
# handler reads this variable's value in the sampled thread's current context (a guarded
# walk of the context's variables; agent/labels.c), so nothing is called at a task switch.
_var = contextvars.ContextVar("pyagent.labels", default=None)
_MAGIC = b"pyaL"

_lock = threading.Lock()
_pairs_of = {}  # value -> ((name, value), ...), sorted
_value_of = {}  # ((name, value), ...) -> value
_local_ids = iter(range(1, 1 << 62))
_lib = None


def _node_types():
    """The types of a HAMT, its bitmap node and its array node, which CPython does not
    export from 3.11 on: found through the references of contexts built for the purpose."""
    hamt = gc.get_referents(contextvars.Context())[0]
    bitmap = type(gc.get_referents(hamt)[0])

    def grow():
        # A bitmap node becomes an array node when it would hold a 17th entry.
        held = []
        for i in range(512):
            v = contextvars.ContextVar("pyagent.probe%d" % i)
            held.append(v)
            v.set(i)
            root = gc.get_referents(gc.get_referents(contextvars.copy_context())[0])[0]
            if type(root) is not bitmap:
                return type(root)
        return None

    array = contextvars.Context().run(grow)
    return type(hamt), bitmap, array


def _bind():
    """The agent's functions when libpyagent.so is loaded and samples this process."""
    try:
        import ctypes

        lib = ctypes.PyDLL(None)  # PyDLL: called with the GIL held
        bind = lib.pyagent_labels_bind
        intern = lib.pyagent_labels_intern
        error = lib.pyagent_labels_error
    except (ImportError, OSError, AttributeError):
        return None
    bind.restype = ctypes.c_int
    bind.argtypes = [ctypes.c_size_t, ctypes.c_int64] + [ctypes.c_size_t] * 3
    intern.restype = ctypes.c_int
    intern.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
    error.restype = ctypes.c_char_p
    error.argtypes = []
    try:
        hamt, bitmap, array = _node_types()
    except Exception:  # an interpreter whose contexts are not what CPython's are
        return None
    if array is None or bind(id(_var), hash(_var), id(hamt), id(bitmap), id(array)) != 0:
        return None
    span_name = None
    try:
        span_bind, span_name = lib.pyagent_span_bind, lib.pyagent_span_name
        span_bind.restype = span_name.restype = ctypes.c_int
        span_bind.argtypes = [ctypes.c_size_t, ctypes.c_int64]
        span_name.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
        if span_bind(id(_span_var), hash(_span_var)) != 0:
            span_name = None
    except AttributeError:  # an agent older than span profiles
        span_name = None
    return intern, error, span_name


_names_checked = set()


def _check_name(name):
    if not isinstance(name, str):
        raise TypeError("pyagent.labels: label names are str, not %s" % type(name).__name__)
    if len(name) > MAX_NAME or not _NAME.match(name):
        raise ValueError(
            "pyagent.labels: label name %r: 1 to %d letters, digits, '_' or '.', not first a digit"
            % (name[:80], MAX_NAME)
        )
    if name.startswith("__") or name in _RESERVED:
        raise ValueError("pyagent.labels: label name %r is reserved" % name)


def _check(name, value):
    if name not in _names_checked:
        _check_name(name)
        _names_checked.add(name)
    if value is None or (type(value) is str and 0 < len(value) <= MAX_VALUE and value.isascii()
                         and value.isprintable()):
        return  # the common case: printable ASCII, one byte a character
    if not isinstance(value, str):
        raise TypeError(
            "pyagent.labels: label %r: values are str (or None to remove it), not %s"
            % (name, type(value).__name__)
        )
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError:
        raise ValueError("pyagent.labels: label %r: the value is not valid Unicode" % name) from None
    if size == 0 or size > MAX_VALUE:
        raise ValueError(
            "pyagent.labels: label %r: the value must be 1 to %d bytes of UTF-8" % (name, MAX_VALUE)
        )
    if _CONTROL.search(value):
        raise ValueError("pyagent.labels: label %r: the value holds a control character" % name)


def _cached(cache, key, make):
    """cache[key], made once by make(key) under the module's lock when missing."""
    value = cache.get(key)
    if value is None:
        with _lock:
            value = cache.get(key)
            if value is None:
                value = cache[key] = make(key)
    return value


_warned = set()


def _refused(what, consequence, stacklevel):
    """Says once per kind (what) that the agent refused something, and why."""
    if what not in _warned:
        _warned.add(what)
        reason = (_lib[1]() or b"").decode("utf-8", "replace")
        warnings.warn("%s: %s; %s" % (what, reason, consequence), RuntimeWarning,
                      stacklevel=stacklevel + 1)


def _new_value(pairs):
    sid = -1
    if _lib is not None:
        text = b"".join(n.encode() + b"\0" + v.encode() + b"\0" for n, v in pairs)
        sid = _lib[0](text, len(text))
        if sid < 0:  # called by _cached, _value, _merge, labels.__enter__: the caller's
            _refused("pyagent.labels", "such samples are not labelled", 6)
    if sid > 0:
        value = _MAGIC + struct.pack("<I", sid)
    else:  # a set the agent did not take (or no agent): 12 bytes, which it never reads
        value = _MAGIC + struct.pack("<Q", next(_local_ids))
    _pairs_of[value] = pairs
    return value


def _value(pairs):
    """The variable's value for a sorted tuple of pairs (None for no labels)."""
    return _cached(_value_of, pairs, _new_value) if pairs else None


_merged = {}  # (outer value, labels added) -> value: a `with` that was entered before


def _merge(cur, add):
    merged = dict(_pairs_of.get(cur, ()))
    for name, value in add:
        if value is None:
            merged.pop(name, None)
        else:
            merged[name] = value
    if len(merged) > MAX_LABELS:
        raise ValueError("pyagent.labels: more than %d labels with the outer ones" % MAX_LABELS)
    value = _value(tuple(sorted(merged.items())))
    if len(_merged) >= 65536:  # values of one request each (ids) would grow it forever
        _merged.clear()
    _merged[(cur, add)] = value
    return value


class labels:
    """A context manager and decorator that labels the samples taken inside it.

    `labels(endpoint="/api")`, or `labels({"http.route": "/api"})` for names that are not
    Python identifiers. An instance enters one block at a time; the decorator enters a fresh
    scope per call (functions and coroutine functions)."""

    __slots__ = ("_add", "_tokens", "__weakref__")

    def __init__(self, mapping=None, **kwargs):
        if mapping:
            mapping = dict(mapping)
            mapping.update(kwargs)
            kwargs = mapping
        for name, value in kwargs.items():
            _check(name, value)
        if len(kwargs) > MAX_LABELS:
            raise ValueError("pyagent.labels: more than %d labels" % MAX_LABELS)
        self._add = tuple(sorted(kwargs.items()))
        self._tokens = []

    def __enter__(self):
        cur = _var.get()
        value = _merged.get((cur, self._add))
        if value is None:
            value = _merge(cur, self._add)
        self._tokens.append(_var.set(value))
        return self

    def __exit__(self, *exc):
        _var.reset(self._tokens.pop())
        return False

    def __call__(self, fn):
        add = dict(self._add)
        if inspect.iscoroutinefunction(fn):

            @functools.wraps(fn)
            async def run_async(*args, **kwargs):
                with labels(add):
                    return await fn(*args, **kwargs)

            return run_async

        @functools.wraps(fn)
        def run(*args, **kwargs):
            with labels(add):
                return fn(*args, **kwargs)

        return run


def current():
    """The labels in effect here, as a dict."""
    return dict(_pairs_of.get(_var.get(), ()))


# ---- span profiles (OpenTelemetry) -----------------------------------------------------------

# The root span current here: None, or 16 bytes, b"pyaS", the span name's id in the agent
# (uint32, 0: none) and the span id (uint64), little-endian. The handler reads it as it reads
# _var, and takes the id raw: span ids are not interned, names are (agent/labels.h).
_span_var = contextvars.ContextVar("pyagent.span", default=None)
_SPAN_MAGIC = b"pyaS"
MAX_SPAN_NAME = 256  # bytes of UTF-8 kept of a span name
MAX_SPAN_NAMES = 1024  # span names the agent interns (agent/labels.h)
_span_name_ids = {}  # name -> the agent's id (0: refused, or no agent)
_processor_class = None


def _new_span_name_id(name):
    if _lib is None or _lib[2] is None or not isinstance(name, str) or not name:
        return 0
    data = name.encode("utf-8", "replace")[:MAX_SPAN_NAME].decode("utf-8", "ignore").encode()
    nid = _lib[2](data, len(data)) if data else -1
    if nid < 0:  # called by _cached, SpanProcessor.on_start, the SDK's start_span: its caller
        _refused("pyagent.SpanProcessor", "such samples have no span_name", 5)
    return max(nid, 0)


def _make_processor_class():
    from opentelemetry.sdk.trace import SpanProcessor as Base

    class SpanProcessor(Base):
        """Puts the root span's span_id and span_name on the samples taken while it (or any of
        its children, in its context) runs, and the attribute pyroscope.profile.id (the span id)
        on the root span, as Grafana's traces-to-profiles expects. Root: a span without a
        parent, or whose parent is remote (the first span of this process in its trace)."""

        MAX_OPEN = 100000  # root spans started and not ended that are remembered

        def __init__(self):
            self._open = {}  # (trace id, span id) -> (token, value), until the span ends
            self._open_lock = threading.Lock()

        def on_start(self, span, parent_context=None):
            parent = span.parent
            if parent is not None and not parent.is_remote:
                return  # a child: the root's value is already in its context
            ctx = span.get_span_context()
            if not ctx.span_id:
                return
            hex_id = format(ctx.span_id, "016x")
            span.set_attribute("pyroscope.profile.id", hex_id)
            nid = _span_name_ids.get(span.name)
            if nid is None:  # names past the agent's 1,024 are asked again, not kept here
                nid = (_cached(_span_name_ids, span.name, _new_span_name_id)
                       if len(_span_name_ids) < 2 * MAX_SPAN_NAMES else _new_span_name_id(span.name))
            value = _SPAN_MAGIC + struct.pack("<IQ", nid, ctx.span_id)
            token = _span_var.set(value)
            with self._open_lock:
                if len(self._open) >= self.MAX_OPEN:  # spans never ended: forget the oldest
                    del self._open[next(iter(self._open))]
                self._open[(ctx.trace_id, ctx.span_id)] = (token, value)

        def on_end(self, span):
            ctx = span.get_span_context()
            with self._open_lock:
                entry = self._open.pop((ctx.trace_id, ctx.span_id), None)
            if entry is None:
                return
            token, value = entry
            try:
                _span_var.reset(token)
            except (ValueError, RuntimeError):
                # Ended in another context (another thread or task), or after a later root
                # span of this context was reset: the context it started in keeps its value
                # until that context is left; this one is changed only when it holds it.
                if _span_var.get() is value:
                    old = token.old_value
                    _span_var.set(None if old is contextvars.Token.MISSING else old)

        def shutdown(self):
            pass

        def force_flush(self, timeout_millis=30000):
            return True

    SpanProcessor.__module__ = __name__
    return SpanProcessor


def __getattr__(name):
    # SpanProcessor is made on first use, so that importing pyagent never imports
    # opentelemetry (PEP 562).
    global _processor_class
    if name == "SpanProcessor":
        if _processor_class is None:
            _processor_class = _make_processor_class()
        return _processor_class
    raise AttributeError("module 'pyagent' has no attribute %r" % name)


_lib = _bind()
#: True when labels reach the agent (libpyagent.so is loaded and samples this process).
enabled = _lib is not None
