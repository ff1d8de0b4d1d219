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

/* The walk itself: advances *index and *pos over whole accepted records (see the top of the file);
 * sets *anomaly at a record it does not accept; appends candidates to *candidates (created on the
 * first).  -1 with an exception set on a memory error, else 0. */
static int walk(const unsigned char *b, Py_ssize_t *pos_io, Py_ssize_t end, Py_ssize_t *index_io, Py_ssize_t count,
                long long base_ts, long long lo, long long hi, int flags, int *anomaly_out, PyObject **candidates) {
    Py_ssize_t pos = *pos_io, index = *index_io;
    int anomaly = 0;
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
            if (*candidates == NULL && (*candidates = PyList_New(0)) == NULL)
                return -1;
            PyObject *item = Py_BuildValue("(nOL)", index, key_length >= 0 ? Py_True : Py_False,
                                           (long long)ts_delta);
            if (item == NULL || PyList_Append(*candidates, item) < 0) {
                Py_XDECREF(item);
                return -1;
            }
            Py_DECREF(item);
        }
        index++;
        pos = limit;
    }
    *pos_io = pos;
    *index_io = index;
    *anomaly_out = anomaly;
    return 0;
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
    if (walk(b, &pos, end, &index, count, base_ts, lo, hi, flags, &anomaly, &candidates) < 0) {
        PyBuffer_Release(&view);
        Py_XDECREF(candidates);
        return NULL;
    }
    PyBuffer_Release(&view);
    if (candidates == NULL) {
        return Py_BuildValue("(nnOO)", index, pos, anomaly ? Py_True : Py_False, Py_None);
    }
    return Py_BuildValue("(nnON)", index, pos, anomaly ? Py_True : Py_False, candidates);
}

static inline int64_t be64(const unsigned char *p) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = (v << 8) | p[i];
    return (int64_t)v;
}

static inline int32_t be32(const unsigned char *p) {
    return (int32_t)(((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | (uint32_t)p[3]);
}

static inline int16_t be16(const unsigned char *p) { return (int16_t)(((uint16_t)p[0] << 8) | (uint16_t)p[1]); }

/* check_batch(buf, crc32c, flags, lo, hi) -> ((header fields), walked) or None
 *
 * The produce fast path of records.validator.check_produce_batch: ``buf`` must be exactly one sound v2
 * batch, as every v3+ producer sends per partition (magic 2, batchLength matching, CRC-32C good, a
 * positive record count equal to lastOffsetDelta + 1, not a control batch, a base sequence with a
 * producer id); anything else answers None and the Python checks run and say what is wrong.  The
 * header is returned as BatchHeader's 13 fields and position 0, then ``walked``: True when the batch is
 * uncompressed and its records walk clean (exactly recordsCount records filling the batch, none for
 * the rules to look at: the C walk above with ``flags``, LAT_BATCH added from the attributes); False
 * for a compressed batch (not walked: the caller decompresses it).  An uncompressed batch whose walk
 * is not clean answers None too.  ``crc32c`` is the crc32c package's function (hardware CRC). */
static PyObject *check_batch(PyObject *self, PyObject *args) {
    Py_buffer view;
    PyObject *crc_func;
    long long lo, hi;
    int flags;
    if (!PyArg_ParseTuple(args, "y*OiLL", &view, &crc_func, &flags, &lo, &hi))
        return NULL;
    const unsigned char *b = (const unsigned char *)view.buf;
    Py_ssize_t len = view.len;
    PyObject *result = NULL;
    if (len < 61)
        goto none;
    int32_t batch_length = be32(b + 8);
    if (b[16] != 2 || batch_length < 49 || (Py_ssize_t)batch_length + 12 != len)
        goto none;
    int16_t attributes = be16(b + 21);
    int32_t last_offset_delta = be32(b + 23);
    int64_t producer_id = be64(b + 43);
    int32_t base_sequence = be32(b + 53);
    int32_t records_count = be32(b + 57);
    if (records_count <= 0 || last_offset_delta < 0 || (int64_t)last_offset_delta + 1 != records_count)
        goto none;
    if ((attributes & 0x20) || (producer_id >= 0 && base_sequence < 0)) /* control; sequence */
        goto none;
    uint32_t crc = (uint32_t)be32(b + 17);
    PyObject *section = PyMemoryView_FromMemory((char *)b + 21, len - 21, PyBUF_READ);
    if (section == NULL)
        goto error;
    PyObject *computed = PyObject_CallOneArg(crc_func, section);
    Py_DECREF(section);
    if (computed == NULL)
        goto error;
    unsigned long actual = PyLong_AsUnsignedLong(computed);
    Py_DECREF(computed);
    if (actual == (unsigned long)-1 && PyErr_Occurred())
        goto error;
    if (actual != crc)
        goto none;
    int64_t base_ts = be64(b + 27);
    int walked = 0;
    if ((attributes & 0x07) == 0) {
        Py_ssize_t pos = 61, index = 0;
        int anomaly = 0;
        PyObject *candidates = NULL;
        int walk_flags = flags | ((attributes & 0x08) ? LAT_BATCH : 0);
        if (walk(b, &pos, len, &index, records_count, base_ts, lo, hi, walk_flags, &anomaly, &candidates) < 0) {
            Py_XDECREF(candidates);
            goto error;
        }
        if (candidates != NULL || anomaly || index != records_count || pos != len) {
            Py_XDECREF(candidates);
            goto none;
        }
        walked = 1;
    }
    result = Py_BuildValue("((LiibIhiLLLhiin)O)", (long long)be64(b), batch_length, be32(b + 12), (unsigned char)2,
                           (unsigned int)crc, attributes, last_offset_delta, (long long)base_ts,
                           (long long)be64(b + 35), (long long)producer_id, be16(b + 51), base_sequence,
                           records_count, (Py_ssize_t)0, walked ? Py_True : Py_False);
    PyBuffer_Release(&view);
    return result;
none:
    PyBuffer_Release(&view);
    Py_RETURN_NONE;
error:
    PyBuffer_Release(&view);
    return NULL;
}

static PyMethodDef methods[] = {
    {"walk_records", walk_records, METH_VARARGS, "Walk v2 records (see records/validator.py)."},
    {"check_batch", check_batch, METH_VARARGS, "One produced v2 batch checked and walked (see records/validator.py)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_walk", NULL, -1, methods};

PyMODINIT_FUNC PyInit__walk(void) { return PyModule_Create(&module); }
