/*
 * exactlyonce.dedup._bloomkernel: the numpy Bloom filter's two loops, in C.
 *
 * The filter (exactlyonce.dedup.bloom.NumpyBloom) is a byte array; an ID's k bits are
 * (h1 + i * h2) mod m for i in 0..k-1, with h1 the ID's first 8 bytes and h2 its last 8 bytes
 * with the low bit set, both read as native-endian uint64 (what numpy's view(np.uint64) reads)
 * and the sum and product wrapping modulo 2^64 (numpy's uint64 arithmetic); bit b is bit
 * (b mod 8), least significant first, of byte b / 8. This file computes exactly that, so a
 * filter written here and one written by numpy are the same bytes (a property test checks).
 *
 * contains() stops at an ID's first clear bit, and neither function materialises the
 * (n, k) bit numbers numpy needs: that is the whole gain.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define ID_BYTES 16

typedef struct {
    Py_buffer filter, ids;
    uint64_t bits;
    uint64_t hashes;
    Py_ssize_t n;
} job_t;

static void job_release(job_t *j) {
    if (j->filter.obj) PyBuffer_Release(&j->filter);
    if (j->ids.obj) PyBuffer_Release(&j->ids);
}

/* (filter, bits, hashes, ids): the filter's bytes hold ``bits`` bits; ids are n x 16 bytes. */
static int job_from(PyObject *args, job_t *j, int writable) {
    PyObject *filter, *ids;
    unsigned long long bits, hashes;
    memset(j, 0, sizeof(*j));
    if (!PyArg_ParseTuple(args, "OKKO", &filter, &bits, &hashes, &ids)) return -1;
    if (PyObject_GetBuffer(filter, &j->filter, writable ? PyBUF_WRITABLE : PyBUF_SIMPLE) < 0)
        return -1;
    if (PyObject_GetBuffer(ids, &j->ids, PyBUF_C_CONTIGUOUS) < 0) {
        job_release(j);
        return -1;
    }
    if (bits == 0 || hashes == 0 || (unsigned long long)j->filter.len * 8 < bits ||
        j->ids.len % ID_BYTES) {
        PyErr_SetString(PyExc_ValueError,
                        "a filter shorter than its bits, no bits or hashes, or IDs not 16 bytes");
        job_release(j);
        return -1;
    }
    j->bits = bits;
    j->hashes = hashes;
    j->n = j->ids.len / ID_BYTES;
    return 0;
}

static inline void halves(const uint8_t *id, uint64_t *h1, uint64_t *h2) {
    memcpy(h1, id, 8);
    memcpy(h2, id + 8, 8);
    *h2 |= 1u;
}

/* contains(filter, bits, hashes, ids) -> bytes: 1 where every bit of the ID is set. */
static PyObject *contains(PyObject *self, PyObject *args) {
    job_t j;
    PyObject *out;
    uint8_t *found;
    (void)self;
    if (job_from(args, &j, 0) < 0) return NULL;
    out = PyBytes_FromStringAndSize(NULL, j.n);
    if (!out) {
        job_release(&j);
        return NULL;
    }
    found = (uint8_t *)PyBytes_AS_STRING(out);
    Py_BEGIN_ALLOW_THREADS;
    {
        const uint8_t *bytes = j.filter.buf, *ids = j.ids.buf;
        for (Py_ssize_t r = 0; r < j.n; r++) {
            uint64_t h1, h2, i;
            uint8_t all = 1;
            halves(ids + r * ID_BYTES, &h1, &h2);
            for (i = 0; i < j.hashes; i++) {
                uint64_t b = (h1 + i * h2) % j.bits;
                if (!((bytes[b >> 3] >> (b & 7)) & 1)) {
                    all = 0;
                    break;
                }
            }
            found[r] = all;
        }
    }
    Py_END_ALLOW_THREADS;
    job_release(&j);
    return out;
}

/* add(filter, bits, hashes, ids): set every bit of every ID, in place. */
static PyObject *add(PyObject *self, PyObject *args) {
    job_t j;
    (void)self;
    if (job_from(args, &j, 1) < 0) return NULL;
    Py_BEGIN_ALLOW_THREADS;
    {
        uint8_t *bytes = j.filter.buf;
        const uint8_t *ids = j.ids.buf;
        for (Py_ssize_t r = 0; r < j.n; r++) {
            uint64_t h1, h2, i;
            halves(ids + r * ID_BYTES, &h1, &h2);
            for (i = 0; i < j.hashes; i++) {
                uint64_t b = (h1 + i * h2) % j.bits;
                bytes[b >> 3] |= (uint8_t)(1u << (b & 7));
            }
        }
    }
    Py_END_ALLOW_THREADS;
    job_release(&j);
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"contains", contains, METH_VARARGS,
     "contains(filter, bits, hashes, ids) -> bytes: 1 where the ID may be in the filter."},
    {"add", add, METH_VARARGS, "add(filter, bits, hashes, ids): set the IDs' bits in place."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_bloomkernel", "The numpy Bloom filter's loops, in C.", -1,
    methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__bloomkernel(void) { return PyModule_Create(&module); }
