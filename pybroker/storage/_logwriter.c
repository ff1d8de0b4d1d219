/* The writer thread of one log directory, in C (storage/writer.py uses it when it is built).
 *
 * A thread that never takes the GIL: the event loop submits (token, fd, buffer, position, fsync,
 * group) jobs; the thread pwrite()s each buffer whole at its position (and fsync()s when asked), in
 * submission order, and signals an eventfd; the loop, woken by that descriptor, takes the finished
 * jobs back in order with their errno (0: written).  After a failed job the thread skips the later
 * jobs of the same group (a log: they would leave a hole) and reports them as SKIPPED, until the
 * loop clears the group.  A failed or partial write is truncated away again (ftruncate to its
 * position).  Buffers stay held (Py_buffer) from submit to take, so their memory cannot move.
 *
 * Python side: Writer() ; fileno() ; submit(token, fd, buffer, position, fsync, group[, wake]) ;
 * kick() (wakes the thread for jobs submitted with wake=0: the jobs of one loop iteration cost one
 * futex wake, not one each) ; take() -> [(token, errno)] ; wait_all() (blocks, GIL released, until every job submitted so far
 * is done) ; clear_failed(group) ; stop().
 *
 * Also voluntary_switches(): the calling thread's voluntary context switches, which the loop reads
 * around each write it makes itself (writer.py), without building a struct_rusage.
 */
#define _GNU_SOURCE /* RUSAGE_THREAD */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <unistd.h>

#define SKIPPED (-1)
#define MAX_FAILED 64

typedef struct job {
    struct job *next;
    PyObject *token;
    Py_buffer buf;
    int fd;
    int fsync;
    Py_ssize_t position;
    long long group;
    int err;
} job;

typedef struct {
    PyObject_HEAD
    pthread_mutex_t lock;
    pthread_cond_t work;  /* the thread waits for jobs */
    pthread_cond_t done;  /* wait_all waits for the thread */
    job *pending_head, *pending_tail;
    job *done_head, *done_tail;
    unsigned long long submitted, finished;
    long long failed[MAX_FAILED];
    int n_failed;
    int efd;
    int started, stopping;
    pthread_t thread;
} Writer;

static int group_failed(Writer *w, long long group) {
    for (int i = 0; i < w->n_failed; i++)
        if (w->failed[i] == group)
            return 1;
    return 0;
}

static int write_job(job *j) {
    const char *p = (const char *)j->buf.buf;
    Py_ssize_t left = j->buf.len;
    off_t position = (off_t)j->position;
    while (left > 0) {
        ssize_t n = pwrite(j->fd, p, (size_t)left, position);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return errno;
        }
        if (n == 0)
            return EIO;
        p += n;
        left -= n;
        position += n;
    }
    if (j->fsync && fsync(j->fd) != 0)
        return errno;
    return 0;
}

static void *run(void *arg) {
    Writer *w = (Writer *)arg;
    for (;;) {
        pthread_mutex_lock(&w->lock);
        while (w->pending_head == NULL && !w->stopping)
            pthread_cond_wait(&w->work, &w->lock);
        job *batch = w->pending_head;
        w->pending_head = w->pending_tail = NULL;
        int stopping = w->stopping;
        pthread_mutex_unlock(&w->lock);
        if (batch == NULL && stopping)
            break;
        job *last = NULL;
        unsigned long long count = 0;
        for (job *j = batch; j != NULL; j = j->next) {
            pthread_mutex_lock(&w->lock);
            int skip = group_failed(w, j->group);
            pthread_mutex_unlock(&w->lock);
            if (skip) {
                j->err = SKIPPED;
            } else {
                j->err = write_job(j);
                if (j->err != 0) {
                    int ignored = ftruncate(j->fd, (off_t)j->position); /* recovery would cut it anyway */
                    (void)ignored;
                    pthread_mutex_lock(&w->lock);
                    if (w->n_failed < MAX_FAILED && !group_failed(w, j->group))
                        w->failed[w->n_failed++] = j->group;
                    pthread_mutex_unlock(&w->lock);
                }
            }
            last = j;
            count++;
        }
        pthread_mutex_lock(&w->lock);
        if (w->done_tail == NULL)
            w->done_head = batch;
        else
            w->done_tail->next = batch;
        w->done_tail = last;
        w->finished += count;
        pthread_cond_broadcast(&w->done);
        pthread_mutex_unlock(&w->lock);
        uint64_t one = 1;
        ssize_t ignored = write(w->efd, &one, sizeof(one));
        (void)ignored;
    }
    return NULL;
}

