/* The record walk of records/validator.py (Kafka's LogValidator for v2 records), in C.
 *
 * walk_records(buf, pos, end, index, count, base_ts, lo, hi, flags) -> (index, pos, anomaly, candidates)
 *
 * Walks whole records of ``buf[pos:end]`` from record ``index`` as ``validator._walk_records`` does and
 * stops at ``count``, at ``end`` or at the first record not wholly inside ``buf[:end]`` (the caller then
 * reads more of a stream): the same (index, pos) the Python walk returns.  It accepts only what the
 * Python walk accepts, and is stricter where that is cheaper: at the first record it does not accept
 * (a structure error, or a varint of 10 bytes) it stops with ``anomaly`` set and that record's (index,
 * pos), and the Python walk takes over from there, raising exactly the error it always raised.
 * ``candidates`` lists (index, has_key, timestamp_delta) of every record a rule may refuse (a superset:
 * keyless records when flags has CHECK_KEYS, timestamps outside [lo, hi] other than -1 when CHECK_TS,
 * every record of a LogAppendTime batch when LAT_BATCH), for validator._Walk.check to decide; None when
 * there are none.  Pure computation over a byte buffer: no I/O, no allocation per record.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

#define CHECK_KEYS 1
#define CHECK_TS 2
#define LAT_BATCH 4

/* A zig-zag varint of at most 9 bytes (63 bits of payload) ending before ``limit``; 0 on success. */
static inline int read_varint(const unsigned char *b, Py_ssize_t *q, Py_ssize_t limit, int64_t *out) {
    uint64_t result = 0;
    int shift = 0;
    Py_ssize_t p = *q;
    for (int i = 0; i < 9; i++) {
        if (p >= limit)
            return -1;
        unsigned char byte = b[p++];
        result |= (uint64_t)(byte & 0x7F) << shift;
        if (byte < 0x80) {
            *out = (int64_t)(result >> 1) ^ -(int64_t)(result & 1);
            *q = p;
            return 0;
        }
        shift += 7;
    }
    return -1;
}

static PyObject *walk_records(PyObject *self, PyObject *args) {
    Py_buffer view;
    Py_ssize_t pos, end, index, count;
    long long base_ts, lo, hi;
    int flags;
    if (!PyArg_ParseTuple(args, "y*nnnnLLLi", &view, &pos, &end, &index, &count, &base_ts, &lo, &hi, &flags))
        return NULL;
    const unsigned char *b = (const unsigned char *)view.buf;
    if (end > view.len)
        end = view.len;
    if (pos < 0)
        pos = end; /* nothing to walk: the Python walk decides */
    int anomaly = 0;
    PyObject *candidates = NULL;
    const int check_keys = flags & CHECK_KEYS, check_ts = flags & CHECK_TS, lat_batch = flags & LAT_BATCH;
    while (index < count) {
        if (pos >= end)
            break;
        /* The length prefix: at most 5 bytes; a record whose prefix or body is cut by ``end`` waits. */
        uint64_t raw = 0;
        int shift = 0, partial = 0;
        Py_ssize_t p = pos;
        for (;;) {
            if (p >= end) {
                partial = 1;
                break;
            }
            unsigned char byte = b[p++];
            raw |= (uint64_t)(byte & 0x7F) << shift;
            if (byte < 0x80)
                break;
            shift += 7;
            if (shift > 28) {
                anomaly = 1;
                break;
            }
        }
        if (partial || anomaly)
            break;
        int64_t length = (int64_t)(raw >> 1) ^ -(int64_t)(raw & 1);
        if (length < 0) {
            anomaly = 1;
            break;
        }
        if (length > end - p) /* limit > end */
            break;
        Py_ssize_t limit = p + (Py_ssize_t)length;
        Py_ssize_t q = p + 1; /* attributes: unused in v2 */
        int64_t ts_delta, offset_delta, key_length, value_length, header_count;
        if (q > limit || read_varint(b, &q, limit, &ts_delta) || read_varint(b, &q, limit, &offset_delta) ||
            read_varint(b, &q, limit, &key_length)) {
            anomaly = 1;
            break;
        }
        if (key_length > 0) {
            if (key_length > limit - q) {
                anomaly = 1;
                break;
            }
            q += (Py_ssize_t)key_length;
        }
        if (read_varint(b, &q, limit, &value_length)) {
            anomaly = 1;
            break;
        }
        if (value_length > 0) {
            if (value_length > limit - q) {
                anomaly = 1;
                break;
            }
            q += (Py_ssize_t)value_length;
        }
        if (read_varint(b, &q, limit, &header_count) || header_count < 0 || header_count > limit - q) {
            anomaly = 1;
            break;
        }
        for (int64_t h = 0; h < header_count && !anomaly; h++) {
            int64_t hk, hv;
            if (read_varint(b, &q, limit, &hk) || hk < 0 || hk > limit - q) {
                anomaly = 1;
                break;
            }
            q += (Py_ssize_t)hk;
            if (read_varint(b, &q, limit, &hv)) {
                anomaly = 1;
                break;
            }
            if (hv > 0) {
                if (hv > limit - q) {
                    anomaly = 1;
                    break;
                }
                q += (Py_ssize_t)hv;
            }
        }
        if (anomaly || q != limit) {
            anomaly = 1;
            break;
        }
        int candidate = lat_batch || (check_keys && key_length < 0);
        if (!candidate && check_ts) {
            __int128 ts = (__int128)base_ts + ts_delta;
            candidate = (ts < lo || ts > hi) && ts != -1;
        }
        if (candidate) {
            if (candidates == NULL && (candidates = PyList_New(0)) == NULL)
                goto error;
            PyObject *item = Py_BuildValue("(nOL)", index, key_length >= 0 ? Py_True : Py_False,
                                           (long long)ts_delta);
            if (item == NULL || PyList_Append(candidates, item) < 0) {
                Py_XDECREF(item);
                goto error;
            }
            Py_DECREF(item);
        }
        index++;
        pos = limit;
    }
    PyBuffer_Release(&view);
    if (candidates == NULL) {
        return Py_BuildValue("(nnOO)", index, pos, anomaly ? Py_True : Py_False, Py_None);
    }
    return Py_BuildValue("(nnON)", index, pos, anomaly ? Py_True : Py_False, candidates);
error:
    PyBuffer_Release(&view);
    Py_XDECREF(candidates);
    return NULL;
}

static PyMethodDef methods[] = {
    {"walk_records", walk_records, METH_VARARGS, "Walk v2 records (see records/validator.py)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_walk", NULL, -1, methods};

PyMODINIT_FUNC PyInit__walk(void) { return PyModule_Create(&module); }
