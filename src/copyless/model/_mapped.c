/* Reading a memory-mapped file without dying of SIGBUS.
 *
 * A page of a shared file mapping that lies beyond the file's end (the file was truncated
 * after it was mapped, by another process or thread) raises SIGBUS when it is touched;
 * the default action kills the process. Every read of the map goes through this module:
 * each read runs under a per-thread sigsetjmp guard, and a SIGBUS raised inside it returns
 * to the guard, which raises OSError instead. A SIGBUS raised anywhere else (no guard on
 * that thread) goes to the handler that was installed before ours (faulthandler, or the
 * default action), exactly as if this module did not exist.
 *
 * The handler is installed only while at least one guarded read runs (a count under a
 * mutex) and the previous one is put back when the last read ends, so the module changes
 * nothing for the rest of the process.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <string.h>

static pthread_mutex_t guard_lock = PTHREAD_MUTEX_INITIALIZER;
static int guard_users = 0;
static struct sigaction previous_action;

/* The guard of the read running on this thread, or NULL. Written before every read, so
 * the thread's TLS block exists before the handler can read it. */
static _Thread_local sigjmp_buf *volatile guard_env = NULL;

static void on_sigbus(int sig, siginfo_t *info, void *context)
{
    sigjmp_buf *env = guard_env;
    if (env != NULL) {
        guard_env = NULL;
        siglongjmp(*env, 1);
    }
    /* Not ours: behave as the previous disposition would. */
    struct sigaction prev = previous_action;
    if (prev.sa_flags & SA_SIGINFO) {
        if (prev.sa_sigaction != NULL) {
            prev.sa_sigaction(sig, info, context);
            return;
        }
    } else if (prev.sa_handler != SIG_DFL && prev.sa_handler != SIG_IGN) {
        prev.sa_handler(sig);
        return;
    }
    /* Default action: restore it; the faulting access runs again and ends the process. */
    struct sigaction dfl;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    sigaction(SIGBUS, &dfl, NULL);
}

static int arm(void)
{
    int failed = 0;
    pthread_mutex_lock(&guard_lock);
    if (guard_users == 0) {
        struct sigaction ours;
        memset(&ours, 0, sizeof ours);
        ours.sa_sigaction = on_sigbus;
        ours.sa_flags = SA_SIGINFO;
        sigemptyset(&ours.sa_mask);
        failed = sigaction(SIGBUS, &ours, &previous_action) != 0;
    }
    if (!failed)
        guard_users++;
    pthread_mutex_unlock(&guard_lock);
    return failed ? -1 : 0;
}

static void disarm(void)
{
    pthread_mutex_lock(&guard_lock);
    if (--guard_users == 0) {
        struct sigaction current;
        /* Someone installed another handler meanwhile (faulthandler.enable()): keep it. */
        if (sigaction(SIGBUS, NULL, &current) == 0 && (current.sa_flags & SA_SIGINFO)
            && current.sa_sigaction == on_sigbus)
            sigaction(SIGBUS, &previous_action, NULL);
    }
    pthread_mutex_unlock(&guard_lock);
}

/* Run op(dst, src, n) under the guard. Returns 0, or -1 when the mapping faulted. */
typedef int (*guarded_op)(char *dst, const char *src, Py_ssize_t n);

static int op_copy(char *dst, const char *src, Py_ssize_t n)
{
    memcpy(dst, src, (size_t)n);
    return 0;
}

static int op_is_zero(char *dst, const char *src, Py_ssize_t n)
{
    (void)dst;
    const volatile char *p = src;
    for (Py_ssize_t i = 0; i < n; i++)
        if (p[i] != 0)
            return 1;
    return 0;
}

static int run_guarded(guarded_op op, char *dst, const char *src, Py_ssize_t n, int *result)
{
    sigjmp_buf env;
    volatile int faulted = 0;
    if (arm() != 0) {
        PyErr_SetFromErrno(PyExc_OSError);
        return -1;
    }
    Py_BEGIN_ALLOW_THREADS
    if (sigsetjmp(env, 1) == 0) {
        guard_env = &env;
        *result = op(dst, src, n);
    } else {
        faulted = 1;
    }
    guard_env = NULL;
    Py_END_ALLOW_THREADS
    disarm();
    if (faulted) {
        PyErr_SetString(PyExc_OSError,
                        "bus error reading the mapped file: it was truncated while mapped");
        return -1;
    }
    return 0;
}

/* The [offset, offset + length) range of an object exporting a buffer, or -1. */
static int get_range(PyObject *args, Py_buffer *view, Py_ssize_t *offset, Py_ssize_t *length)
{
    PyObject *obj;
    if (!PyArg_ParseTuple(args, "Onn", &obj, offset, length))
        return -1;
    if (PyObject_GetBuffer(obj, view, PyBUF_SIMPLE) != 0)
        return -1;
    if (*offset < 0 || *length < 0 || *offset > view->len || *length > view->len - *offset) {
        PyBuffer_Release(view);
        PyErr_Format(PyExc_ValueError, "range %zd+%zd lies outside the %zd-byte buffer",
                     *offset, *length, view->len);
        return -1;
    }
    return 0;
}

static PyObject *mapped_copy(PyObject *self, PyObject *args)
{
    (void)self;
    Py_buffer view;
    Py_ssize_t offset, length;
    if (get_range(args, &view, &offset, &length) != 0)
        return NULL;
    PyObject *out = PyBytes_FromStringAndSize(NULL, length);
    int ignored = 0;
    if (out != NULL
        && run_guarded(op_copy, PyBytes_AS_STRING(out), (const char *)view.buf + offset,
                       length, &ignored) != 0)
        Py_CLEAR(out);
    PyBuffer_Release(&view);
    return out;
}

static PyObject *mapped_is_zero(PyObject *self, PyObject *args)
{
    (void)self;
    Py_buffer view;
    Py_ssize_t offset, length;
    if (get_range(args, &view, &offset, &length) != 0)
        return NULL;
    int nonzero = 0;
    int failed = run_guarded(op_is_zero, NULL, (const char *)view.buf + offset, length, &nonzero);
    PyBuffer_Release(&view);
    if (failed)
        return NULL;
    return PyBool_FromLong(!nonzero);
}

static PyMethodDef methods[] = {
    {"copy", mapped_copy, METH_VARARGS,
     "copy(buffer, offset, length) -> bytes: one copy of the range; OSError when the "
     "mapping behind it faults (SIGBUS: the file was truncated)."},
    {"is_zero", mapped_is_zero, METH_VARARGS,
     "is_zero(buffer, offset, length) -> bool: whether every byte of the range is zero; "
     "OSError when the mapping faults."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_mapped",
    "Reads of a memory-mapped file that turn SIGBUS into OSError.", -1, methods,
};

PyMODINIT_FUNC PyInit__mapped(void)
{
    return PyModule_Create(&module);
}
