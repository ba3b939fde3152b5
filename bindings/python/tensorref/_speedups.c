/* tensorref._speedups: the hot path of the Python binding, compiled (optional).
 *
 * Job: the arithmetic operators of tensorref.Tensor (those of _speedups_generated.h, generated
 * from the operator attributes of src/ops/ops.def: + - * / % // @ **, their reflected and in-place
 * forms, unary - and abs) on a Tensor or an exact int/float operand (a typed tr_scalar: an int
 * stays an int64), and Tensor.__del__ (the deferred release: append the handle to the buffer,
 * release the batch when it is full). Nothing else. Every other case (another operand type, a bool or NumPy
 * number, an int beyond int64) is handed to the pure-Python method these replace, and a failing call raises through the binding's one error path (_lib.fail), so
 * behaviour is that of the ctypes binding. tensorref/_accel.py loads and installs it.
 *
 * Nothing is linked at build time. install() receives the addresses of the library's functions
 * from the ctypes CDLL the package already loaded (TENSORREF_LIB picks it), so both paths call
 * one library instance with one handle registry, and the Python objects it shares with the
 * package: the Tensor class, and from _ownership.py the deferred-release buffer and batch size
 * and the list that is non-empty while a residency event callback runs; `fail`. Library calls
 * release the GIL, as ctypes calls do: an op may be long, and a thread that holds a library lock
 * may need the GIL (a residency event callback, a DLPack deleter), so holding it across a call
 * could deadlock.
 *
 * Speed: the methods are method descriptors on Tensor, and Tensor's type slots (nb_add ...,
 * tp_finalize) call them directly rather than looking them up at each call (bind_slots). A
 * Tensor is a ctypes c_uint64: its handle is read through the object's b_ptr, which install()
 * checks against the buffer protocol first (and refuses to bind if they disagree).
 *
 * State is process-wide and set once; every function here runs with the GIL held.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#ifdef Py_GIL_DISABLED
#error "the state here is guarded by the GIL: a free-threaded build stays pure ctypes"
#endif

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* The types and prototypes of the C ABI (setup.py puts the repository's include/ folder on the
 * include path). Nothing is linked: the functions are called through the addresses install()
 * receives, by the pointer types below, each checked against the header's prototypes of the
 * functions it stands for where the compiler can (GCC, Clang). */
#include "tensorref.h"

typedef tr_status (*op_tt)(tr_tensor, tr_tensor, tr_tensor *);  /* tr_tensor_add */
typedef tr_status (*op_ts)(tr_tensor, tr_scalar, tr_tensor *);  /* tr_tensor_add_scalar */
typedef tr_status (*op_t)(tr_tensor, tr_tensor *);              /* tr_tensor_neg */
typedef tr_status (*ip_tt)(tr_tensor, tr_tensor);               /* tr_tensor_add_ */
typedef tr_status (*ip_ts)(tr_tensor, tr_scalar);               /* tr_tensor_mul_scalar_ */
typedef tr_status (*release_fn)(tr_tensor);
typedef tr_status (*release_many_fn)(const tr_tensor *, size_t);

