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
starting with "__"); values are non-empty str of at most 2048 bytes of UTF-8 without
control characters; at most 16 labels at a time. Anything else raises ValueError or
TypeError, with or without the agent, so a program behaves the same either way.

One pure-Python file, installed beside libpyagent.so; docs/architecture.md, "Labels".
"""

import contextvars
import functools
import gc
import inspect
import re
import struct
import threading
import warnings

__all__ = ["labels", "current", "enabled"]

MAX_LABELS = 16
MAX_NAME = 64
MAX_VALUE = 2048
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*\Z")
_RESERVED = frozenset(("service_name", "pyroscope_spy"))
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
_warned = False


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
    return intern, error


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


def _value(pairs):
    """The variable's value for a sorted tuple of pairs (None for no labels)."""
    global _warned
    if not pairs:
        return None
    value = _value_of.get(pairs)
    if value is not None:
        return value
    with _lock:
        value = _value_of.get(pairs)
        if value is not None:
            return value
        sid = -1
        if _lib is not None:
            intern, error = _lib
            text = b"".join(n.encode() + b"\0" + v.encode() + b"\0" for n, v in pairs)
            sid = intern(text, len(text))
            if sid < 0 and not _warned:
                _warned = True
                reason = (error() or b"").decode("utf-8", "replace")
                warnings.warn("pyagent.labels: %s; such samples are not labelled" % reason,
                              RuntimeWarning, stacklevel=4)
        if sid > 0:
            value = _MAGIC + struct.pack("<I", sid)
        else:  # a set the agent did not take (or no agent): 12 bytes, which it never reads
            value = _MAGIC + struct.pack("<Q", next(_local_ids))
        _pairs_of[value] = pairs
        _value_of[pairs] = value
        return value


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


_lib = _bind()
#: True when labels reach the agent (libpyagent.so is loaded and samples this process).
enabled = _lib is not None
