/*
 * exactlyonce.connectors.kafka._arrowproduce: produce the records of Arrow columns from
 * native code, into the open transaction of a confluent-kafka Producer.
 *
 * The Kafka sink's hot loop in Python builds a bytes object per value and ID, a header list
 * per record, and parses both again in Producer.produce (bench/results/kafka_headers.json).
 * This loop reads the Arrow buffers as they are and hands each record to librdkafka's
 * rd_kafka_produceva(): the same message, key and one header, no Python object per record.
 *
 * It calls the librdkafka that confluent-kafka loaded (its path found by the Python side and
 * opened here with RTLD_NOLOAD: never a second copy), on the rd_kafka_t of the Producer
 * object, which is the first field after PyObject_HEAD in confluent-kafka's Handle; the
 * Python side checks that layout once (rd_kafka_name of a producer whose client.id it set)
 * before it uses this module.
 *
 * The few declarations of librdkafka's public API used here are written out below (librdkafka
 * is not a build dependency); they follow rdkafka.h of librdkafka 2.x, whose ABI is stable.
 *
 * A message is produced with RD_KAFKA_MSG_F_COPY and no opaque: confluent-kafka's delivery
 * callback returns at once for a message without its state, and a failed delivery fails the
 * transaction's commit, as for any message. produce() stops at the first record librdkafka
 * refuses and returns its index and error code; the caller decides (a full queue: poll and
 * go on; too large: dead letter; anything else: raise).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <dlfcn.h>
#include <stdint.h>
#include <string.h>
#include <sys/types.h>

/* ---- librdkafka's public API, as far as used (rdkafka.h, 2.x) ---- */

typedef struct rd_kafka_s rd_kafka_t;
typedef struct rd_kafka_topic_s rd_kafka_topic_t;
typedef struct rd_kafka_topic_conf_s rd_kafka_topic_conf_t;
typedef struct rd_kafka_error_s rd_kafka_error_t;
typedef struct rd_kafka_headers_s rd_kafka_headers_t;

typedef enum {
    RD_KAFKA_VTYPE_END,
    RD_KAFKA_VTYPE_TOPIC,
    RD_KAFKA_VTYPE_RKT,
    RD_KAFKA_VTYPE_PARTITION,
    RD_KAFKA_VTYPE_VALUE,
    RD_KAFKA_VTYPE_KEY,
    RD_KAFKA_VTYPE_OPAQUE,
    RD_KAFKA_VTYPE_MSGFLAGS,
    RD_KAFKA_VTYPE_TIMESTAMP,
    RD_KAFKA_VTYPE_HEADER,
    RD_KAFKA_VTYPE_HEADERS,
} rd_kafka_vtype_t;

typedef struct {
    rd_kafka_vtype_t vtype;
    union {
        const char *cstr;
        rd_kafka_topic_t *rkt;
        int i;
        int32_t i32;
        int64_t i64;
        struct {
            void *ptr;
            size_t size;
        } mem;
        struct {
            const char *name;
            const void *val;
            ssize_t size;
        } header;
        rd_kafka_headers_t *headers;
        void *ptr;
        char _pad[64];
    } u;
} rd_kafka_vu_t;

#define RD_KAFKA_MSG_F_COPY 0x2

typedef rd_kafka_error_t *(*produceva_fn)(rd_kafka_t *, const rd_kafka_vu_t *, size_t);
typedef int (*error_code_fn)(const rd_kafka_error_t *);
typedef void (*error_destroy_fn)(rd_kafka_error_t *);
typedef const char *(*name_fn)(const rd_kafka_t *);
typedef rd_kafka_topic_t *(*topic_new_fn)(rd_kafka_t *, const char *, rd_kafka_topic_conf_t *);
typedef void (*topic_destroy_fn)(rd_kafka_topic_t *);

static PyTypeObject *producer_type; /* confluent_kafka.Producer, given to load() */

static struct {
    produceva_fn produceva;
    error_code_fn error_code;
    error_destroy_fn error_destroy;
    name_fn name;
    topic_new_fn topic_new;
    topic_destroy_fn topic_destroy;
} rdk;

/* ---- an Arrow binary/string column, read from its buffers ---- */

typedef struct {
    Py_buffer validity; /* .buf NULL: no nulls */
    Py_buffer offsets;
    Py_buffer data;
    int wide;           /* offsets are int64 (large_binary/large_string), else int32 */
    Py_ssize_t offset;  /* the array's offset into its buffers */
    Py_ssize_t length;
} column_t;

static void column_release(column_t *c) {
    if (c->validity.obj) PyBuffer_Release(&c->validity);
    if (c->offsets.obj) PyBuffer_Release(&c->offsets);
    if (c->data.obj) PyBuffer_Release(&c->data);
}