#if defined(__GNUC__)
#define SAME_TYPE(fn, ptr) \
    _Static_assert(__builtin_types_compatible_p(__typeof__(&fn), ptr), #fn " is not " #ptr)
SAME_TYPE(tr_tensor_release, release_fn);
SAME_TYPE(tr_tensor_release_many, release_many_fn);
#endif

/* The operators, their C functions (each checked as above) and type slots. */
#include "_speedups_generated.h"

typedef void (*any_fn)(void);  /* stored as this, called through its real type above */

/* One operator: its C functions for a Tensor and for a scalar operand (NULL: none; that
 * operand goes to `fallback`, the pure-Python method, which returns NotImplemented for it),
 * and for the type slot the method of the reflected operation (other <op> tensor). */
typedef struct {
    const char *method, *reflected, *c_tensor, *c_scalar;
    int in_place;
    any_fn tensor, scalar;                /* set by install() */
    PyObject *fallback, *reflected_name;  /* set by install() */
} Op;

#define OP(method, reflected, c_tensor, c_scalar, in_place) \
    {method, reflected, c_tensor, c_scalar, in_place, NULL, NULL, NULL, NULL}

#define ENUM_ENTRY(E, method, reflected, c_tensor, c_scalar, in_place) E,
enum { OPERATORS(ENUM_ENTRY) N_OPS };

#define OP_ENTRY(E, method, reflected, c_tensor, c_scalar, in_place) \
    [E] = OP(method, reflected, c_tensor, c_scalar, in_place),
static Op ops[N_OPS] = { OPERATORS(OP_ENTRY) };

/* Set by install(); strong references kept for the life of the process. */
static PyTypeObject *Tensor;      /* tensorref.Tensor */
static PyObject *own_descr;       /* its slot `_own` (a member descriptor) */
static PyObject *pending;         /* _ownership._pending: handles (int) waiting for release */
static PyObject *limit;           /* _ownership._limit: [batch size] */
static PyObject *in_callback;     /* _ownership.in_callback: non-empty inside an event callback */
static PyObject *fail;            /* _lib.fail(status, function, *tensors): raises */
static PyObject *empty_tuple;
static any_fn tr_release, tr_release_many;  /* release_fn, release_many_fn */

/* ---------------------------------------------------------------- handles and objects */

/* The head of CPython's ctypes object (CDataObject in Modules/_ctypes/ctypes.h): b_ptr, the
 * address of the C value, follows the object header. */
typedef struct { PyObject_HEAD char *b_ptr; } CDataHead;

/* Where the handle of a Tensor (an 8-byte ctypes object) is: its b_ptr, which install()
 * checked against the buffer protocol (which the package then takes off Tensor: NumPy must not
 * read the handle as a number, see _protocols.hide_buffer). */
static char *handle_at(PyObject *t)
{
    return ((CDataHead *)t)->b_ptr;
}

static tr_tensor handle_of(PyObject *t)
{
    tr_tensor h;
    memcpy(&h.id, handle_at(t), sizeof h.id);
    return h;
}

static void release_now(tr_tensor h)
{
    Py_BEGIN_ALLOW_THREADS
    ((release_fn)tr_release)(h);
    Py_END_ALLOW_THREADS
}

/* A new Tensor object holding the new handle `h` (`_own` True, as _tensor.new() makes it); on
 * failure `h` is released. tp_new alone makes it as Tensor() does: install() checked the class
 * adds no __init__. */
static PyObject *wrap(tr_tensor h)
{
    PyObject *t = Tensor->tp_new(Tensor, empty_tuple, NULL);
    if (t != NULL) {
        memcpy(handle_at(t), &h.id, sizeof h.id);
        if (Py_TYPE(own_descr)->tp_descr_set(own_descr, t, Py_True) == 0)
            return t;
        Py_DECREF(t);  /* `_own` unset: its __del__ leaves the handle alone */
    }
    release_now(h);
    return NULL;
}

/* The error path: _lib.fail raises the class of `status` with the library's message. */
static PyObject *raise_status(tr_status st, const char *function, PyObject *a, PyObject *b)
{
    PyObject *r = b != NULL ? PyObject_CallFunction(fail, "isOO", (int)st, function, a, b)
                            : PyObject_CallFunction(fail, "isO", (int)st, function, a);
    if (r != NULL) {
        Py_DECREF(r);
        PyErr_Format(PyExc_SystemError, "%s failed with status %d", function, (int)st);
    }
    return NULL;
}

/* ---------------------------------------------------------------- operators */

static PyObject *binary(const Op *op, PyObject *self, PyObject *other)
{
    tr_tensor a, b, out = {0};
    tr_status st;
    a = handle_of(self);
    if (op->tensor != NULL && PyObject_TypeCheck(other, Tensor)) {
        b = handle_of(other);
        Py_BEGIN_ALLOW_THREADS
        st = op->in_place ? ((ip_tt)op->tensor)(a, b) : ((op_tt)op->tensor)(a, b, &out);
        Py_END_ALLOW_THREADS
        if (st)
            return raise_status(st, op->c_tensor, self, other);
    } else if (op->scalar != NULL && (PyFloat_CheckExact(other) || PyLong_CheckExact(other))) {
        tr_scalar s = tr_scalar_int(0);
        if (PyFloat_CheckExact(other)) {
            s.kind = TR_SCALAR_KIND_FLOAT;
            s.f = PyFloat_AS_DOUBLE(other);
        } else {
            int overflow;
            s.i = PyLong_AsLongLongAndOverflow(other, &overflow);
            if (overflow)
                goto pure;  /* an int beyond int64: the pure method raises OverflowError */
        }
        Py_BEGIN_ALLOW_THREADS
        st = op->in_place ? ((ip_ts)op->scalar)(a, s) : ((op_ts)op->scalar)(a, s, &out);
        Py_END_ALLOW_THREADS
        if (st)
            return raise_status(st, op->c_scalar, self, NULL);
    } else {
        goto pure;
    }
    if (op->in_place) {
        Py_INCREF(self);
        return self;
    }
    return wrap(out);
pure: {
        PyObject *args[2] = {self, other};
        return PyObject_Vectorcall(op->fallback, args, 2, NULL);
    }
}

static PyObject *unary(const Op *op, PyObject *self)
{
    tr_tensor a, out = {0};
    tr_status st;
    a = handle_of(self);
    Py_BEGIN_ALLOW_THREADS
    st = ((op_t)op->tensor)(a, &out);
    Py_END_ALLOW_THREADS
    if (st)
        return raise_status(st, op->c_tensor, self, NULL);
    return wrap(out);
}

/* ---------------------------------------------------------------- deferred releases */

/* Takes every handle out of the buffer at once (no Python code runs meanwhile, so each is
 * taken exactly once, also against _tensor.flush_releases on another thread) and releases
 * them: tr_tensor_release for one, one tr_tensor_release_many otherwise, statuses ignored (a
 * stale handle changes nothing). Out of memory, the buffer is left as it was. */
static void flush(void)
{
    Py_ssize_t n = PyList_GET_SIZE(pending), k = 0;
    tr_tensor local[64], *hs = local;
    if (n > (Py_ssize_t)(sizeof local / sizeof local[0])) {
        hs = PyMem_New(tr_tensor, (size_t)n);
        if (hs == NULL)
            return;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        hs[k].id = PyLong_AsUnsignedLongLong(PyList_GET_ITEM(pending, i));
        if (hs[k].id == (uint64_t)-1 && PyErr_Occurred())
            PyErr_Clear();  /* not a handle (only ints are put there): skipped */
        else
            k++;
    }
    if (PyList_SetSlice(pending, 0, n, NULL) == 0 && k > 0) {
        Py_BEGIN_ALLOW_THREADS
        if (k == 1)
            ((release_fn)tr_release)(hs[0]);
        else
            ((release_many_fn)tr_release_many)(hs, (size_t)k);
        Py_END_ALLOW_THREADS
    }
    if (hs != local)
        PyMem_Free(hs);
}

/* Tensor.__del__, as the Python one: an owning object's handle joins the buffer, which is
 * released once it holds _limit[0] handles, except inside a residency event callback (the
 * library holds the manager's lock there). Never raises: a finalizer has nobody to raise to. */
static PyObject *tensor_del(PyObject *self, PyObject *Py_UNUSED(ignored))
{
    PyObject *own = Py_TYPE(own_descr)->tp_descr_get(own_descr, self, (PyObject *)Tensor);
    int mine = own == Py_True ? 1 : own == NULL || own == Py_False || own == Py_None ? 0
             : PyObject_IsTrue(own);  /* NULL: `_own` unset, made by Tensor(handle) */
    Py_XDECREF(own);
    if (mine > 0) {
        PyObject *v = PyLong_FromUnsignedLongLong(handle_of(self).id);
        if (v != NULL && PyList_Append(pending, v) == 0) {
            Py_ssize_t lim = PyList_GET_SIZE(limit) ? PyLong_AsSsize_t(PyList_GET_ITEM(limit, 0)) : 1;
            if (PyErr_Occurred())
                PyErr_Clear();
            if (PyList_GET_SIZE(pending) >= lim && PyList_GET_SIZE(in_callback) == 0)
                flush();
        }
        Py_XDECREF(v);
    }
    PyErr_Clear();
    Py_RETURN_NONE;
}

/* ---------------------------------------------------------------- methods and slots */

/* Tensor's methods: each a C function bound to its op. */
#define BINARY_METHOD(E, dunder) \
    static PyObject *method_##E(PyObject *self, PyObject *other) { return binary(&ops[E], self, other); }
BINARY_METHODS(BINARY_METHOD)
#define UNARY_METHOD(E, dunder) \
    static PyObject *method_##E(PyObject *self, PyObject *Py_UNUSED(ignored)) { return unary(&ops[E], self); }
UNARY_METHODS(UNARY_METHOD)

#define BINARY_ENTRY(E, dunder) {dunder, method_##E, METH_O, NULL},
#define UNARY_ENTRY(E, dunder) {dunder, method_##E, METH_NOARGS, NULL},
static PyMethodDef tensor_methods[] = {
    BINARY_METHODS(BINARY_ENTRY)
    UNARY_METHODS(UNARY_ENTRY)
    {"__del__", tensor_del, METH_NOARGS, NULL},
    {NULL, NULL, 0, NULL},
};

/* The type slots. CPython's generic slot for a method defined on a class looks the method up
 * at each call; bind_slots() points Tensor's slots at these instead, which call the methods
 * above directly and keep the generic slots' protocol: a binary slot receives `a <op> b` with
 * the Tensor on either side and calls a.__op__(b), or b.__rop__(a) when the Tensor is `b`
 * (looked up on the type as CPython does, NotImplemented when absent). The slot is Tensor's
 * own: subclasses get generic slots (their MRO holds a method, not a slot wrapper). */

/* The dict of a type in an MRO (a new reference; since 3.12 static builtin types such as
 * `object` keep it elsewhere than tp_dict). */
static PyObject *type_dict(PyTypeObject *t)
{
#if PY_VERSION_HEX >= 0x030C0000
    return PyType_GetDict(t);
#else
    Py_XINCREF(t->tp_dict);
    return t->tp_dict;
#endif
}

/* self.<name>(other) for the reflected operation, looked up and called as CPython's generic
 * slots do: on the type's MRO; NotImplemented when no class defines it. */
static PyObject *reflected(const Op *op, PyObject *self, PyObject *other)
{
    PyObject *mro = Py_TYPE(self)->tp_mro, *f = NULL, *r;
    for (Py_ssize_t i = 0; f == NULL && mro != NULL && i < PyTuple_GET_SIZE(mro); i++) {
        PyObject *dict = type_dict((PyTypeObject *)PyTuple_GET_ITEM(mro, i));
        if (dict != NULL) {
            f = PyDict_GetItemWithError(dict, op->reflected_name);  /* borrowed */
            Py_XINCREF(f);
            Py_DECREF(dict);
        }
        if (f == NULL && PyErr_Occurred())
            return NULL;
    }
    if (f == NULL)
        Py_RETURN_NOTIMPLEMENTED;
    if (PyFunction_Check(f) || (Py_TYPE(f)->tp_flags & Py_TPFLAGS_METHOD_DESCRIPTOR)) {
        PyObject *args[2] = {self, other};
        r = PyObject_Vectorcall(f, args, 2, NULL);
    } else {  /* another kind of attribute: bound as a descriptor, if it is one */
        descrgetfunc get = Py_TYPE(f)->tp_descr_get;
        PyObject *bound = get != NULL ? get(f, self, (PyObject *)Py_TYPE(self)) : f;
        if (bound != f)
            Py_DECREF(f);
        if (bound == NULL)
            return NULL;
        r = PyObject_CallOneArg(bound, other);
        f = bound;
    }
    Py_DECREF(f);
    return r;
}

#define BINARY_SLOT(slot, E) \
    static PyObject *direct_##slot(PyObject *a, PyObject *b) \
    { return Py_IS_TYPE(a, Tensor) ? binary(&ops[E], a, b) : reflected(&ops[E], b, a); }
BINARY_SLOTS(BINARY_SLOT)

/* Three-argument power calls self.__pow__(other, mod) (the pure method: it refuses it), and
 * never the reflected method. */
#define POWER_SLOT(slot, E) \
    static PyObject *direct_##slot(PyObject *a, PyObject *b, PyObject *mod) \
    { \
        if (mod == Py_None) \
            return Py_IS_TYPE(a, Tensor) ? binary(&ops[E], a, b) : reflected(&ops[E], b, a); \
        if (!Py_IS_TYPE(a, Tensor)) \
            Py_RETURN_NOTIMPLEMENTED; \
        return PyObject_CallFunctionObjArgs(ops[E].fallback, a, b, mod, NULL); \
    }
POWER_SLOTS(POWER_SLOT)

/* The in-place slots and the unary and finalizer slots only ever see their own type's
 * objects; anything else would go to the generic slot they replaced. */
#define INPLACE_SLOT(slot, E) \
    static binaryfunc generic_##slot; \
    static PyObject *direct_##slot(PyObject *a, PyObject *b) \
    { return Py_IS_TYPE(a, Tensor) ? binary(&ops[E], a, b) : generic_##slot(a, b); }
INPLACE_SLOTS(INPLACE_SLOT)

#define INPLACE_POWER_SLOT(slot, E) \
    static ternaryfunc generic_##slot; \
    static PyObject *direct_##slot(PyObject *a, PyObject *b, PyObject *mod) \
    { return Py_IS_TYPE(a, Tensor) && mod == Py_None ? binary(&ops[E], a, b) : generic_##slot(a, b, mod); }
INPLACE_POWER_SLOTS(INPLACE_POWER_SLOT)

#define UNARY_SLOT(slot, E) \
    static unaryfunc generic_##slot; \
    static PyObject *direct_##slot(PyObject *a) \
    { return Py_IS_TYPE(a, Tensor) ? unary(&ops[E], a) : generic_##slot(a); }
UNARY_SLOTS(UNARY_SLOT)

static destructor generic_tp_finalize;
static void direct_tp_finalize(PyObject *self)
{
    PyObject *r;
    if (!Py_IS_TYPE(self, Tensor)) {
        generic_tp_finalize(self);
        return;
    }
    /* A finalizer leaves the current exception alone. */
#if PY_VERSION_HEX >= 0x030C0000
    PyObject *exc = PyErr_GetRaisedException();
    r = tensor_del(self, NULL);
    PyErr_SetRaisedException(exc);
#else
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    r = tensor_del(self, NULL);
    PyErr_Restore(type, value, tb);
#endif
    Py_XDECREF(r);
}

/* Points Tensor's slots at the functions above; _accel.use(True) calls it right after putting
 * the method descriptors on the class, which gave each slot its generic function. Setting one
 * of these methods on the class again makes CPython put a generic slot back. */
static PyObject *bind_slots(PyObject *Py_UNUSED(module), PyObject *Py_UNUSED(ignored))
{
    PyNumberMethods *nb;
    if (Tensor == NULL || !(Tensor->tp_flags & Py_TPFLAGS_HEAPTYPE)
        || Tensor->tp_as_number != &((PyHeapTypeObject *)Tensor)->as_number)
        Py_RETURN_FALSE;
    nb = Tensor->tp_as_number;
#define MISSING(slot, E) || nb->slot == NULL
    if (Tensor->tp_finalize == NULL BINARY_SLOTS(MISSING) POWER_SLOTS(MISSING) INPLACE_SLOTS(MISSING)
        INPLACE_POWER_SLOTS(MISSING) UNARY_SLOTS(MISSING))
        Py_RETURN_FALSE;  /* a method is missing: the class is not what install() saw */
#undef MISSING
#define KEEP(slot, E) if (nb->slot != direct_##slot) generic_##slot = nb->slot;
    INPLACE_SLOTS(KEEP)
    INPLACE_POWER_SLOTS(KEEP)
    UNARY_SLOTS(KEEP)
#undef KEEP
    if (Tensor->tp_finalize != direct_tp_finalize)
        generic_tp_finalize = Tensor->tp_finalize;
#define SET(slot, E) nb->slot = direct_##slot;
    BINARY_SLOTS(SET)
    POWER_SLOTS(SET)
    INPLACE_SLOTS(SET)
    INPLACE_POWER_SLOTS(SET)
    UNARY_SLOTS(SET)
#undef SET
    Tensor->tp_finalize = direct_tp_finalize;
    Py_RETURN_TRUE;
}

/* ---------------------------------------------------------------- install */

/* A new strong reference to `o` (Py_NewRef, which Python 3.9 lacks). */
static PyObject *keep(PyObject *o)
{
    Py_INCREF(o);
    return o;
}

/* The C function `name` of the loaded library, from address(name) -> int; -1 with an
 * exception (AttributeError from ctypes: the library does not export it). An integer to
 * function pointer conversion is implementation-defined, and GCC and Clang define it as
 * the address; the pointer is only ever called through its own type. */
static int lookup(PyObject *address, const char *name, any_fn *fn)
{
    PyObject *v;
    unsigned long long a;
    *fn = NULL;
    if (name == NULL)
        return 0;
    v = PyObject_CallFunction(address, "s", name);
    if (v == NULL)
        return -1;
    a = PyLong_AsUnsignedLongLong(v);
    Py_DECREF(v);
    if (a == (unsigned long long)-1 && PyErr_Occurred())
        return -1;
    if (a == 0 || a > UINTPTR_MAX) {
        PyErr_Format(PyExc_ValueError, "bad address for %s", name);
        return -1;
    }
    *fn = (any_fn)(uintptr_t)a;
    return 0;
}

/* Whether b_ptr of a Tensor is where the buffer protocol says its value is (1), not (0),
 * or -1 with an exception. */
static int b_ptr_agrees(PyTypeObject *type)
{
    Py_buffer v;
    int agrees;
    PyObject *probe = PyObject_CallNoArgs((PyObject *)type);
    if (probe == NULL)
        return -1;
    if (PyObject_GetBuffer(probe, &v, PyBUF_SIMPLE) < 0) {
        Py_DECREF(probe);
        return -1;
    }
    agrees = v.len == (Py_ssize_t)sizeof(uint64_t) && v.buf == ((CDataHead *)probe)->b_ptr;
    PyBuffer_Release(&v);
    Py_DECREF(probe);  /* `_own` unset: not released */
    return agrees;
}

static PyObject *install(PyObject *Py_UNUSED(module), PyObject *args)
{
    PyObject *cls, *address, *fallbacks, *pend, *lim, *inside, *fail_fn, *descr, *out;
    PyTypeObject *type;
    any_fn rel, rel_many;
    int agrees;
    if (Tensor != NULL) {
        PyErr_SetString(PyExc_RuntimeError, "tensorref._speedups is installed already");
        return NULL;
    }
    if (!PyArg_ParseTuple(args, "O!OO!O!O!O!O:install", &PyType_Type, &cls, &address,
                          &PyDict_Type, &fallbacks, &PyList_Type, &pend, &PyList_Type, &lim,
                          &PyList_Type, &inside, &fail_fn))
        return NULL;
    type = (PyTypeObject *)cls;
    /* Objects are made by tp_new alone: the class must not add an __init__ or __new__. */
    if (type->tp_base == NULL || type->tp_init != type->tp_base->tp_init
        || type->tp_new != type->tp_base->tp_new) {
        PyErr_SetString(PyExc_TypeError, "the Tensor class defines __init__ or __new__");
        return NULL;
    }
    descr = PyDict_GetItemString(type->tp_dict, "_own");  /* borrowed; a heap type has tp_dict */
    if (descr == NULL || Py_TYPE(descr)->tp_descr_get == NULL
        || Py_TYPE(descr)->tp_descr_set == NULL) {
        PyErr_SetString(PyExc_TypeError, "the Tensor class has no slot `_own`");
        return NULL;
    }
    for (int i = 0; i < N_OPS; i++) {
        Op *op = &ops[i];
        op->fallback = PyDict_GetItemString(fallbacks, op->method);  /* borrowed */
        if (op->fallback == NULL) {
            PyErr_Format(PyExc_KeyError, "no pure-Python %s", op->method);
            return NULL;
        }
        if (lookup(address, op->c_tensor, &op->tensor) < 0
            || lookup(address, op->c_scalar, &op->scalar) < 0)
            return NULL;
        if (op->reflected != NULL && op->reflected_name == NULL
            && (op->reflected_name = PyUnicode_InternFromString(op->reflected)) == NULL)
            return NULL;
    }
    if (lookup(address, "tr_tensor_release", &rel) < 0
        || lookup(address, "tr_tensor_release_many", &rel_many) < 0)
        return NULL;
    if (empty_tuple == NULL && (empty_tuple = PyTuple_New(0)) == NULL)
        return NULL;
    if ((agrees = b_ptr_agrees(type)) < 0)
        return NULL;
    if (!agrees) {
        PyErr_SetString(PyExc_TypeError, "ctypes objects are not laid out as this extension reads them");
        return NULL;
    }
    out = PyDict_New();
    for (PyMethodDef *m = tensor_methods; out != NULL && m->ml_name != NULL; m++) {
        PyObject *d = PyDescr_NewMethod(type, m);
        if (d == NULL || PyDict_SetItemString(out, m->ml_name, d) < 0)
            Py_CLEAR(out);
        Py_XDECREF(d);
    }
    if (out == NULL)
        return NULL;
    /* Committed: nothing below fails. */
    for (int i = 0; i < N_OPS; i++)
        Py_INCREF(ops[i].fallback);
    tr_release = rel;
    tr_release_many = rel_many;
    Tensor = (PyTypeObject *)keep(cls);
    own_descr = keep(descr);
    pending = keep(pend);
    limit = keep(lim);
    in_callback = keep(inside);
    fail = keep(fail_fn);
    return out;
}

static PyMethodDef module_methods[] = {
    {"install", install, METH_VARARGS,
     "install(Tensor, address, fallbacks, pending, limit, in_callback, fail) -> dict\n\n"
     "Binds the accelerator, once per process, to the loaded library (address(name) -> the\n"
     "address of its C function `name`) and to the binding's state (see _accel.py). Returns\n"
     "the method descriptors to set on Tensor, name -> descriptor; `fallbacks` are the\n"
     "pure-Python methods of those names, which they call for the cases they leave."},
    {"bind_slots", bind_slots, METH_NOARGS,
     "Points Tensor's operator and finalizer slots at the installed methods (after they were\n"
     "set on the class); returns whether it could."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "tensorref._speedups",
    "The compiled hot path of tensorref.Tensor (operators, deferred release); see _accel.py.",
    -1, module_methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__speedups(void)
{
    return PyModule_Create(&module);
}
