/* The runner's per-call fast path for repeated synchronous calls on the same tensors.
 *
 * A Python ``Runner.execute`` costs a few microseconds of interpreter work per call (plan
 * lookup, bookkeeping, slot handling) on top of the engine call; on a small model that is
 * most of the time. Once a call plan has been validated and bound (every tensor bound in
 * place, nothing to convert), the runner installs it here: the next calls with the very same
 * tensor objects only need an identity check, a "not closed" check per tensor, and the
 * engine call(s). Everything else (first calls, conversions, conflicts, async jobs) takes the
 * Python path.
 *
 * Concurrency (all under the GIL; the engine call releases it):
 *   - ``busy``: a fast call is running. A second concurrent call falls back to Python.
 *   - ``others``: Python-path calls or async jobs holding memory. The fast path runs only when
 *     there are none, so it never needs the conflict checks the Python path does. The Python
 *     path increments ``others`` *before* it checks conflicts (``enter``), and checks against
 *     the running fast call's ranges (returned by ``enter``), so neither side can miss the other.
 *
 * Nothing here copies tensor memory; the engine reads and writes the bound buffers in place.
 * While a call runs, the fast path holds strong references to its tensors.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#define MAX_ENTRIES 4
#define MAX_TENSORS 64

/* The object a weak reference points at (borrowed), or NULL when it is gone. */
static PyObject *referent(PyObject *ref) {
    PyObject *obj = PyWeakref_GetObject(ref);
    return obj == Py_None ? NULL : obj;
}

typedef struct {
    /* tuple of weak references: inputs row-major, then outputs row-major; NULL = empty.
     * Weak: an entry never keeps a released tensor (and its memory, its fd) alive; a dead
     * reference matches no live argument, so its entry is simply never replayed again. */
    PyObject *tensors;
    PyObject *calls;        /* tuple of (callable, args) pairs, run in order */
    PyObject *ranges;       /* opaque: what enter() reports while this entry runs */
    Py_ssize_t in_rows, in_cols, out_rows, out_cols;
} Entry;

typedef struct {
    PyObject_HEAD
    int closed;
    int busy;
    PyObject *running;      /* the running call's ranges (reported by enter) while busy */
    Py_ssize_t others;
    int next;               /* round-robin replacement */
    Entry entries[MAX_ENTRIES];
    PyObject *success;      /* returned by a fast call */
    PyObject *closed_name;  /* interned "_span": None when a tensor is closed */
    unsigned long long count;
} FastPath;

static void entry_clear(Entry *e) {
    Py_CLEAR(e->tensors);
    Py_CLEAR(e->calls);
    Py_CLEAR(e->ranges);
    e->in_rows = e->in_cols = e->out_rows = e->out_cols = 0;
}

static int FastPath_traverse(FastPath *self, visitproc visit, void *arg) {
    for (int i = 0; i < MAX_ENTRIES; i++) {
        Py_VISIT(self->entries[i].tensors);
        Py_VISIT(self->entries[i].calls);
        Py_VISIT(self->entries[i].ranges);
    }
    Py_VISIT(self->success);
    return 0;
}

static int FastPath_clear(FastPath *self) {
    for (int i = 0; i < MAX_ENTRIES; i++) entry_clear(&self->entries[i]);
    /* success stays (None or the caller's object): a call after a GC clear returns it */
    return 0;
}

static void FastPath_dealloc(FastPath *self) {
    PyObject_GC_UnTrack(self);
    FastPath_clear(self);
    Py_CLEAR(self->success);
    Py_CLEAR(self->closed_name);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* Every field a call reads is set here, so an object made by FastPath.__new__ without
 * __init__ is safe to use (it once crashed on a NULL attribute name: fuzz_runner). */
static PyObject *FastPath_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    FastPath *self = (FastPath *)PyType_GenericNew(type, args, kwds);
    if (self == NULL) return NULL;
    self->closed_name = PyUnicode_InternFromString("_span");
    if (self->closed_name == NULL) {
        Py_DECREF(self);
        return NULL;
    }
    self->success = Py_NewRef(Py_None);
    return (PyObject *)self;
}