/* (validity or None, offsets, data, wide, offset, length) -> column_t */
static int column_from(PyObject *spec, column_t *c) {
    PyObject *validity, *offsets, *data;
    memset(c, 0, sizeof(*c));
    if (!PyArg_ParseTuple(spec, "OOOinn", &validity, &offsets, &data, &c->wide, &c->offset,
                          &c->length))
        return -1;
    if (validity != Py_None && PyObject_GetBuffer(validity, &c->validity, PyBUF_SIMPLE) < 0)
        goto fail;
    if (PyObject_GetBuffer(offsets, &c->offsets, PyBUF_SIMPLE) < 0) goto fail;
    if (PyObject_GetBuffer(data, &c->data, PyBUF_SIMPLE) < 0) goto fail;
    {
        Py_ssize_t width = c->wide ? 8 : 4;
        Py_ssize_t need = (c->offset + c->length + 1) * width;
        if (c->offset < 0 || c->length < 0 || c->offsets.len < need ||
            (c->validity.obj && c->validity.len * 8 < c->offset + c->length)) {
            PyErr_SetString(PyExc_ValueError, "column buffers shorter than the column");
            goto fail;
        }
    }
    return 0;
fail:
    column_release(c);
    return -1;
}

/* The i-th value: 1 and (ptr, size) when present, 0 when null; -1 when its bounds fall
   outside the data buffer. */
static int column_get(const column_t *c, Py_ssize_t i, const char **ptr, size_t *size) {
    Py_ssize_t at = c->offset + i;
    int64_t start, end;
    if (c->validity.obj) {
        const uint8_t *bits = c->validity.buf;
        if (!(bits[at >> 3] & (1 << (at & 7)))) return 0;
    }
    if (c->wide) {
        const int64_t *o = c->offsets.buf;
        start = o[at];
        end = o[at + 1];
    } else {
        const int32_t *o = c->offsets.buf;
        start = o[at];
        end = o[at + 1];
    }
    if (start < 0 || end < start || end > c->data.len) return -1;
    *ptr = (const char *)c->data.buf + start;
    *size = (size_t)(end - start);
    return 1;
}

/* ---- the module ---- */

static PyObject *load(PyObject *self, PyObject *args) {
    const char *path;
    PyObject *type;
    void *lib;
    (void)self;
    if (!PyArg_ParseTuple(args, "sO!", &path, &PyType_Type, &type)) return NULL;
    lib = dlopen(path, RTLD_NOW | RTLD_NOLOAD);
    if (!lib) {
        PyErr_Format(PyExc_ImportError, "librdkafka is not loaded from %s: %s", path, dlerror());
        return NULL;
    }
    rdk.produceva = (produceva_fn)dlsym(lib, "rd_kafka_produceva");
    rdk.error_code = (error_code_fn)dlsym(lib, "rd_kafka_error_code");
    rdk.error_destroy = (error_destroy_fn)dlsym(lib, "rd_kafka_error_destroy");
    rdk.name = (name_fn)dlsym(lib, "rd_kafka_name");
    rdk.topic_new = (topic_new_fn)dlsym(lib, "rd_kafka_topic_new");
    rdk.topic_destroy = (topic_destroy_fn)dlsym(lib, "rd_kafka_topic_destroy");
    if (!rdk.produceva || !rdk.error_code || !rdk.error_destroy || !rdk.name ||
        !rdk.topic_new || !rdk.topic_destroy) {
        memset(&rdk, 0, sizeof(rdk));
        PyErr_Format(PyExc_ImportError, "%s lacks a function of librdkafka's 2.x API", path);
        return NULL;
    }
    Py_INCREF(type);
    Py_XSETREF(producer_type, (PyTypeObject *)type);
    Py_RETURN_NONE;
}

typedef struct {
    PyObject_HEAD
    rd_kafka_t *rk;
} handle_t; /* the head of confluent-kafka's Handle */

static rd_kafka_t *handle_of(PyObject *producer) {
    if (!rdk.produceva || !producer_type) {
        PyErr_SetString(PyExc_RuntimeError, "load() librdkafka first");
        return NULL;
    }
    if (!PyObject_TypeCheck(producer, producer_type) ||
        Py_TYPE(producer)->tp_basicsize < (Py_ssize_t)sizeof(handle_t) ||
        ((handle_t *)producer)->rk == NULL) {
        PyErr_SetString(PyExc_TypeError, "not an open confluent_kafka.Producer");
        return NULL;
    }
    return ((handle_t *)producer)->rk;
}

static PyObject *client_name(PyObject *self, PyObject *args) {
    PyObject *producer;
    (void)self;
    rd_kafka_t *rk;
    if (!PyArg_ParseTuple(args, "O", &producer)) return NULL;
    if (!(rk = handle_of(producer))) return NULL;
    return PyUnicode_FromString(rdk.name(rk));
}

/*
 * produce(producer, topic, partition, values, keys, header_name, prefix, ids, start)
 *   -> (index, error code)
 *
 * Produces rows start.. of ``values`` (with ``keys``, or None: no key) each with one header
 * ``header_name`` = ``prefix`` + the row's ID. Returns (length, 0) when all went, else the
 * index of the row librdkafka refused and its error code (nothing from that row on was
 * produced). A null value is a tombstone; a null ID refuses the call (ValueError).
 */
