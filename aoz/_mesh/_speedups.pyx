# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""The data plane's hot path, compiled.

Twins of ``drain_sub``, ``Sender`` and ``Inbox`` in ``aoz/_mesh/_hotpath.py`` (which states the
contract both keep), with the same behaviour (tests/hotpath runs both on the same input and compares
everything they leave behind; `make test` runs the suite on each). What C buys here: the
subject search is a ``memchr`` on the frame's buffer instead of two method calls, the
sequence header is read without ``struct``, a publish frame is built in one allocation,
and the per-frame bookkeeping runs without the interpreter. ZeroMQ is still called
through pyzmq (the socket's ``recv``, the backend's ``send``), so there is no second
binding of libzmq to keep in step with pyzmq's.

``aoz._mesh.hotpath`` uses this module only when its ``ABI`` and ``CONSTANTS`` match the pure
twin's.
"""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.object cimport PyObject_GetAttr
from cpython.dict cimport PyDict_GetItem
from cpython.object cimport Py_SIZE
from cpython.pythread cimport PyThread_get_thread_ident
from cpython.ref cimport PyObject
from cpython.unicode cimport PyUnicode_DecodeASCII
from libc.stdint cimport uint8_t, uint32_t, uint64_t
from libc.string cimport memchr, memcmp, memcpy

import heapq
import os
import time
from collections import deque

import anyio.lowlevel
import zmq

from .errmap import translate
from ..errors import DecodeError, TransportError, WouldBlock
from .message import Message
from .._protocol.frames import Kind, inbox_subject, parse_handle
from .subscription import Mailbox

ABI = 13
BATCH = 1024
#: the protocol's numbers built in below; aoz._mesh.hotpath checks them against aoz._mesh._hotpath's
CONSTANTS = {"BATCH": BATCH, "MAX_SUBJECT": 256, "HEADER_LEN": 13, "AOZ_CODEC_IDS": 4,
             "SEQUENCE_FLAG": 0x04, "HEADERS_FLAG": 0x08, "COPY_THRESHOLD": 65536, "YIELD_EVERY": 256, "HANDLE_LEN": 60,
             "HEAP_SLACK": 64}

cdef Py_ssize_t _BATCH = BATCH


# ---------------------------------------------------------------------- async for
# ``Subscription.__anext__`` when a message is already queued: the message in a ready
# awaitable instead of a coroutine (one coroutine per message was a fifth of a
# subscriber's cost). ``await`` takes it through am_send, with no StopIteration; it is
# also a collections.abc.Coroutine (send, throw, close), so asyncio.create_task and
# anyio take it as they take a coroutine. Awaited a second time it gives None, as a
# finished coroutine cannot be awaited again (that raises; a ready one has nothing left).
cdef extern from *:
    """
    typedef struct { PyObject_HEAD PyObject *value; } aoz_ready;
    static PyTypeObject aoz_ready_type;

    static void aoz_ready_dealloc(PyObject *self) {
        Py_XDECREF(((aoz_ready *)self)->value);
        PyObject_Free(self);
    }
    static PyObject *aoz_ready_take(PyObject *self) {
        PyObject *v = ((aoz_ready *)self)->value;
        ((aoz_ready *)self)->value = NULL;
        if (v == NULL) { Py_INCREF(Py_None); v = Py_None; }
        return v;
    }
    static PyObject *aoz_ready_await(PyObject *self) { Py_INCREF(self); return self; }
    static PySendResult aoz_ready_am_send(PyObject *self, PyObject *arg, PyObject **out) {
        *out = aoz_ready_take(self);
        return PYGEN_RETURN;
    }
    static PyObject *aoz_ready_stop(PyObject *self) {
        PyObject *v = aoz_ready_take(self);
        PyObject *stop = PyObject_CallOneArg(PyExc_StopIteration, v);
        Py_DECREF(v);
        if (stop != NULL) { PyErr_SetObject(PyExc_StopIteration, stop); Py_DECREF(stop); }
        return NULL;
    }
    static PyObject *aoz_ready_send(PyObject *self, PyObject *arg) { return aoz_ready_stop(self); }
    static PyObject *aoz_ready_throw(PyObject *self, PyObject *const *args, Py_ssize_t n) {
        Py_CLEAR(((aoz_ready *)self)->value);
        if (n < 1) { PyErr_SetString(PyExc_TypeError, "throw expects an exception"); return NULL; }
        PyObject *e = args[0];
        if (PyExceptionClass_Check(e)) { PyErr_SetNone(e); }
        else { PyErr_SetObject((PyObject *)Py_TYPE(e), e); }
        return NULL;
    }
    static PyObject *aoz_ready_close(PyObject *self, PyObject *unused) {
        Py_CLEAR(((aoz_ready *)self)->value);
        Py_RETURN_NONE;
    }
    static PyMethodDef aoz_ready_methods[] = {
        {"send", (PyCFunction)aoz_ready_send, METH_O, NULL},
        {"throw", (PyCFunction)(void(*)(void))aoz_ready_throw, METH_FASTCALL, NULL},
        {"close", (PyCFunction)aoz_ready_close, METH_NOARGS, NULL},
        {NULL, NULL, 0, NULL}
    };
    static PyAsyncMethods aoz_ready_async = {aoz_ready_await, 0, 0, aoz_ready_am_send};

    static int aoz_ready_init(void) {
        aoz_ready_type.tp_name = "aoz._mesh._speedups.Ready";
        aoz_ready_type.tp_basicsize = sizeof(aoz_ready);
        aoz_ready_type.tp_dealloc = aoz_ready_dealloc;
        aoz_ready_type.tp_flags = Py_TPFLAGS_DEFAULT;
        aoz_ready_type.tp_as_async = &aoz_ready_async;
        aoz_ready_type.tp_iter = PyObject_SelfIter;
        aoz_ready_type.tp_iternext = aoz_ready_stop;
        aoz_ready_type.tp_methods = aoz_ready_methods;
        aoz_ready_type.tp_doc = "A message already queued, as an awaitable (aoz's async for).";
        return PyType_Ready(&aoz_ready_type);
    }
    static PyObject *aoz_ready_new(PyObject *value) {
        aoz_ready *r = PyObject_New(aoz_ready, &aoz_ready_type);
        if (r == NULL) return NULL;
        Py_INCREF(value);
        r->value = value;
        return (PyObject *)r;
    }
    """
    int aoz_ready_init() except -1
    object aoz_ready_new(object value)

aoz_ready_init()
#: what a send that is already done returns (``await node.publish``, ``msg.respond()``): a
#: Ready with nothing in it, so awaiting it gives None however often it is awaited
DONE = aoz_ready_new(None)
cdef object _QUEUE = "_queue"
cdef object _HELD = "_held"
cdef object _GET = "_get"


def subscription_anext(self):
    """``Subscription.__anext__`` (aoz._mesh.hotpath puts it there): a message already
    queued comes in a ready awaitable; otherwise (nothing queued, or a held producer to
    tell) the subscription's own coroutine, as the pure-Python ``__anext__``."""
    q = PyObject_GetAttr(self, _QUEUE)
    if q and not PyObject_GetAttr(self, _HELD):
        return aoz_ready_new(q.popleft())
    return PyObject_GetAttr(self, _GET)()