static PyObject *Writer_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    Writer *w = (Writer *)type->tp_alloc(type, 0);
    if (w == NULL)
        return NULL;
    pthread_mutex_init(&w->lock, NULL);
    pthread_cond_init(&w->work, NULL);
    pthread_cond_init(&w->done, NULL);
    w->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (w->efd < 0) {
        Py_DECREF(w);
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    return (PyObject *)w;
}

static void stop_thread(Writer *w) {
    if (!w->started)
        return;
    pthread_mutex_lock(&w->lock);
    w->stopping = 1;
    pthread_cond_signal(&w->work);
    pthread_mutex_unlock(&w->lock);
    Py_BEGIN_ALLOW_THREADS
    pthread_join(w->thread, NULL);
    Py_END_ALLOW_THREADS
    w->started = 0;
    w->stopping = 0;
}

static void free_jobs(job *j) {
    while (j != NULL) {
        job *next = j->next;
        PyBuffer_Release(&j->buf);
        Py_XDECREF(j->token);
        PyMem_Free(j);
        j = next;
    }
}

static void Writer_dealloc(Writer *w) {
    stop_thread(w);
    free_jobs(w->pending_head);
    free_jobs(w->done_head);
    if (w->efd >= 0)
        close(w->efd);
    pthread_mutex_destroy(&w->lock);
    pthread_cond_destroy(&w->work);
    pthread_cond_destroy(&w->done);
    Py_TYPE(w)->tp_free((PyObject *)w);
}

static PyObject *Writer_fileno(Writer *w, PyObject *unused) { return PyLong_FromLong(w->efd); }

static PyObject *Writer_submit(Writer *w, PyObject *args) {
    PyObject *token;
    int fd, fsync_flag, wake = 1;
    Py_ssize_t position;
    long long group;
    job *j = PyMem_Calloc(1, sizeof(job));
    if (j == NULL)
        return PyErr_NoMemory();
    if (!PyArg_ParseTuple(args, "Oiy*npL|p", &token, &fd, &j->buf, &position, &fsync_flag, &group, &wake)) {
        PyMem_Free(j);
        return NULL;
    }
    if (!w->started) {
        if (pthread_create(&w->thread, NULL, run, w) != 0) {
            PyBuffer_Release(&j->buf);
            PyMem_Free(j);
            return PyErr_SetFromErrno(PyExc_OSError);
        }
        w->started = 1;
    }
    Py_INCREF(token);
    j->token = token;
    j->fd = fd;
    j->position = position;
    j->fsync = fsync_flag;
    j->group = group;
    pthread_mutex_lock(&w->lock);
    if (w->pending_tail == NULL)
        w->pending_head = j;
    else
        w->pending_tail->next = j;
    w->pending_tail = j;
    w->submitted++;
    if (wake)
        pthread_cond_signal(&w->work);
    pthread_mutex_unlock(&w->lock);
    Py_RETURN_NONE;
}

/* Wake the thread for jobs submitted with wake=0 (one futex wake for many jobs, instead of one each). */
static PyObject *Writer_kick(Writer *w, PyObject *unused) {
    pthread_mutex_lock(&w->lock);
    if (w->pending_head != NULL)
        pthread_cond_signal(&w->work);
    pthread_mutex_unlock(&w->lock);
    Py_RETURN_NONE;
}

