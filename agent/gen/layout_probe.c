/* layout_probe.c: compiled once per CPython version against that version's own headers
 * (scripts/gen_layouts.sh), it prints the row of agent/pylayouts.inc for that version.
 * It is never linked into the agent: the agent must not depend on Python headers. */
#define Py_BUILD_CORE 1
#include <Python.h>
#include <frameobject.h>
#include <stddef.h>
#include <stdio.h>
#if PY_VERSION_HEX >= 0x03090000
#include <internal/pycore_runtime.h>
#include <internal/pycore_interp.h>
#else
#include <internal/pycore_pystate.h>
#endif
#include <internal/pycore_gil.h>
#include <internal/pycore_context.h>
#include <internal/pycore_hamt.h>
#if PY_VERSION_HEX >= 0x030B0000
#include <internal/pycore_frame.h>
#include <internal/pycore_code.h>
#include <internal/pycore_dict.h>
#include <internal/pycore_moduleobject.h>
#include <internal/pycore_genobject.h>
#endif
#ifdef Py_GIL_DISABLED
#include <internal/pycore_pystate.h>
#endif

#define OFF(type, field) ((unsigned)offsetof(type, field))

int main(void) {
    unsigned rt_tss, ts_frame, cframe_cur = 0, native_tid = 0, fr_back, fr_code, fr_instr;
    unsigned fr_owner = 0, co_qualname = 0, co_linetable, co_code = 0, co_adaptive = 0;
    unsigned co_firsttraceable = 0, owner_skip = 0xff, frame_kind, line_kind;
#if PY_VERSION_HEX >= 0x030F0000
    rt_tss = 0; /* 3.15 keeps the GIL-state thread state in a C thread-local only */
#elif PY_VERSION_HEX >= 0x030C0000
    rt_tss = OFF(_PyRuntimeState, autoTSSkey);
#else
    rt_tss = OFF(_PyRuntimeState, gilstate) + OFF(struct _gilstate_runtime_state, autoTSSkey);
#endif
#if PY_VERSION_HEX >= 0x030B0000
    native_tid = OFF(PyThreadState, native_thread_id);
#endif
#if PY_VERSION_HEX >= 0x030D0000
    ts_frame = OFF(PyThreadState, current_frame);
#elif PY_VERSION_HEX >= 0x030B0000
    ts_frame = OFF(PyThreadState, cframe);
    cframe_cur = OFF(_PyCFrame, current_frame);
#else
    ts_frame = OFF(PyThreadState, frame);
#endif
#if PY_VERSION_HEX >= 0x030B0000
    fr_back = OFF(_PyInterpreterFrame, previous);
    fr_owner = OFF(_PyInterpreterFrame, owner);
    co_qualname = OFF(PyCodeObject, co_qualname);
    co_linetable = OFF(PyCodeObject, co_linetable);
    co_adaptive = OFF(PyCodeObject, co_code_adaptive);
    co_firsttraceable = OFF(PyCodeObject, _co_firsttraceable);
    line_kind = 2;
#if PY_VERSION_HEX >= 0x030D0000
    fr_code = OFF(_PyInterpreterFrame, f_executable);
    fr_instr = OFF(_PyInterpreterFrame, instr_ptr);
    frame_kind = 3;
#else
    fr_code = OFF(_PyInterpreterFrame, f_code);
    fr_instr = OFF(_PyInterpreterFrame, prev_instr);
    frame_kind = 2;
#endif
    /* Frames owned by the C stack (3.12, 3.13) or the interpreter (3.14+) are shims, not
     * Python code: both sit at the top of the owner enumeration. */
#if PY_VERSION_HEX >= 0x030E0000
    owner_skip = FRAME_OWNED_BY_INTERPRETER;
#elif PY_VERSION_HEX >= 0x030C0000
    owner_skip = FRAME_OWNED_BY_CSTACK;
#endif
#else
    fr_back = OFF(PyFrameObject, f_back);
    fr_code = OFF(PyFrameObject, f_code);
    fr_instr = OFF(PyFrameObject, f_lasti);
    co_code = OFF(PyCodeObject, co_code);
    frame_kind = 1;
#if PY_VERSION_HEX >= 0x030A0000
    co_linetable = OFF(PyCodeObject, co_linetable);
    line_kind = 1;
#else
    co_linetable = OFF(PyCodeObject, co_lnotab);
    line_kind = 0;
#endif
#endif
    /* A free-threaded build (Py_GIL_DISABLED) has a row of its own: its object header is
     * larger (ob_tid, flags, a mutex, split reference counts before ob_type), so every
     * object's fields move. */
#ifdef Py_GIL_DISABLED
    const char *build = "t";
    int free_threaded = 1;
#else
    const char *build = "";
    int free_threaded = 0;
#endif
    printf("    /* 3.%d%s */\n", PY_MINOR_VERSION, build);
    printf("    {.minor = %d, .free_threaded = %d, .ob_type = %u,\n", PY_MINOR_VERSION,
           free_threaded, OFF(PyObject, ob_type));
    printf("     .frame_kind = %u, .line_kind = %u, .owner_skip = %u,\n", frame_kind, line_kind,
           owner_skip);
#if PY_VERSION_HEX >= 0x03090000
    unsigned rt_finalizing = OFF(_PyRuntimeState, _finalizing);
#else
    unsigned rt_finalizing = OFF(_PyRuntimeState, finalizing);
#endif
#if PY_VERSION_HEX >= 0x030B0000
    unsigned is_threads_head = OFF(PyInterpreterState, threads.head);
#else
    unsigned is_threads_head = OFF(PyInterpreterState, tstate_head);
#endif
    printf("     .rt_finalizing = %u, .rt_interpreters_head = %u, .rt_tss_key = %u,\n",
           rt_finalizing, OFF(_PyRuntimeState, interpreters.head), rt_tss);
    printf("     .is_next = %u, .is_threads_head = %u, .is_id = %u,\n",
           OFF(PyInterpreterState, next), is_threads_head, OFF(PyInterpreterState, id));
    printf("     .ts_next = %u, .ts_interp = %u, .ts_frame = %u, .cframe_current_frame = %u,\n",
           OFF(PyThreadState, next), OFF(PyThreadState, interp), ts_frame, cframe_cur);
    /* 3.12+: the _status bit field, whose bound_gilstate bit marks the thread state its OS
     * thread uses now when it has several (one per interpreter it entered). */
#if PY_VERSION_HEX >= 0x030C0000
    unsigned ts_status = OFF(PyThreadState, _status);
#else
    unsigned ts_status = 0;
#endif
    printf("     .ts_thread_id = %u, .ts_native_thread_id = %u, .ts_status = %u,\n",
           OFF(PyThreadState, thread_id), native_tid, ts_status);
    printf("     .fr_back = %u, .fr_code = %u, .fr_lasti_or_instr = %u, .fr_owner = %u,\n", fr_back,
           fr_code, fr_instr, fr_owner);
    printf("     .co_filename = %u, .co_name = %u, .co_qualname = %u, .co_firstlineno = %u,\n",
           OFF(PyCodeObject, co_filename), OFF(PyCodeObject, co_name), co_qualname,
           OFF(PyCodeObject, co_firstlineno));
    printf("     .co_linetable = %u, .co_code = %u, .co_code_adaptive = %u, "
           ".co_firsttraceable = %u,\n",
           co_linetable, co_code, co_adaptive, co_firsttraceable);
    printf("     .u_state = %u, .u_length = %u, .u_ascii_size = %u, .u_compact_size = %u,\n",
           OFF(PyASCIIObject, state), OFF(PyASCIIObject, length), (unsigned)sizeof(PyASCIIObject),
           (unsigned)sizeof(PyCompactUnicodeObject));
    printf("     .b_size = %u, .b_sval = %u,\n", OFF(PyVarObject, ob_size),
           OFF(PyBytesObject, ob_sval));
    /* The GIL: embedded in _PyRuntime up to 3.11, behind a pointer in the interpreter from
     * 3.12 (per-interpreter GILs). */
#if PY_VERSION_HEX >= 0x030C0000
    printf("     .gil_via_interp = 1, .gil_off = %u,\n", OFF(PyInterpreterState, ceval.gil));
#else
    printf("     .gil_via_interp = 0, .gil_off = %u,\n", OFF(_PyRuntimeState, ceval.gil));
#endif
    /* The GIL's mutex (a pthread mutex): a thread that holds it without holding the GIL is
     * in take_gil, between its wait's wake-up and taking the GIL or waiting again. */
    printf("     .gil_locked = %u, .gil_holder = %u, .gil_mutex = %u,\n",
           OFF(struct _gil_runtime_state, locked), OFF(struct _gil_runtime_state, last_holder),
           OFF(struct _gil_runtime_state, mutex));
    /* The cyclic collector's "collecting" flag: in _PyRuntime's GC state on 3.8, in each
     * interpreter's from 3.9 (struct _gc_runtime_state; set around a whole collection, its
     * gc.callbacks included, by every version up to the incremental collector of 3.14). */
#if PY_VERSION_HEX >= 0x03090000
    printf("     .gc_via_interp = 1, .gc_collecting = %u,\n",
           OFF(PyInterpreterState, gc) + OFF(struct _gc_runtime_state, collecting));
#else
    printf("     .gc_via_interp = 0, .gc_collecting = %u,\n",
           OFF(_PyRuntimeState, gc) + OFF(struct _gc_runtime_state, collecting));
#endif
    /* The exception being handled: tstate->exc_info points to the top item of the stack of
     * handled exceptions (a running generator's or coroutine's own item, else the thread's
     * exc_state), linked to the one below through previous_item. An item's exception is
     * exc_type up to 3.10, exc_value from 3.11; NULL or None when it handles none. */
#if PY_VERSION_HEX >= 0x030B0000
    unsigned ei_value = OFF(_PyErr_StackItem, exc_value);
#else
    unsigned ei_value = OFF(_PyErr_StackItem, exc_type);
#endif
    printf("     .ts_exc_info = %u, .ei_value = %u, .ei_previous = %u,\n",
           OFF(PyThreadState, exc_info), ei_value, OFF(_PyErr_StackItem, previous_item));
    /* The exception being raised, not yet caught (what PyErr_Occurred() sees): the thread
     * state's current_exception from 3.12, its curexc_type before; NULL when none. And 3.15's
     * gil_requested, set by take_gil while the thread waits for the GIL (0: not there). */
#if PY_VERSION_HEX >= 0x030C0000
    unsigned ts_raising = OFF(PyThreadState, current_exception);
#else
    unsigned ts_raising = OFF(PyThreadState, curexc_type);
#endif
#if PY_VERSION_HEX >= 0x030F0000
    unsigned ts_gil_requested = OFF(PyThreadState, gil_requested);
#else
    unsigned ts_gil_requested = 0;
#endif
    printf("     .ts_raising = %u, .ts_gil_requested = %u,\n", ts_raising, ts_gil_requested);
    /* Labels (pyagent.labels): the thread's current context (tstate->context, a PyContext
     * or NULL), its variables (ctx_vars, an immutable HAMT) and the HAMT's root node. */
    printf("     .ts_context = %u, .ctx_vars = %u, .hamt_root = %u,\n", OFF(PyThreadState, context),
           OFF(PyContext, ctx_vars), OFF(PyHamtObject, h_root));
    /* 3.11 marks the first frame of each C call of the evaluation loop; later versions push
     * a shim frame there instead (owner >= owner_skip). */
#if PY_VERSION_HEX >= 0x030B0000 && PY_VERSION_HEX < 0x030C0000
    printf("     .fr_is_entry = %u,\n", OFF(_PyInterpreterFrame, is_entry));
#else
    printf("     .fr_is_entry = 0,\n");
#endif
    /* A free-threaded build has no GIL to hold (unless PYTHON_GIL=1): what stands for it is
     * the thread state's attachment to the interpreter (PyThreadState.state), attached while
     * the thread runs Python, detached around blocking calls and during another thread's
     * stop-the-world collection. */
#ifdef Py_GIL_DISABLED
    _Static_assert(_Py_THREAD_ATTACHED == 1, "the agent reads attached as 1");
    printf("     .ts_attached = %u,\n", OFF(PyThreadState, state));
#else
    printf("     .ts_attached = 0,\n");
#endif
    /* 3.11+: a generator's or coroutine's frame is embedded in its object, at gi_iframe: an
     * asyncio task's coroutine frame is found in a thread's chain by its address. */
#if PY_VERSION_HEX >= 0x030B0000
    printf("     .gen_iframe = %u,\n", OFF(PyGenObject, gi_iframe));
#else
    printf("     .gen_iframe = 0,\n");
#endif
    /* 3.11-3.13 keep a loop's running task in the _asyncio module's _current_tasks dict: the
     * walk finds it through sys.modules (the interpreter's modules dict) and reads dicts'
     * entries (the keys object's indices, then its entries) and a module's md_dict. */
#if PY_VERSION_HEX >= 0x030B0000
#if PY_VERSION_HEX >= 0x030C0000
    unsigned is_modules = OFF(PyInterpreterState, imports.modules);
#else
    unsigned is_modules = OFF(PyInterpreterState, modules);
#endif
    printf("     .is_modules = %u, .dict_used = %u, .dict_keys = %u, .dict_values = %u,\n",
           is_modules, OFF(PyDictObject, ma_used), OFF(PyDictObject, ma_keys),
           OFF(PyDictObject, ma_values));
    printf("     .dk_log2_index_bytes = %u, .dk_kind = %u, .dk_nentries = %u, .dk_indices = %u,\n",
           OFF(PyDictKeysObject, dk_log2_index_bytes), OFF(PyDictKeysObject, dk_kind),
           OFF(PyDictKeysObject, dk_nentries), OFF(PyDictKeysObject, dk_indices));
    printf("     .mod_dict = %u,\n", OFF(PyModuleObject, md_dict));
#endif
    /* PYAGENT_ASYNC (agent/awaits.c): a suspended coroutine's state (gi_frame_state, whose
     * values moved in 3.13 and again in 3.15), the top of its frame's value stack (what it
     * awaits: an index into localsplus up to 3.12, a pointer from 3.13), a set's table, a
     * weak reference's object, and where an instance's attributes are (the type's shared
     * keys; 3.13+'s inline values after the object header). */
#if PY_VERSION_HEX >= 0x030B0000
    /* The awaited object sits at stackpointer[-1], from 3.15 at [-2] (SEND keeps its
     * value above it): not in any header, measured (cr_await's address on the stack). */
#if PY_VERSION_HEX >= 0x030F0000
    unsigned fr_stack = OFF(_PyInterpreterFrame, stackpointer), fr_stack_ptr = 2;
#elif PY_VERSION_HEX >= 0x030E0000
    unsigned fr_stack = OFF(_PyInterpreterFrame, stackpointer), fr_stack_ptr = 1;
#else
    unsigned fr_stack = OFF(_PyInterpreterFrame, stacktop), fr_stack_ptr = 0;
#endif
#if PY_VERSION_HEX >= 0x030D0000
    unsigned dv_values = OFF(PyDictValues, values);
    int fs_yield_from = FRAME_SUSPENDED_YIELD_FROM;
#else
    unsigned dv_values = 0;
    int fs_yield_from = 0;
#endif
    printf(
        "     .gen_frame_state = %u, .fs_created = %d, .fs_executing = %d, .fs_yield_from = %d,\n",
        OFF(PyGenObject, gi_frame_state), FRAME_CREATED, FRAME_EXECUTING, fs_yield_from);
    printf("     .fr_stack = %u, .fr_stack_ptr = %u, .fr_localsplus = %u, .set_mask = %u, "
           ".set_table = %u,\n",
           fr_stack, fr_stack_ptr, OFF(_PyInterpreterFrame, localsplus), OFF(PySetObject, mask),
           OFF(PySetObject, table));
    printf("     .wr_object = %u, .ht_cached_keys = %u, .dv_values = %u,\n",
           OFF(PyWeakReference, wr_object), OFF(PyHeapTypeObject, ht_cached_keys), dv_values);
#endif
#if PY_VERSION_HEX >= 0x030D0000
    /* Where each offset we use sits inside _Py_DebugOffsets, in 64-bit words, so that the
     * agent can read the live interpreter's own offsets and prefer them to this table. */
#define DBG(field) ((unsigned)(offsetof(_Py_DebugOffsets, field) / 8))
    printf("     .dbg = {.version = %u, .free_threaded = %u, .rt_finalizing = %u,\n", DBG(version),
           DBG(free_threaded), DBG(runtime_state.finalizing));
    printf("             .rt_interpreters_head = %u, .is_next = %u, .is_threads_head = %u,\n",
           DBG(runtime_state.interpreters_head), DBG(interpreter_state.next),
           DBG(interpreter_state.threads_head));
    printf("             .ts_next = %u, .ts_interp = %u, .ts_frame = %u, .ts_thread_id = %u,\n",
           DBG(thread_state.next), DBG(thread_state.interp), DBG(thread_state.current_frame),
           DBG(thread_state.thread_id));
    printf("             .ts_native_thread_id = %u, .fr_back = %u, .fr_code = %u,\n",
           DBG(thread_state.native_thread_id), DBG(interpreter_frame.previous),
           DBG(interpreter_frame.executable));
    printf(
        "             .fr_lasti_or_instr = %u, .fr_owner = %u, .co_filename = %u, .co_name = %u,\n",
        DBG(interpreter_frame.instr_ptr), DBG(interpreter_frame.owner), DBG(code_object.filename),
        DBG(code_object.name));
    printf("             .co_qualname = %u, .co_linetable = %u, .co_firstlineno = %u,\n",
           DBG(code_object.qualname), DBG(code_object.linetable), DBG(code_object.firstlineno));
    printf("             .co_code_adaptive = %u, .u_state = %u, .u_length = %u,\n",
           DBG(code_object.co_code_adaptive), DBG(unicode_object.state),
           DBG(unicode_object.length));
    printf("             .u_ascii_size = %u, .gil_off = %u, .gil_struct = %u,\n",
           DBG(unicode_object.asciiobject_size), DBG(interpreter_state.ceval_gil),
           DBG(interpreter_state.gil_runtime_state));
    printf("             .gil_locked = %u, .gil_holder = %u, .is_id = %u, .ts_status = %u,\n",
           DBG(interpreter_state.gil_runtime_state_locked),
           DBG(interpreter_state.gil_runtime_state_holder), DBG(interpreter_state.id),
           DBG(thread_state.status));
    printf("             .is_gc = %u, .gc_collecting = %u", DBG(interpreter_state.gc),
           DBG(gc.collecting));
    printf(", .is_modules = %u", DBG(interpreter_state.imports_modules));
#if PY_VERSION_HEX >= 0x030E0000
    printf(", .gen_iframe = %u", DBG(gen_object.gi_iframe));
#endif
#if PY_VERSION_HEX >= 0x030F0000
    printf(", .ts_gil_requested = %u", DBG(thread_state.gil_requested));
#endif
    printf("}},\n");
#else
    printf("     .dbg = {0}},\n");
#endif
    return 0;
}