cdef int _NOBLOCK = zmq.NOBLOCK
cdef object _Again = zmq.Again
cdef object _ZMQError = zmq.ZMQError
cdef object _Message = Message
cdef object _PUBLISH = Kind.PUBLISH
cdef object _REQUEST_KIND = Kind.REQUEST
cdef int _PUBLISH_BYTE = 1  # the type bytes of SPEC §1
cdef int _REQUEST = 2
cdef int _REPLY = 3
cdef object _deque = deque
cdef object _deque_append = deque.append
cdef object _clock = time.time
cdef object _send = getattr(zmq.backend, "Socket", zmq.Socket).send
cdef Py_ssize_t _MAX_SUBJECT = CONSTANTS["MAX_SUBJECT"]  # aoz._protocol.subjects
cdef Py_ssize_t _HEADER_LEN = CONSTANTS["HEADER_LEN"]  # aoz._protocol.sequence
cdef uint8_t _AOZ_CODEC_IDS = CONSTANTS["AOZ_CODEC_IDS"]  # aoz._protocol.codecs
cdef uint8_t _FLAG = CONSTANTS["SEQUENCE_FLAG"]  # aoz._protocol.sequence
cdef uint8_t _HEADERS = CONSTANTS["HEADERS_FLAG"]  # aoz._protocol.headers
cdef Py_ssize_t _COPY_THRESHOLD = CONSTANTS["COPY_THRESHOLD"]  # aoz._mesh._hotpath
cdef unsigned int _YIELD_EVERY = CONSTANTS["YIELD_EVERY"]  # aoz._mesh._hotpath
cdef Py_ssize_t _HANDLE_LEN = CONSTANTS["HANDLE_LEN"]  # aoz._protocol.frames


# ---------------------------------------------------------------------- libzmq, directly
# The frames of the hot path go to and from libzmq without pyzmq's Python-level call
# (argument parsing, a release of the GIL around a call that cannot block): through the
# libzmq pyzmq itself loaded, found by its symbols in pyzmq's own extension module and
# the libraries it links (dlopen with RTLD_NOLOAD: nothing new is ever loaded). Where
# they cannot be found (another pyzmq backend, a platform without dlopen, a libzmq whose
# version differs from the one pyzmq reports), or AOZ_LIBZMQ_DIRECT=0, every call goes
# through pyzmq as before. Any error but EAGAIN is left to pyzmq too (it raises it).
cdef extern from *:
    """
    typedef struct { unsigned char _[64]; } __attribute__((aligned(8))) aoz_zmq_msg_t;
    typedef int (*aoz_zmq_msg_init_t)(aoz_zmq_msg_t*);
    typedef int (*aoz_zmq_msg_init_size_t)(aoz_zmq_msg_t*, size_t);
    typedef int (*aoz_zmq_msg_io_t)(aoz_zmq_msg_t*, void*, int);
    typedef int (*aoz_zmq_msg_close_t)(aoz_zmq_msg_t*);
    typedef void* (*aoz_zmq_msg_data_t)(aoz_zmq_msg_t*);
    typedef size_t (*aoz_zmq_msg_size_t)(const aoz_zmq_msg_t*);
    typedef int (*aoz_zmq_errno_t)(void);
    """
    ctypedef struct aoz_zmq_msg_t:
        pass
    ctypedef int (*aoz_zmq_msg_init_t)(aoz_zmq_msg_t*) noexcept nogil
    ctypedef int (*aoz_zmq_msg_init_size_t)(aoz_zmq_msg_t*, size_t) noexcept nogil
    ctypedef int (*aoz_zmq_msg_io_t)(aoz_zmq_msg_t*, void*, int) noexcept nogil
    ctypedef int (*aoz_zmq_msg_close_t)(aoz_zmq_msg_t*) noexcept nogil
    ctypedef void* (*aoz_zmq_msg_data_t)(aoz_zmq_msg_t*) noexcept nogil
    ctypedef size_t (*aoz_zmq_msg_size_t)(const aoz_zmq_msg_t*) noexcept nogil
    ctypedef int (*aoz_zmq_errno_t)() noexcept nogil