static PyObject *Writer_take(Writer *w, PyObject *unused) {
    uint64_t count;
    ssize_t ignored = read(w->efd, &count, sizeof(count)); /* EAGAIN when nothing was signalled */
    (void)ignored;
    pthread_mutex_lock(&w->lock);
    job *j = w->done_head;
    w->done_head = w->done_tail = NULL;
    pthread_mutex_unlock(&w->lock);
    PyObject *out = PyList_New(0);
    if (out == NULL) {
        free_jobs(j);
        return NULL;
    }
    while (j != NULL) {
        job *next = j->next;
        PyObject *item = Py_BuildValue("(Oi)", j->token, j->err);
        PyBuffer_Release(&j->buf);
        Py_DECREF(j->token);
        PyMem_Free(j);
        if (item == NULL || PyList_Append(out, item) < 0) {
            Py_XDECREF(item);
            free_jobs(next);
            Py_DECREF(out);
            return NULL;
        }
        Py_DECREF(item);
        j = next;
    }
    return out;
}

static PyObject *Writer_wait_all(Writer *w, PyObject *unused) {
    Py_BEGIN_ALLOW_THREADS
    pthread_mutex_lock(&w->lock);
    unsigned long long target = w->submitted;
    if (w->pending_head != NULL)
        pthread_cond_signal(&w->work); /* jobs submitted with wake=0 and not kicked yet */
    while (w->finished < target)
        pthread_cond_wait(&w->done, &w->lock);
    pthread_mutex_unlock(&w->lock);
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

static PyObject *Writer_clear_failed(Writer *w, PyObject *arg) {
    long long group = PyLong_AsLongLong(arg);
    if (group == -1 && PyErr_Occurred())
        return NULL;
    pthread_mutex_lock(&w->lock);
    for (int i = 0; i < w->n_failed; i++) {
        if (w->failed[i] == group) {
            w->failed[i] = w->failed[--w->n_failed];
            break;
        }
    }
    pthread_mutex_unlock(&w->lock);
    Py_RETURN_NONE;
}

static PyObject *Writer_stop(Writer *w, PyObject *unused) {
    stop_thread(w);
    Py_RETURN_NONE;
}

static PyMethodDef Writer_methods[] = {
    {"fileno", (PyCFunction)Writer_fileno, METH_NOARGS, "The eventfd signalled when jobs are done."},
    {"submit", (PyCFunction)Writer_submit, METH_VARARGS,
     "Queue (token, fd, buffer, position, fsync, group[, wake]); wake=False: the thread is woken by kick()."},
    {"kick", (PyCFunction)Writer_kick, METH_NOARGS, "Wake the thread for jobs submitted with wake=False."},
    {"take", (PyCFunction)Writer_take, METH_NOARGS, "The finished jobs, in order: [(token, errno)]."},
    {"wait_all", (PyCFunction)Writer_wait_all, METH_NOARGS, "Block until every submitted job is done."},
    {"clear_failed", (PyCFunction)Writer_clear_failed, METH_O, "Write the group's jobs again."},
    {"stop", (PyCFunction)Writer_stop, METH_NOARGS, "End the thread after the queued jobs."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject WriterType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "pybroker.storage._logwriter.Writer",
    .tp_basicsize = sizeof(Writer),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = Writer_new,
    .tp_dealloc = (destructor)Writer_dealloc,
    .tp_methods = Writer_methods,
    .tp_doc = "A log directory's writer thread (no GIL).",
};

static PyObject *voluntary_switches(PyObject *self, PyObject *unused) {
    struct rusage usage;
    if (getrusage(RUSAGE_THREAD, &usage) != 0)
        return PyErr_SetFromErrno(PyExc_OSError);
    return PyLong_FromLong(usage.ru_nvcsw);
}

static PyMethodDef module_methods[] = {
    {"voluntary_switches", voluntary_switches, METH_NOARGS, "The calling thread's voluntary context switches."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_logwriter", NULL, -1, module_methods};

PyMODINIT_FUNC PyInit__logwriter(void) {
    if (PyType_Ready(&WriterType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    Py_INCREF(&WriterType);
    if (PyModule_AddObject(m, "Writer", (PyObject *)&WriterType) < 0) {
        Py_DECREF(&WriterType);
        Py_DECREF(m);
        return NULL;
    }
    PyModule_AddIntConstant(m, "SKIPPED", SKIPPED);
    return m;
}