static int FastPath_init(FastPath *self, PyObject *args, PyObject *kwds) {
    PyObject *success;
    static char *kwlist[] = {"success", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O", kwlist, &success)) return -1;
    Py_INCREF(success);
    Py_XSETREF(self->success, success);
    return 0;
}

/* The items of an exact list or tuple of length n (borrowed), or NULL. */
static PyObject **items_of(PyObject *seq, Py_ssize_t n) {
    if (PyList_CheckExact(seq)) {
        return PyList_GET_SIZE(seq) == n ? ((PyListObject *)seq)->ob_item : NULL;
    }
    if (PyTuple_CheckExact(seq)) {
        return PyTuple_GET_SIZE(seq) == n ? ((PyTupleObject *)seq)->ob_item : NULL;
    }
    return NULL;
}

/* Do rows (a list/tuple of list/tuples) hold exactly the tensors the weak references point
 * at? On a match, the tensors are stored (borrowed) in found[]. */
static int rows_match(PyObject *rows, Py_ssize_t n_rows, Py_ssize_t n_cols, PyObject **refs,
                      PyObject **found) {
    PyObject **row_items = items_of(rows, n_rows);
    if (row_items == NULL) return 0;
    for (Py_ssize_t r = 0; r < n_rows; r++) {
        PyObject **items = items_of(row_items[r], n_cols);
        if (items == NULL) return 0;
        for (Py_ssize_t c = 0; c < n_cols; c++) {
            PyObject *item = items[c];
            if (item != referent(refs[r * n_cols + c])) return 0;
            found[r * n_cols + c] = item;
        }
    }
    return 1;
}

/* -1 error, 0 some tensor is closed, 1 all open. */
static int all_open(FastPath *self, PyObject **tensors, Py_ssize_t n) {
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *value = PyObject_GetAttr(tensors[i], self->closed_name);
        if (value == NULL) return -1;
        int open = value != Py_None;
        Py_DECREF(value);
        if (!open) return 0;
    }
    return 1;
}

/* fast(inputs, outputs) -> success object, or None when the Python path must handle it.
 * An exception from the engine propagates (busy is reset first). */
/* The arguments are the user's, unchecked (Runner.execute passes them straight here): only
 * exact lists/tuples of the installed sizes whose items ARE the installed tensors match;
 * anything else returns None and takes the Python path, which validates it. */
static PyObject *FastPath_call(FastPath *self, PyObject *args, PyObject *kwds) {
    PyObject *inputs, *outputs;
    if (kwds != NULL && PyDict_GET_SIZE(kwds) != 0) Py_RETURN_NONE;
    if (PyTuple_GET_SIZE(args) != 2) Py_RETURN_NONE;
    inputs = PyTuple_GET_ITEM(args, 0);
    outputs = PyTuple_GET_ITEM(args, 1);
    if (self->closed || self->busy || self->others != 0) Py_RETURN_NONE;

    PyObject *held[MAX_TENSORS];
    int found = -1;
    Py_ssize_t n_held = 0;
    for (int i = 0; i < MAX_ENTRIES; i++) {
        Entry *e = &self->entries[i];
        if (e->tensors == NULL) continue;
        PyObject **refs = ((PyTupleObject *)e->tensors)->ob_item;
        Py_ssize_t n_in = e->in_rows * e->in_cols;
        if (rows_match(inputs, e->in_rows, e->in_cols, refs, held) &&
            rows_match(outputs, e->out_rows, e->out_cols, refs + n_in, held + n_in)) {
            found = i;
            n_held = PyTuple_GET_SIZE(e->tensors);
            break;
        }
    }
    if (found < 0) Py_RETURN_NONE;
    Entry *e = &self->entries[found];
    /* Own what the call uses: code run below (attribute lookups) may replace the entry. */
    PyObject *calls = e->calls;
    PyObject *ranges = e->ranges;
    Py_INCREF(calls);
    Py_INCREF(ranges);
    /* The caller's lists may change while the engine runs without the GIL: hold the tensors. */
    for (Py_ssize_t i = 0; i < n_held; i++) Py_INCREF(held[i]);
    int open = all_open(self, held, n_held);
    PyObject *result = NULL;
    /* all_open may run Python (attribute lookup): re-check the state it could change. */
    if (open != 1 || self->closed || self->busy || self->others != 0) {
        if (open < 0) PyErr_Clear();
        Py_INCREF(Py_None);
        result = Py_None;
        goto done;
    }
    self->busy = 1;
    self->running = ranges;
    Py_ssize_t n = PyTuple_GET_SIZE(calls);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *pair = PyTuple_GET_ITEM(calls, i);
        PyObject *ret = PyObject_Call(PyTuple_GET_ITEM(pair, 0), PyTuple_GET_ITEM(pair, 1), NULL);
        if (ret == NULL) {
            self->busy = 0;
            self->running = NULL;
            goto done; /* result NULL: the engine's exception propagates */
        }
        Py_DECREF(ret);
    }
    self->busy = 0;
    self->running = NULL;
    self->count++;
    Py_INCREF(self->success);
    result = self->success;