cdef aoz_zmq_msg_init_t _z_init = NULL
cdef aoz_zmq_msg_init_size_t _z_init_size = NULL
cdef aoz_zmq_msg_io_t _z_send = NULL
cdef aoz_zmq_msg_io_t _z_recv = NULL
cdef aoz_zmq_msg_close_t _z_close = NULL
cdef aoz_zmq_msg_data_t _z_data = NULL
cdef aoz_zmq_msg_size_t _z_size = NULL
cdef aoz_zmq_errno_t _z_errno = NULL
cdef int _EAGAIN = zmq.EAGAIN
cdef bint _direct = False
#: pyzmq's socket methods; a socket whose type has others (a wrapper that checks what
#: it reads) is called through its own
cdef object _plain_recv = zmq.Socket.recv
cdef object _backend_socket = getattr(zmq.backend, "Socket", zmq.Socket)
cdef object _UNDERLYING = "underlying"
cdef object _CLOSED = "_closed"


def _libzmq_functions():
    """The addresses of the libzmq functions the hot path calls, from the libzmq pyzmq
    loaded, or None (the reason is logged at debug by aoz._mesh.hotpath)."""
    if os.environ.get("AOZ_LIBZMQ_DIRECT", "") in ("0", "no", "false"):
        return None, "AOZ_LIBZMQ_DIRECT=0"
    import ctypes
    try:
        from zmq.backend.cython import _zmq
        path = _zmq.__file__
        noload = getattr(os, "RTLD_NOLOAD", None)
        if not path or noload is None:
            return None, "pyzmq's Cython backend or RTLD_NOLOAD is not available"
        lib = ctypes.CDLL(path, mode=noload | os.RTLD_LAZY | ctypes.RTLD_LOCAL)
        major, minor, patch = ctypes.c_int(), ctypes.c_int(), ctypes.c_int()
        version = lib.zmq_version
        version.restype = None
        version(ctypes.byref(major), ctypes.byref(minor), ctypes.byref(patch))
        if (major.value, minor.value, patch.value) != zmq.zmq_version_info():
            return None, "the libzmq found is not the one pyzmq reports"
        if major.value != 4:
            return None, f"libzmq {major.value}: the message layout is libzmq 4's"
        names = ("zmq_msg_init", "zmq_msg_init_size", "zmq_msg_send", "zmq_msg_recv",
                 "zmq_msg_close", "zmq_msg_data", "zmq_msg_size", "zmq_errno")
        return {n: ctypes.cast(getattr(lib, n), ctypes.c_void_p).value for n in names}, ""
    except (OSError, AttributeError, ImportError, TypeError) as exc:
        return None, f"libzmq's functions were not found ({exc})"


def _bind_libzmq():
    global _z_init, _z_init_size, _z_send, _z_recv, _z_close, _z_data, _z_size, _z_errno
    global _direct
    found, why = _libzmq_functions()
    if found is None or not all(found.values()):
        return why or "a libzmq function has no address"
    _z_init = <aoz_zmq_msg_init_t><size_t>found["zmq_msg_init"]
    _z_init_size = <aoz_zmq_msg_init_size_t><size_t>found["zmq_msg_init_size"]
    _z_send = <aoz_zmq_msg_io_t><size_t>found["zmq_msg_send"]
    _z_recv = <aoz_zmq_msg_io_t><size_t>found["zmq_msg_recv"]
    _z_close = <aoz_zmq_msg_close_t><size_t>found["zmq_msg_close"]
    _z_data = <aoz_zmq_msg_data_t><size_t>found["zmq_msg_data"]
    _z_size = <aoz_zmq_msg_size_t><size_t>found["zmq_msg_size"]
    _z_errno = <aoz_zmq_errno_t><size_t>found["zmq_errno"]
    _direct = True
    return ""


#: why libzmq is called through pyzmq ("" when the hot path calls it directly)
LIBZMQ_FALLBACK = _bind_libzmq()
#: whether the hot path calls libzmq directly (see above)
LIBZMQ_DIRECT = _direct


cdef inline void* _handle_of(object sock) except? NULL:
    """The libzmq socket behind ``sock`` for a direct call, or NULL: not a plain open
    pyzmq socket (a closed one is left to pyzmq, which raises what it raises)."""
    if not _direct or not isinstance(sock, _backend_socket):
        return NULL
    if PyObject_GetAttr(sock, _CLOSED):
        return NULL
    return <void*><size_t>PyObject_GetAttr(sock, _UNDERLYING)


cdef inline object _recv_direct(void* handle):
    """One frame off ``handle`` (non-blocking) as bytes; None when none is waiting;
    False on any other error (the caller asks pyzmq, which raises it)."""
    cdef aoz_zmq_msg_t msg
    cdef int rc
    cdef object frame
    _z_init(&msg)
    rc = _z_recv(&msg, handle, _NOBLOCK)
    if rc < 0:
        rc = _z_errno()
        _z_close(&msg)
        return None if rc == _EAGAIN else False
    frame = PyBytes_FromStringAndSize(<const char*>_z_data(&msg), <Py_ssize_t>_z_size(&msg))
    _z_close(&msg)
    return frame


cdef inline uint64_t _u64(const uint8_t* p) noexcept:
    return (<uint64_t>p[0] | (<uint64_t>p[1] << 8) | (<uint64_t>p[2] << 16)
            | (<uint64_t>p[3] << 24) | (<uint64_t>p[4] << 32) | (<uint64_t>p[5] << 40)
            | (<uint64_t>p[6] << 48) | (<uint64_t>p[7] << 56))


cdef inline uint32_t _u32(const uint8_t* p) noexcept:
    return (<uint32_t>p[0] | (<uint32_t>p[1] << 8) | (<uint32_t>p[2] << 16)
            | (<uint32_t>p[3] << 24))