static PyObject *produce(PyObject *self, PyObject *args) {
    PyObject *producer, *values_spec, *keys_spec, *ids_spec;
    const char *topic, *header_name, *prefix;
    Py_ssize_t prefix_len, start, i, failed = -1;
    int partition, code = 0, bad = 0, has_keys;
    column_t values, keys, ids;
    rd_kafka_t *rk;
    rd_kafka_topic_t *rkt;
    char *header = NULL;
    size_t header_cap = 0;
    (void)self;

    if (!PyArg_ParseTuple(args, "OsiOOsy#On", &producer, &topic, &partition, &values_spec,
                          &keys_spec, &header_name, &prefix, &prefix_len, &ids_spec, &start))
        return NULL;
    if (!(rk = handle_of(producer))) return NULL;
    has_keys = keys_spec != Py_None;
    if (column_from(values_spec, &values) < 0) return NULL;
    if (has_keys && column_from(keys_spec, &keys) < 0) {
        column_release(&values);
        return NULL;
    }
    if (column_from(ids_spec, &ids) < 0) {
        column_release(&values);
        if (has_keys) column_release(&keys);
        return NULL;
    }
    if (ids.length != values.length || (has_keys && keys.length != values.length) ||
        start < 0 || start > values.length) {
        PyErr_SetString(PyExc_ValueError, "columns of different lengths, or start past them");
        goto done;
    }
    if (!(rkt = rdk.topic_new(rk, topic, NULL))) {
        PyErr_Format(PyExc_RuntimeError, "librdkafka refused a handle of topic %s", topic);
        goto done;
    }
    Py_BEGIN_ALLOW_THREADS;
    for (i = start; i < values.length; i++) {
        rd_kafka_vu_t vu[6];
        const char *v = NULL, *k = NULL, *id = NULL;
        size_t vlen = 0, klen = 0, idlen = 0;
        int n = 0, got;
        rd_kafka_error_t *error;

        if ((got = column_get(&values, i, &v, &vlen)) < 0 ||
            (has_keys && column_get(&keys, i, &k, &klen) < 0) ||
            (got = column_get(&ids, i, &id, &idlen)) <= 0) {
            bad = 1;
            failed = i;
            break;
        }
        if ((size_t)prefix_len + idlen > header_cap) {
            char *grown = realloc(header, (size_t)prefix_len + idlen);
            if (!grown) {
                bad = 2;
                failed = i;
                break;
            }
            header = grown;
            header_cap = (size_t)prefix_len + idlen;
            memcpy(header, prefix, (size_t)prefix_len);
        }
        memcpy(header + prefix_len, id, idlen);
        vu[n].vtype = RD_KAFKA_VTYPE_RKT;
        vu[n++].u.rkt = rkt;
        vu[n].vtype = RD_KAFKA_VTYPE_PARTITION;
        vu[n++].u.i32 = partition;
        vu[n].vtype = RD_KAFKA_VTYPE_MSGFLAGS;
        vu[n++].u.i = RD_KAFKA_MSG_F_COPY;
        vu[n].vtype = RD_KAFKA_VTYPE_VALUE;
        vu[n].u.mem.ptr = (void *)v;
        vu[n++].u.mem.size = vlen;
        if (k) {
            vu[n].vtype = RD_KAFKA_VTYPE_KEY;
            vu[n].u.mem.ptr = (void *)k;
            vu[n++].u.mem.size = klen;
        }
        vu[n].vtype = RD_KAFKA_VTYPE_HEADER;
        vu[n].u.header.name = header_name;
        vu[n].u.header.val = header;
        vu[n++].u.header.size = (ssize_t)(prefix_len + idlen);
        if ((error = rdk.produceva(rk, vu, (size_t)n)) != NULL) {
            code = rdk.error_code(error);
            rdk.error_destroy(error);
            failed = i;
            break;
        }
    }
    Py_END_ALLOW_THREADS;
    rdk.topic_destroy(rkt);
    if (bad == 1) {
        PyErr_Format(PyExc_ValueError, "row %zd: a null record ID or a value outside its buffer",
                     failed);
        goto done;
    }
    if (bad == 2) {
        PyErr_NoMemory();
        goto done;
    }
done:
    free(header);
    column_release(&values);
    if (has_keys) column_release(&keys);
    column_release(&ids);
    if (PyErr_Occurred()) return NULL;
    return Py_BuildValue("(ni)", failed < 0 ? values.length : failed, code);
}

static PyMethodDef methods[] = {
    {"load", load, METH_VARARGS,
     "load(path, Producer): use the librdkafka loaded from path, on Producer objects."},
    {"client_name", client_name, METH_VARARGS,
     "client_name(producer): rd_kafka_name() of the producer's handle."},
    {"produce", produce, METH_VARARGS,
     "produce(producer, topic, partition, values, keys, header_name, prefix, ids, start)"
     " -> (index, error code)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_arrowproduce",
    "Produce Arrow columns into a confluent-kafka Producer's transaction, natively.", -1,
    methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__arrowproduce(void) { return PyModule_Create(&module); }
