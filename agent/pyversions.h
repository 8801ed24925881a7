/* pyversions.h: what the agent knows about each CPython version's memory layout.
 *
 * One struct, filled at run time from a table generated from each version's own headers
 * (agent/pylayouts.inc, scripts/gen_layouts.sh) and, from 3.13 on, checked and completed
 * from the interpreter's own _Py_DebugOffsets. No Python header is compiled into the agent,
 * so one libpyagent.so serves every version. */
#ifndef PA_PYVERSIONS_H
#define PA_PYVERSIONS_H

#include <stddef.h>
#include <stdint.h>

#include "../base/error.h"

enum pa_py_frames {
    PA_PYFRAME_OBJECT = 1,   /* 3.8-3.10: PyFrameObject chain through f_back, f_lasti */
    PA_PYFRAME_INTERP = 2,   /* 3.11-3.12: _PyInterpreterFrame via cframe, prev_instr */
    PA_PYFRAME_INTERP13 = 3, /* 3.13+: tstate->current_frame, f_executable, instr_ptr */
};

enum pa_line_kind {
    PA_LINE_LNOTAB = 0,    /* 3.8-3.9: co_lnotab, f_lasti in bytes */
    PA_LINE_TABLE310 = 1,  /* 3.10: co_linetable, f_lasti in code units */
    PA_LINE_LOCATIONS = 2, /* 3.11+: location table, instruction pointer */
};

/* Offsets are in bytes; 0 means "this version has no such field" where that is possible. */
struct pa_layout {
    unsigned minor;
    /* A free-threaded build's row (Py_GIL_DISABLED, 3.13+): its own object header, whose
     * ob_type sits at 24 rather than 8, moves every object field. */
    unsigned free_threaded, ob_type;
    unsigned frame_kind, line_kind;
    unsigned owner_skip; /* frames with owner >= this are shims (C stack, interpreter) */
    unsigned rt_finalizing, rt_interpreters_head, rt_tss_key;
    unsigned is_next, is_threads_head, is_id;
    unsigned ts_next, ts_interp, ts_frame, cframe_current_frame;
    unsigned ts_thread_id, ts_native_thread_id;
    unsigned ts_status; /* 3.12+: the _status bit field (bit PA_TS_BOUND_GILSTATE); 0: none */
    unsigned fr_back, fr_code, fr_lasti_or_instr, fr_owner;
    unsigned co_filename, co_name, co_qualname, co_firstlineno;
    unsigned co_linetable, co_code, co_code_adaptive, co_firsttraceable;
    unsigned u_state, u_length, u_ascii_size, u_compact_size;
    unsigned b_size, b_sval;
    unsigned gil_via_interp, gil_off, gil_locked, gil_holder;
    /* The GIL structure's mutex (a glibc pthread_mutex_t, whose owner's tid is its third int);
     * 0: not read. */
    unsigned gil_mutex;
    unsigned fr_is_entry; /* 3.11 only: _PyInterpreterFrame.is_entry */
    /* The cyclic collector's "collecting" flag (an int): at _PyRuntime + gc_collecting on
     * 3.8, at the interpreter + gc_collecting from 3.9 on (gc_via_interp). */
    unsigned gc_via_interp, gc_collecting;
    /* The exception being handled: PyThreadState.exc_info (a _PyErr_StackItem *), and in an
     * item its exception (exc_type up to 3.10, exc_value from 3.11) and previous_item. */
    unsigned ts_exc_info, ei_value, ei_previous;
    /* The exception being raised and not yet caught: PyThreadState.current_exception
     * (3.12+) or curexc_type (3.8-3.11), NULL when none. 0: not read. */
    unsigned ts_raising;
    /* 3.15+: PyThreadState.gil_requested, set while take_gil waits; 0: not there. */
    unsigned ts_gil_requested;
    /* Labels (agent/labels.c): PyThreadState.context (the current PyContext, or NULL),
     * PyContext.ctx_vars (its HAMT of variables) and PyHamtObject.h_root. 0: not read. */
    unsigned ts_context, ctx_vars, hamt_root;
    /* Free-threaded builds: PyThreadState.state, 1 while the thread is attached to the
     * interpreter (running Python), which stands for holding the GIL there; 0: not used. */
    unsigned ts_attached;
    /* 3.11+: PyGenObject.gi_iframe, where a coroutine's own frame sits in its object. */
    unsigned gen_iframe;
    /* 3.11+: the interpreter's sys.modules; PyDictObject's ma_used, ma_keys, ma_values;
     * PyDictKeysObject's dk_log2_index_bytes, dk_kind, dk_nentries, dk_indices (the entries
     * follow the indices); PyModuleObject.md_dict. */
    unsigned is_modules, dict_used, dict_keys, dict_values;
    unsigned dk_log2_index_bytes, dk_kind, dk_nentries, dk_indices, mod_dict;
    /* 3.11+, PYAGENT_ASYNC (agent/awaits.c): PyGenObject.gi_frame_state and the values of
     * FRAME_CREATED, FRAME_EXECUTING (the states between are suspended ones) and
     * FRAME_SUSPENDED_YIELD_FROM (3.13+, else 0: none); _PyInterpreterFrame's stack top
     * (stacktop, an index into localsplus, to 3.13; stackpointer from 3.14, fr_stack_ptr then
     * the slot below it that holds the awaited object: 1, or 2 from 3.15) and localsplus;
     * PySetObject's mask and table; PyWeakReference.wr_object; PyHeapTypeObject's
     * ht_cached_keys; PyDictValues.values (0 before 3.13). */
    unsigned gen_frame_state;
    int fs_created, fs_executing, fs_yield_from;
    unsigned fr_stack, fr_stack_ptr, fr_localsplus, set_mask, set_table, wr_object, ht_cached_keys,
        dv_values;
    /* 3.13+: where each of the fields above sits in _Py_DebugOffsets, in 64-bit words */
    struct {
        unsigned version, free_threaded, rt_finalizing, rt_interpreters_head, is_next,
            is_threads_head, ts_next, ts_interp, ts_frame, ts_thread_id, ts_native_thread_id,
            fr_back, fr_code, fr_lasti_or_instr, fr_owner, co_filename, co_name, co_qualname,
            co_linetable, co_firstlineno, co_code_adaptive, u_state, u_length, u_ascii_size,
            gil_off, gil_struct, gil_locked, gil_holder, is_id, ts_status, is_gc, gc_collecting,
            gen_iframe, is_modules, ts_gil_requested;
    } dbg;
};