cdef inline int _frame_kind(const uint8_t* buf, Py_ssize_t flen, Py_ssize_t* end) noexcept:
    """The type byte of a well-formed publish, request or reply frame (what
    publish_subject_end and decode_frame accept as one), with the subject's length in
    ``end``; 0 for anything else (decode_frame then says what the frame is)."""
    cdef Py_ssize_t limit = flen if flen < _MAX_SUBJECT + 1 else _MAX_SUBJECT + 1
    cdef const uint8_t* p = <const uint8_t*>memchr(buf, 0, limit)
    if p == NULL:
        return 0
    cdef Py_ssize_t e = p - buf, i, hend
    if e == 0 or flen < e + 3:
        return 0
    end[0] = e
    cdef uint8_t kind = buf[e + 1]
    if kind == _PUBLISH_BYTE or kind == _REPLY:
        return kind if buf[e + 2] == 0 else 0
    if kind == _REQUEST:
        hend = e + 2 + _HANDLE_LEN
        if flen < hend + 1 or buf[hend] != 0:
            return 0
        for i in range(e + 2, hend):
            if buf[i] == 0 or buf[i] > 0x7F:  # not printable ASCII: decode_frame refuses it
                return 0
        return _REQUEST
    return 0


cdef inline Py_ssize_t _data_start(const uint8_t* buf, Py_ssize_t flen,
                                   Py_ssize_t start) noexcept:
    """aoz._protocol.headers.data_start: after the first byte, the sequence header and
    the header block that it says follow; ``start`` for a foreign or cut-short payload."""
    cdef uint8_t first
    cdef Py_ssize_t pos
    if flen <= start:
        return start
    first = buf[start]
    if first < _AOZ_CODEC_IDS:
        return start + 1
    if first >= 0x10:
        return start
    pos = start + 1
    if first & _FLAG:
        pos += _HEADER_LEN - 1
    if first & _HEADERS:
        if flen < pos + 2:
            return start
        pos += 2 + (<Py_ssize_t>buf[pos] | (<Py_ssize_t>buf[pos + 1] << 8))
    return pos if pos <= flen else start


cdef void _hand_over(dict pending) except *:
    for s, msgs in pending.items():
        s.push_many(msgs)
    pending.clear()


def drain_sub(plane, sock):
    """Drain up to ``BATCH`` frames of the data SUB (see ``aoz._mesh._hotpath.drain_sub``)."""
    recv = sock.recv
    # libzmq directly for a plain pyzmq socket (see _handle_of); re-checked whenever
    # code outside the drain ran (a callback could have closed the node)
    cdef void* handle = _handle_of(sock) if type(sock).recv is _plain_recv else NULL
    cdef bint other = False
    routes = plane.routes
    cdef dict cache = routes.cache
    responder = plane.responder
    on_reply = plane.on_reply
    cdef dict last_seen = plane.last_seen
    cdef dict pending = {}
    cdef dict budget = {}  # what each blocking subscription may still take
    cdef bint full = False  # a blocking subscription is full once the batches are in
    cdef Py_ssize_t left
    cdef Py_ssize_t last_left = -1  # last_sub's room left (-1: not blocking)
    cdef object last_sub = None
    cdef list last_msgs = None
    cdef list queued
    cdef list st
    cdef tuple subs
    cdef bytes frame
    cdef bytes sb
    cdef const uint8_t* buf
    cdef Py_ssize_t flen, start, data
    cdef Py_ssize_t nul = 0
    cdef int kind
    cdef Py_ssize_t n = 0
    cdef Py_ssize_t nbytes = 0
    cdef PyObject* found
    cdef uint64_t pid
    cdef uint32_t seq
    now = _clock()
    try:
        while n < _BATCH and not full and not plane.holds:
            if handle != NULL:
                if other:  # code outside the drain ran: is the socket still open?
                    handle = _handle_of(sock)
                    other = False
            if handle != NULL:
                got = _recv_direct(handle)
                if got is None:  # nothing waiting (EAGAIN)
                    break
                frame = recv(_NOBLOCK) if got is False else <bytes>got  # errors: pyzmq's
            else:
                frame = recv(_NOBLOCK)
            n += 1
            flen = PyBytes_GET_SIZE(frame)
            nbytes += flen
            buf = <const uint8_t*>PyBytes_AS_STRING(frame)
            kind = _frame_kind(buf, flen, &nul)
            if kind == _REPLY:  # a reply to one of our requests (or not: on_reply says)
                on_reply(PyBytes_FromStringAndSize(<const char*>buf, nul), frame, nul + 3, now)
                other = True
                continue
            if kind == 0:  # anything malformed: decode_frame says what, and it is counted
                if pending:  # keep each subscription's messages in arrival order
                    _hand_over(pending)
                    if last_left >= 0:
                        budget[last_sub] = last_left
                    last_sub = None
                    last_msgs = None
                    last_left = -1
                plane.other_frame(frame, now)
                other = True
                budget.clear()  # it may have pushed: rooms are asked again
                continue
            # a publication or a request: routed by its subject, queued alike
            sb = PyBytes_FromStringAndSize(<const char*>buf, nul)
            found = PyDict_GetItem(cache, sb)
            if found == NULL or <object>found is None:  # unseen, or cached as invalid
                routed = routes.route(sb)
                if routed is None:
                    plane.malformed += 1
                    continue
                subs = <tuple>routed
            else:
                subs = <tuple>found
            if not subs:
                continue
            if kind == _PUBLISH_BYTE:
                start = nul + 3
                data = _data_start(buf, flen, start)
                msg = _Message(frame, nul, start, data, _PUBLISH, None, now, responder)
                if data >= start + _HEADER_LEN and (buf[start] & _FLAG):
                    pid = _u64(buf + start + 1)
                    seq = _u32(buf + start + 9)
                    # the next number from the subject's last publisher costs one
                    # lookup; anything else takes plane.sequence
                    found = PyDict_GetItem(last_seen, sb)
                    if found == NULL or not (<uint64_t>(<list>found)[0] == pid and
                                             <uint64_t>(<list>found)[1] + 1 == seq):
                        if pending:  # what came before a gap is queued before it is
                            _hand_over(pending)  # reported (recovery holds)
                            if last_left >= 0:
                                budget[last_sub] = last_left
                            last_sub = None
                            last_msgs = None
                            last_left = -1
                        plane.sequence(sb, pid, seq, msg, subs)
                        other = True
                    else:
                        (<list>found)[1] = seq
            else:
                start = nul + 3 + _HANDLE_LEN
                data = _data_start(buf, flen, start)
                reply = PyUnicode_DecodeASCII(<const char*>buf + nul + 2, _HANDLE_LEN, NULL)
                msg = _Message(frame, nul, start, data, _REQUEST_KIND, reply, now, responder)
            for s in subs:
                if s is last_sub and (last_left < 0 or (data != start
                                                        and kind == _PUBLISH_BYTE)):
                    last_msgs.append(msg)
                    if last_left > 0:  # a blocking subscription's room, counted down
                        last_left -= 1
                        if last_left == 0:
                            full = True
                    continue
                if last_left >= 0:  # keep the count of the one we leave
                    budget[last_sub] = last_left
                left = -1  # no bound: not a blocking subscription
                if s.blocking:
                    # up to room() messages as one batch; the drain stops at the frame
                    # that fills it; maybe packed, or room() 0: pushed at once, in order
                    found = PyDict_GetItem(budget, s)
                    left = <Py_ssize_t>(<object>found) if found != NULL else s.room()
                    if left <= 0 or data == start or kind != _PUBLISH_BYTE:
                        if pending:
                            _hand_over(pending)
                        last_sub = None
                        last_msgs = None
                        last_left = -1
                        s.push(msg)
                        other = True
                        budget.pop(s, None)  # its room changed: asked again
                        continue
                    left -= 1
                    if left == 0:
                        full = True
                found = PyDict_GetItem(pending, s)
                if found == NULL:
                    queued = [msg]
                    pending[s] = queued
                else:
                    queued = <list>found
                    queued.append(msg)
                last_sub = s
                last_msgs = queued
                last_left = left
    except _Again:
        pass
    except _ZMQError as exc:
        plane.socket_error(exc, "receiving on the data socket")
    finally:
        if pending:
            _hand_over(pending)
        plane.messages_in += n
        plane.bytes_in += nbytes
    return n