done:
    for (Py_ssize_t i = 0; i < n_held; i++) Py_DECREF(held[i]);
    Py_DECREF(calls);
    Py_DECREF(ranges);
    return result;
}

/* rows x cols tensors, at most MAX_TENSORS of them (replay.Replays.install passes the
 * plan's validated row shapes; nothing here relies on it). rows * cols without overflow:
 * (2**62, 4) once wrapped to 0 tensors and installed (found by fuzz_runner under UBSan). */
static int check_shape(PyObject *shape, Py_ssize_t *rows, Py_ssize_t *cols) {
    if (!PyArg_ParseTuple(shape, "nn", rows, cols)) return -1;
    if (*rows < 1 || *cols < 1 || *rows > MAX_TENSORS || *cols > MAX_TENSORS) {
        PyErr_Format(PyExc_ValueError, "rows and cols must be in 1..%d", MAX_TENSORS);
        return -1;
    }
    return 0;
}

/* install(tensors, (in_rows, in_cols), (out_rows, out_cols), calls, ranges) -> replaced index
 * or -1 when not installed (a fast call is running, or the path is closed). */
/* Checked here: the argument types, 1..64 rows and cols, the tensor count, (callable,
 * tuple) call pairs, weak-referenceable tensors. Python (replay.Replays.install) installs
 * only a CallPlan that bound every tensor in place (runner/_plan.py validated the tensors
 * against the model's views); the C side never looks inside a tensor beyond `_span`. */
static PyObject *FastPath_install(FastPath *self, PyObject *args) {
    PyObject *tensors, *in_shape, *out_shape, *calls, *ranges;
    Py_ssize_t in_rows, in_cols, out_rows, out_cols;
    if (!PyArg_ParseTuple(args, "O!O!O!O!O", &PyTuple_Type, &tensors, &PyTuple_Type, &in_shape,
                          &PyTuple_Type, &out_shape, &PyTuple_Type, &calls, &ranges))
        return NULL;
    if (check_shape(in_shape, &in_rows, &in_cols) < 0) return NULL;
    if (check_shape(out_shape, &out_rows, &out_cols) < 0) return NULL;
    Py_ssize_t n_tensors = PyTuple_GET_SIZE(tensors);
    if (n_tensors != in_rows * in_cols + out_rows * out_cols) {
        PyErr_SetString(PyExc_ValueError, "tensors do not match the row shapes");
        return NULL;
    }
    if (n_tensors > MAX_TENSORS) return PyLong_FromLong(-1);
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(calls); i++) {
        PyObject *pair = PyTuple_GET_ITEM(calls, i);
        if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2 ||
            !PyCallable_Check(PyTuple_GET_ITEM(pair, 0)) || !PyTuple_Check(PyTuple_GET_ITEM(pair, 1))) {
            PyErr_SetString(PyExc_TypeError, "calls must be (callable, tuple) pairs");
            return NULL;
        }
    }
    if (self->closed || self->busy) return PyLong_FromLong(-1);
    int index = -1;
    for (int i = 0; i < MAX_ENTRIES; i++) {
        if (self->entries[i].tensors == NULL) {
            index = i;
            break;
        }
    }
    if (index < 0) {
        index = self->next;
        self->next = (self->next + 1) % MAX_ENTRIES;
    }
    PyObject *refs = PyTuple_New(n_tensors);
    if (refs == NULL) return NULL;
    for (Py_ssize_t i = 0; i < n_tensors; i++) {
        PyObject *ref = PyWeakref_NewRef(PyTuple_GET_ITEM(tensors, i), NULL);
        if (ref == NULL) {
            Py_DECREF(refs);
            return NULL;
        }
        PyTuple_SET_ITEM(refs, i, ref);
    }
    if (self->closed || self->busy) { /* creating references cannot run Python, but be sure */
        Py_DECREF(refs);
        return PyLong_FromLong(-1);
    }
    Entry old = self->entries[index];
    Entry *e = &self->entries[index];
    tensors = refs; /* the entry owns the new tuple */
    Py_INCREF(calls);
    Py_INCREF(ranges);
    e->tensors = tensors;
    e->calls = calls;
    e->ranges = ranges;
    e->in_rows = in_rows;
    e->in_cols = in_cols;
    e->out_rows = out_rows;
    e->out_cols = out_cols;
    entry_clear(&old); /* last: dropping references may run Python code */
    return PyLong_FromLong(index);
}