/* PyThreadState._status.bound_gilstate (3.12+; the fourth bit field in every version since):
 * set on the one thread state of an OS thread that the GIL-state API holds for it, which
 * follows the interpreter the thread runs in now (tstate_activate rebinds it). */
enum { PA_TS_BOUND_GILSTATE = 1u << 3 };

/* The interpreter this process runs, as detected. */
struct pa_python {
    char version[32]; /* "3.11.7" */
    unsigned major, minor;
    uintptr_t runtime;   /* &_PyRuntime */
    uintptr_t code_type; /* &PyCode_Type */
    uintptr_t unicode_type;
    uintptr_t bytes_type;
    uintptr_t none;      /* &_Py_NoneStruct: an exception slot holding None handles nothing */
    uintptr_t long_type; /* &PyLong_Type: an asyncio task's default name is an int */
    uintptr_t dict_type, module_type; /* &PyDict_Type, &PyModule_Type */
    /* PYAGENT_ASYNC's await chains: coroutines, generators, sets, weak references */
    uintptr_t coro_type, gen_type, set_type, weakref_type;
    struct pa_layout layout;
    int debug_offsets; /* 1 when _Py_DebugOffsets confirmed the layout (3.13+) */
};

/* The object behind a dlopen handle is CPython (libpython loaded after start, as uWSGI and
 * mod_wsgi load it, perhaps RTLD_LOCAL): 1, and Python's symbols are looked up there from
 * now on; else 0. */
int pa_py_present_in(void *handle);
/* A symbol of the interpreter (the late-loaded libpython, else the global scope). */
void *pa_py_sym(const char *name);
/* The late-loaded libpython: the handle it was found through (NULL: the global scope), its
 * file, and a handle to use instead when the first is closed while libpython stays. */
void *pa_py_handle(void);
const char *pa_py_path(void);
void pa_py_set_handle(void *handle);
/* A late-loaded libpython about to be unloaded, or unloaded (1): nothing of it is read or
 * called (pa_py_ready and pa_py_initialized say no, pa_py_finalizing yes). Atomic. */
int pa_py_gone(void);
void pa_py_set_gone(int gone);
/* After libpython was unloaded: forgets it (handle, Py_IsInitialized, the layout's verdict),
 * so that the next one loaded is detected afresh; bumps the generation. */
void pa_py_forget(void);
unsigned pa_py_generation(void);

/* Detects version and build and picks the layout (a free-threaded build's own row where the
 * table has one). Returns 0, or -1 with a message for the user in err (unsupported version,
 * free-threaded build of a version without a row, unknown layout). */
int pa_py_detect(struct pa_python *py, pa_error *err);

/* Normal context: a free-threaded build that runs without its GIL: 1 unless PYTHON_GIL=1
 * turns the GIL on at start (an extension module that is not marked free-threading-safe may
 * still turn it on later, which is not followed). 0 for every other build. */
int pa_py_gil_off(const struct pa_python *py);

/* After initialization: checks the layout against the live interpreter (interpreter list,
 * main thread state, TSS key). Returns 0 or -1 with a message. */
int pa_py_verify(const struct pa_python *py, pa_error *err);

/* Normal context: looks Py_IsInitialized up (dlsym) for pa_py_initialized and pa_py_ready;
 * called once the interpreter is found, and again after a libpython was loaded anew. */
void pa_py_find_initialized(void);
/* Signal-safe: Py_IsInitialized() (0 until pa_py_find_initialized found it) and "finalization
 * has begun", read without calling into Python. */
int pa_py_initialized(void);
int pa_py_finalizing(const struct pa_python *py);

/* SIGNAL-HANDLER SIDE: may a sample be taken now? The interpreter is initialized, not
 * finalizing, and its thread list was found to match the layout (checked by the first
 * handlers after initialization, once per process; a layout that stays wrong for a second is
 * final). Sampling can so start before the interpreter does, with no thread of ours waiting
 * for it. pa_py_find_initialized must have been called once before. */
int pa_py_ready(const struct pa_python *py);
/* Normal context: -1 with the message for the user when the layout was found wrong. */
int pa_py_verdict(const struct pa_python *py, pa_error *err);

#endif