cdef class Entry:
    """One subject's cached prefixes and its last sequence number: the twin of
    ``aoz._protocol.builder.Entry``, with fields the compiled Sender reads directly."""

    cdef public bytes header
    cdef public bytes prefix
    cdef public unsigned long long seq
    # the subject's deque in a Sender's CacheStore, valid while its ``gen`` is kept_gen
    cdef object kept
    cdef unsigned long long kept_gen

    def __init__(self, bytes header, bytes prefix):
        self.header = header
        self.prefix = prefix
        self.seq = 0


cdef unsigned long long _generations = 0  # CacheStore.gen: never the same twice


cdef class CacheStore:
    """The publisher cache's frames and bounds (see ``CacheStore`` in aoz/_mesh/_hotpath.py).

    ``gen`` changes whenever a subject's deque leaves ``deques`` (and differs between
    stores), so that an Entry can hold its subject's deque and skip the dict lookup
    while ``gen`` is what it was.
    """

    cdef public dict deques
    cdef public Py_ssize_t depth
    cdef public long long max_bytes
    cdef public long long nbytes
    cdef public unsigned long long evicted
    cdef unsigned long long gen

    def __init__(self, Py_ssize_t depth, long long max_bytes):
        global _generations
        self.depth = depth
        self.max_bytes = max_bytes
        self.deques = {}
        self.nbytes = 0
        self.evicted = 0
        _generations += 1
        self.gen = _generations

    cpdef add(self, subject, frame):
        """Keep ``frame``, just numbered on ``subject``."""
        _append(self, _deque_of(self, subject), frame)

    cpdef shrink(self):
        """Over the byte bound: the oldest frame of the first subject goes, and that
        subject moves to the end (round robin), until the store fits."""
        global _generations
        cdef dict subjects = self.deques
        while self.nbytes > self.max_bytes and subjects:
            subject = next(iter(subjects))
            d = subjects.pop(subject)
            self.nbytes -= len(d.popleft())
            self.evicted += 1
            if d:
                subjects[subject] = d
            else:  # gone from the store: entries holding it must look again
                _generations += 1
                self.gen = _generations


cdef inline object _deque_of(CacheStore store, object subject):
    """The deque of ``subject`` in ``store`` (a new one for a new subject)."""
    cdef PyObject* found = PyDict_GetItem(store.deques, subject)
    if found != NULL:
        return <object>found
    d = _deque(maxlen=store.depth)
    store.deques[subject] = d
    return d


cdef inline int _append(CacheStore store, object d, object frame) except -1:
    """Keep ``frame`` in ``d``, the deque of its subject in ``store``, within bounds."""
    if Py_SIZE(d) == store.depth:  # a deque's length
        store.nbytes -= len(d[0])  # the append below pushes it out
        store.evicted += 1
    _deque_append(d, frame)
    store.nbytes += PyBytes_GET_SIZE(frame) if type(frame) is bytes else len(frame)
    if store.nbytes > store.max_bytes:
        store.shrink()
    return 0


cdef inline int _keep(CacheStore store, object subject, object frame) except -1:
    """``store.add(subject, frame)``, called from C by the Sender."""
    return _append(store, _deque_of(store, subject), frame)


cdef inline int _keep_entry(CacheStore store, Entry entry, object subject,
                            object frame) except -1:
    """``_keep`` for a subject whose Entry the Sender holds: no dict lookup while the
    Entry's deque is still the store's."""
    if entry.kept_gen != store.gen or entry.kept is None:
        entry.kept = _deque_of(store, subject)
        entry.kept_gen = store.gen
    return _append(store, entry.kept, frame)