/* enter() -> the running fast call's ranges, or None; counts one Python-path holder. */
static PyObject *FastPath_enter(FastPath *self, PyObject *Py_UNUSED(ignored)) {
    self->others++;
    if (self->busy && self->running != NULL) {
        Py_INCREF(self->running);
        return self->running;
    }
    Py_RETURN_NONE;
}

static PyObject *FastPath_leave(FastPath *self, PyObject *Py_UNUSED(ignored)) {
    if (self->others <= 0) {
        PyErr_SetString(PyExc_RuntimeError, "leave() without enter()");
        return NULL;
    }
    self->others--;
    Py_RETURN_NONE;
}

/* Drop every entry unless a call is running; True when dropped. */
static PyObject *FastPath_reset(FastPath *self, PyObject *Py_UNUSED(ignored)) {
    if (self->busy) Py_RETURN_FALSE;
    for (int i = 0; i < MAX_ENTRIES; i++) entry_clear(&self->entries[i]);
    self->next = 0;
    Py_RETURN_TRUE;
}

static PyObject *FastPath_close(FastPath *self, PyObject *Py_UNUSED(ignored)) {
    self->closed = 1;
    if (!self->busy) {
        for (int i = 0; i < MAX_ENTRIES; i++) entry_clear(&self->entries[i]);
    }
    Py_RETURN_NONE;
}

static PyObject *FastPath_get_busy(FastPath *self, void *closure) {
    return PyBool_FromLong(self->busy);
}

static PyObject *FastPath_get_count(FastPath *self, void *closure) {
    return PyLong_FromUnsignedLongLong(self->count);
}

static PyObject *FastPath_get_others(FastPath *self, void *closure) {
    return PyLong_FromSsize_t(self->others);
}

static PyObject *FastPath_get_entries(FastPath *self, void *closure) {
    PyObject *list = PyList_New(0);
    if (list == NULL) return NULL;
    for (int i = 0; i < MAX_ENTRIES; i++) {
        PyObject *value = self->entries[i].ranges;
        if (value == NULL) continue;
        if (PyList_Append(list, value) < 0) {
            Py_DECREF(list);
            return NULL;
        }
    }
    return list;
}

static PyMethodDef FastPath_methods[] = {
    {"install", (PyCFunction)FastPath_install, METH_VARARGS,
     "install(tensors, in_shape, out_shape, calls, key) -> entry index, -1 if not installed"},
    {"enter", (PyCFunction)FastPath_enter, METH_NOARGS,
     "Count a Python-path holder; the running fast call's key or None."},
    {"leave", (PyCFunction)FastPath_leave, METH_NOARGS, "Undo one enter()."},
    {"reset", (PyCFunction)FastPath_reset, METH_NOARGS, "Drop every entry unless a call runs."},
    {"close", (PyCFunction)FastPath_close, METH_NOARGS, "Refuse every later call."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef FastPath_getset[] = {
    {"busy", (getter)FastPath_get_busy, NULL, "a fast call is running", NULL},
    {"count", (getter)FastPath_get_count, NULL, "fast calls completed", NULL},
    {"others", (getter)FastPath_get_others, NULL, "Python-path holders", NULL},
    {"keys", (getter)FastPath_get_entries, NULL, "keys of the installed entries", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject FastPathType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "copyless.runner._fast.FastPath",
    .tp_basicsize = sizeof(FastPath),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "Identity-checked replay of bound engine calls (see the module source).",
    .tp_new = FastPath_new,
    .tp_init = (initproc)FastPath_init,
    .tp_dealloc = (destructor)FastPath_dealloc,
    .tp_traverse = (traverseproc)FastPath_traverse,
    .tp_clear = (inquiry)FastPath_clear,
    .tp_call = (ternaryfunc)FastPath_call,
    .tp_methods = FastPath_methods,
    .tp_getset = FastPath_getset,
};

static struct PyModuleDef fast_module = {
    PyModuleDef_HEAD_INIT, "_fast", "The runner's per-call fast path.", -1, NULL,
};

PyMODINIT_FUNC PyInit__fast(void) {
    if (PyType_Ready(&FastPathType) < 0) return NULL;
    PyObject *module = PyModule_Create(&fast_module);
    if (module == NULL) return NULL;
    Py_INCREF(&FastPathType);
    if (PyModule_AddObject(module, "FastPath", (PyObject *)&FastPathType) < 0) {
        Py_DECREF(&FastPathType);
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