cdef class Sender:
    """The send side of the hot path (see ``Sender`` in aoz/_mesh/_hotpath.py).

    The common case of ``publish`` (a ``bytes`` payload with the default codec, on a
    subject published before, in a frame under the zero-copy threshold) is built in one
    allocation and sent here; every other case goes through the builder, as in the
    pure-Python twin. The sequence number lives in the builder's entry either way, so
    both ways number one subject's messages as one stream.
    """

    cdef object _builder
    cdef dict _entries
    cdef bint _sequenced
    cdef public object pub
    cdef public CacheStore store
    cdef public object unsent
    cdef unsigned long long _messages
    cdef unsigned long long _bytes
    cdef unsigned int _since_yield
    cdef public unsigned long thread  # the node's loop thread (see the pure twin)
    cdef object _handle_pub  # the pub whose libzmq socket _handle is
    cdef void* _handle

    def __init__(self, builder):
        self._builder = builder
        self._entries = builder.entries
        self._sequenced = builder.publisher is not None
        self.pub = None
        self.store = None
        self.unsent = None
        self._messages = 0
        self._bytes = 0
        self._since_yield = 0
        self.thread = 0

    @property
    def messages_out(self):
        return self._messages

    @messages_out.setter
    def messages_out(self, value):
        self._messages = value

    @property
    def bytes_out(self):
        return self._bytes

    @bytes_out.setter
    def bytes_out(self, value):
        self._bytes = value

    cpdef publish(self, subject, data, codec):
        cdef Py_ssize_t total
        cdef PyObject* found
        cdef Entry entry
        cdef object out
        if codec is None and type(data) is bytes and self.pub is not None:
            found = PyDict_GetItem(self._entries, subject)
            if found != NULL and type(<object>found) is Entry:
                entry = <Entry>found
                total = (PyBytes_GET_SIZE(entry.prefix) + PyBytes_GET_SIZE(<bytes>data)
                         + (4 if self._sequenced else 0))
                if total < _COPY_THRESHOLD:
                    if self.store is None:  # no frame to keep: built in a libzmq message
                        out = self._direct(entry, <bytes>data, total)
                        if out is None:
                            return self.due()
                        if out is not False:  # numbered, not sent: as send() refuses
                            self.unsent = out
                            raise _would_block()
                    frame = self._frame(entry, <bytes>data)
                    self.send(frame)
                    if self.store is not None:
                        _keep_entry(self.store, entry, subject, frame)
                    return self.due()
        frame = self._builder.publish(subject, data, codec)
        self.send(frame)
        if self.store is not None:
            _keep(self.store, subject, frame)
        return self.due()

    def put(self, subject, frame):
        """Send and keep a publish frame built otherwise (see the pure twin)."""
        self.send(frame)
        if self.store is not None:
            _keep(self.store, subject, frame)
        return self.due()

    def keep(self, subject, frame):
        """Keep a frame numbered for good, not sent yet (see the pure twin)."""
        if self.store is not None:
            _keep(self.store, subject, frame)

    cdef void* _live_handle(self) except? NULL:
        """The libzmq socket of ``pub`` for a direct send, or NULL (see _handle_of)."""
        cdef object pub = self.pub
        if not _direct or pub is None:
            return NULL
        if pub is not self._handle_pub:
            self._handle = _handle_of(pub)
            self._handle_pub = pub
        if self._handle == NULL or PyObject_GetAttr(pub, _CLOSED):
            return NULL
        return self._handle

    cdef object _direct(self, Entry entry, bytes payload, Py_ssize_t total):
        """Build the publish frame of ``payload`` in a libzmq message and send it: None
        when sent (numbered, counted), the frame as bytes when ZeroMQ would block
        (numbered, not sent), False when libzmq cannot be called directly or fails
        otherwise (nothing numbered: the caller goes through pyzmq)."""
        cdef void* handle = self._live_handle()
        cdef aoz_zmq_msg_t msg
        cdef char* out
        cdef bytes prefix = entry.prefix
        cdef Py_ssize_t plen = PyBytes_GET_SIZE(prefix)
        cdef uint32_t seq
        cdef int err
        if handle == NULL or _z_init_size(&msg, <size_t>total) != 0:
            return False
        out = <char*>_z_data(&msg)
        memcpy(out, PyBytes_AS_STRING(prefix), plen)
        if self._sequenced:
            seq = <uint32_t>((entry.seq + 1) & 0xFFFFFFFF)
            out[plen] = <char>(seq & 0xFF)
            out[plen + 1] = <char>((seq >> 8) & 0xFF)
            out[plen + 2] = <char>((seq >> 16) & 0xFF)
            out[plen + 3] = <char>((seq >> 24) & 0xFF)
            plen += 4
        memcpy(out + plen, PyBytes_AS_STRING(payload), PyBytes_GET_SIZE(payload))
        if _z_send(&msg, handle, _NOBLOCK) >= 0:
            if self._sequenced:
                entry.seq += 1
            self._messages += 1
            self._bytes += total
            return None
        err = _z_errno()
        if err != _EAGAIN:
            _z_close(&msg)
            return False
        if self._sequenced:
            entry.seq += 1
        frame = PyBytes_FromStringAndSize(out, total)
        _z_close(&msg)
        return frame

    def build(self, subject, data, codec):
        """The next publish frame of ``subject`` (numbered), not sent."""
        cdef PyObject* found
        if codec is None and type(data) is bytes:
            found = PyDict_GetItem(self._entries, subject)
            if found != NULL and type(<object>found) is Entry:
                return self._frame(<Entry>found, <bytes>data)
        return self._builder.publish(subject, data, codec)

    def frames(self, subject, items, codec):
        """The publish frames of every item (see ``_SenderPy.frames``)."""
        cdef list out
        cdef PyObject* found = PyDict_GetItem(self._entries, subject)
        if codec is not None or found == NULL or type(<object>found) is not Entry:
            out = self._builder.publish_many(subject, items, codec)
        else:
            out = self._frames(<Entry>found, subject, items)
        if self.store is not None:
            for frame in out:
                _keep(self.store, subject, frame)
        return out

    cdef list _frames(self, Entry entry, subject, items):
        cdef list out = []
        cdef unsigned long long first
        first = entry.seq
        try:
            for data in items:
                if type(data) is bytes:
                    out.append(self._frame(entry, <bytes>data))
                else:
                    out.append(self._builder.publish(subject, data, None))
        except BaseException:
            entry.seq = first  # nothing was numbered
            raise
        return out

    cdef bytes _frame(self, Entry entry, bytes payload):
        """The publish frame of a bytes payload (numbered when sequencing)."""
        cdef bytes prefix = entry.prefix
        cdef Py_ssize_t plen = PyBytes_GET_SIZE(prefix)
        cdef Py_ssize_t dlen = PyBytes_GET_SIZE(payload)
        cdef bytes frame = PyBytes_FromStringAndSize(
            NULL, plen + dlen + (4 if self._sequenced else 0))
        cdef char* out = PyBytes_AS_STRING(frame)
        cdef uint32_t seq
        memcpy(out, PyBytes_AS_STRING(prefix), plen)
        if self._sequenced:
            entry.seq += 1
            seq = <uint32_t>(entry.seq & 0xFFFFFFFF)
            out[plen] = <char>(seq & 0xFF)
            out[plen + 1] = <char>((seq >> 8) & 0xFF)
            out[plen + 2] = <char>((seq >> 16) & 0xFF)
            out[plen + 3] = <char>((seq >> 24) & 0xFF)
            plen += 4
        memcpy(out + plen, PyBytes_AS_STRING(payload), dlen)
        return frame

    def send_batch(self, frames, Py_ssize_t start=0):
        """Send ``frames[start:]`` until ZeroMQ would block (see the pure twin)."""
        pub = self.pub
        if pub is None:
            raise TransportError("the data publisher is not open")
        cdef Py_ssize_t i = start
        cdef Py_ssize_t n = len(frames)
        cdef unsigned long long nbytes = 0
        try:
            while i < n:
                frame = frames[i]
                _send(pub, frame, _NOBLOCK)
                nbytes += len(frame)
                i += 1
        except _Again:
            pass
        except _ZMQError as exc:
            raise translate(exc, "publish failed") from exc
        finally:
            self._messages += i - start
            self._bytes += nbytes
        return i

    cpdef bint due(self):
        """Count one publish; True when the caller should yield to the loop."""
        self._since_yield += 1
        if self._since_yield >= _YIELD_EVERY:
            self._since_yield = 0
            return True
        return False

    cpdef send(self, frame):
        # any bytes-like frame, as the twin takes (publish_frames passes the caller's)
        pub = self.pub
        if pub is None:
            raise TransportError("the data publisher is not open")
        cdef Py_ssize_t n = len(frame)
        cdef void* handle
        cdef aoz_zmq_msg_t msg
        if n < _COPY_THRESHOLD and type(frame) is bytes:
            handle = self._live_handle()
            if handle != NULL and _z_init_size(&msg, <size_t>n) == 0:
                memcpy(_z_data(&msg), PyBytes_AS_STRING(<bytes>frame), n)
                if _z_send(&msg, handle, _NOBLOCK) >= 0:
                    self._messages += 1
                    self._bytes += n
                    return
                n = _z_errno()
                _z_close(&msg)
                if n == _EAGAIN:
                    self.unsent = frame
                    raise _would_block()
                n = len(frame)  # any other error: pyzmq's to raise
        try:
            if n < _COPY_THRESHOLD:
                _send(pub, frame, _NOBLOCK)
            else:
                pub.send(frame, _NOBLOCK, copy=False)
        except _Again:
            self.unsent = frame
            raise _would_block() from None
        except _ZMQError as exc:
            raise translate(exc, "publish failed") from exc
        self._messages += 1
        self._bytes += n


cdef object _would_block():
    return WouldBlock(
        "a subscriber's queue at this publisher is full; `await node.publish(...)` "
        "waits for room"
    )


# ------------------------------------------------------------------ Node.publish
cdef object _SENDER = "_sender"
cdef object _SEND = "_send"
cdef object _checkpoint = anyio.lowlevel.checkpoint


def node_publish(self, subject, data=b"", *, codec=None, block=None, headers=None):
    """``Node.publish`` (aoz._mesh.node puts it there; the pure twin keeps the Python one,
    whose text it also takes): the same steps, with no Python frame between the caller
    and the Sender in the common case (no headers, no ``block=True``)."""
    cdef Sender sender = <Sender?>PyObject_GetAttr(self, _SENDER)
    if sender.thread != PyThread_get_thread_ident():  # not open, or not the loop's thread
        self._check_open()
        return self._publish_later(subject, data, codec, block, headers)
    if headers is None and not block:
        try:
            due = sender.publish(subject, data, codec)
        except WouldBlock:  # a blocking node's full subscriber: wait, or drop
            wait = PyObject_GetAttr(self, _SEND).refused(subject, block)
        else:
            return _checkpoint() if due else DONE  # the loop's turn, now and then
    else:
        wait = PyObject_GetAttr(self, _SEND).publish(subject, data, codec, block, headers)
    return DONE if wait is None else wait  # room to wait for, or the loop's turn


cdef object _REPLY_KIND = Kind.REPLY
cdef object _Mailbox = Mailbox
cdef object _heappush = heapq.heappush
cdef object _heappop = heapq.heappop
cdef object _heapify = heapq.heapify
cdef Py_ssize_t _HEAP_SLACK = CONSTANTS["HEAP_SLACK"]  # aoz._mesh._hotpath
cdef Py_ssize_t _PREFIX_LEN = _HANDLE_LEN - 16  # _INBOX.<uuid>. (the serial: 16 hex digits)
cdef uint64_t _MAX_SERIAL = 0xFFFFFFFFFFFFFFFF
cdef const char* _HEX = b"0123456789abcdef"


cdef inline int _hex_digit(uint8_t c) noexcept:
    """The value of a lowercase hex digit (what parse_handle accepts), -1 otherwise."""
    if 48 <= c <= 57:
        return c - 48
    if 97 <= c <= 102:
        return c - 87
    return -1


cdef class Inbox:
    """The request side of the hot path (see ``Inbox`` in aoz/_mesh/_hotpath.py): the table of
    open requests, their handles, the deadline heap of first-reply requests, and the
    reply hook. A handle is written and a reply's serial read without the interpreter;
    a reply to a waiting future costs one lookup, one Message and ``set_result``."""

    cdef public str uuid
    cdef public bytes filter
    cdef public bytes prefix
    cdef public unsigned long long replies_dropped
    cdef public uint64_t _next  # the next serial (public for the twin test)
    cdef dict _entries
    cdef dict _deadlines
    cdef list _heap
    cdef object _responder

    def __init__(self, node_uuid, responder):
        self.uuid = node_uuid
        self.filter = inbox_subject(node_uuid)
        self.prefix = self.filter + b"."
        if PyBytes_GET_SIZE(self.prefix) != _PREFIX_LEN:
            raise ValueError("inbox prefix of an unexpected length")
        self._next = 1
        self._entries = {}
        self._deadlines = {}
        self._heap = []
        self._responder = responder
        self.replies_dropped = 0

    def __len__(self):
        return len(self._entries)

    cpdef tuple open(self, waiter, deadline):
        """Register ``waiter`` under a new serial; returns ``(serial, reply_handle)``."""
        cdef uint64_t serial = self._next
        cdef bytes handle = PyBytes_FromStringAndSize(NULL, _HANDLE_LEN)
        cdef char* out = PyBytes_AS_STRING(handle)
        cdef int i
        self._next = 1 if serial >= _MAX_SERIAL else serial + 1
        key = serial
        self._entries[key] = waiter
        self._deadlines[key] = deadline
        memcpy(out, PyBytes_AS_STRING(self.prefix), _PREFIX_LEN)
        for i in range(16):
            out[_HANDLE_LEN - 1 - i] = _HEX[(serial >> (4 * i)) & 0xF]
        return key, handle

    def open_timed(self, waiter, deadline, subject, timeout):
        """``open`` a request whose future fails at ``deadline`` (see the pure twin)."""
        cdef tuple opened = self.open(waiter, deadline)
        cdef list heap = self._heap
        if len(heap) >= 2 * len(self._entries) + _HEAP_SLACK:
            heap[:] = [e for e in heap if not (<tuple>e)[2].done()]
            _heapify(heap)
        _heappush(heap, (deadline, opened[0], waiter, subject, timeout))
        return opened

    def due(self, now):
        """Pop the timed requests whose deadline is ``now`` or before (see the twin)."""
        cdef list heap = self._heap
        cdef list out = []
        cdef tuple e
        while heap and (<tuple>heap[0])[0] <= now:
            e = <tuple>_heappop(heap)
            waiter = e[2]
            if not waiter.done():
                out.append((waiter, e[3], e[4]))
        return out

    def next_deadline(self):
        return (<tuple>self._heap[0])[0] if self._heap else None

    @property
    def deadlines(self):
        return len(self._heap)

    def serial_of(self, subject):
        """The serial named by a reply subject of this inbox; DecodeError otherwise."""
        if len(subject) != _HANDLE_LEN or not subject.startswith(self.prefix):
            raise DecodeError("reply subject is not a handle of this inbox", what="reply handle")
        return parse_handle(subject)[1]

    def lookup(self, serial):
        return self._entries.get(serial)

    cpdef close(self, serial):
        self._deadlines.pop(serial, None)
        return self._entries.pop(serial, None)

    def expire(self, now):
        """Remove and return the entries whose deadline is before ``now``."""
        gone = [s for s, d in self._deadlines.items() if d < now]
        out = []
        for s in gone:
            w = self.close(s)
            if w is not None:
                out.append(w)
        return out

    def drain(self):
        """Remove and return every entry (the node is closing)."""
        out = list(self._entries.values())
        self._entries.clear()
        self._deadlines.clear()
        self._heap.clear()
        return out

    def on_reply(self, bytes subject not None, bytes frame not None, Py_ssize_t start, now):
        """A reply frame arrived on ``subject`` (a reply handle of ours, or not)."""
        cdef const uint8_t* s = <const uint8_t*>PyBytes_AS_STRING(subject)
        cdef uint64_t serial = 0
        cdef int i, d
        cdef PyObject* found
        if (PyBytes_GET_SIZE(subject) != _HANDLE_LEN
                or memcmp(s, PyBytes_AS_STRING(self.prefix), _PREFIX_LEN) != 0):
            self.replies_dropped += 1  # someone else's reply or garbage
            return
        for i in range(_PREFIX_LEN, _HANDLE_LEN):
            d = _hex_digit(s[i])
            if d < 0:
                self.replies_dropped += 1
                return
            serial = (serial << 4) | <uint64_t>d
        if serial == 0:
            self.replies_dropped += 1
            return
        key = serial
        found = PyDict_GetItem(self._entries, key)
        if found == NULL:
            self.replies_dropped += 1
            return
        waiter = <object>found
        msg = _Message(frame, _HANDLE_LEN, start,
                       _data_start(<const uint8_t*>PyBytes_AS_STRING(frame),
                                   PyBytes_GET_SIZE(frame), start),
                       _REPLY_KIND, None, now, self._responder)
        if isinstance(waiter, _Mailbox):
            waiter.push(msg)
        else:
            self.close(key)
            if not waiter.done():
                waiter.set_result(msg)
