# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""The data plane's hot path, compiled.

Twins of ``drain_sub`` and ``Sender`` in ``aoz/_hotpath.py`` (which states the
contract both keep), with the same behaviour (tests/hotpath runs both on the same input and compares
everything they leave behind; `make test` runs the suite on each). What C buys here: the
subject search is a ``memchr`` on the frame's buffer instead of two method calls, the
sequence header is read without ``struct``, a publish frame is built in one allocation,
and the per-frame bookkeeping runs without the interpreter. ZeroMQ is still called
through pyzmq (the socket's ``recv``, the backend's ``send``), so there is no second
binding of libzmq to keep in step with pyzmq's.

``aoz.hotpath`` uses this module only when its ``ABI`` and ``CONSTANTS`` match the pure
twin's.
"""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.dict cimport PyDict_GetItem
from cpython.ref cimport PyObject
from cpython.unicode cimport PyUnicode_DecodeASCII
from libc.stdint cimport uint8_t, uint32_t, uint64_t
from libc.string cimport memchr, memcpy

import time

import zmq

from ._errmap import translate
from .errors import TransportError, WouldBlock
from .message import Message
from .protocol.frames import Kind

ABI = 9
BATCH = 1024
#: the protocol's numbers built in below; aoz.hotpath checks them against aoz._hotpath's
CONSTANTS = {"BATCH": BATCH, "MAX_SUBJECT": 256, "HEADER_LEN": 13, "AOZ_CODEC_IDS": 4,
             "SEQUENCE_FLAG": 0x04, "HEADERS_FLAG": 0x08, "COPY_THRESHOLD": 65536, "YIELD_EVERY": 256, "HANDLE_LEN": 60}

cdef Py_ssize_t _BATCH = BATCH
cdef int _NOBLOCK = zmq.NOBLOCK
cdef object _Again = zmq.Again
cdef object _ZMQError = zmq.ZMQError
cdef object _Message = Message
cdef object _PUBLISH = Kind.PUBLISH
cdef object _REQUEST_KIND = Kind.REQUEST
cdef int _PUBLISH_BYTE = 1  # the type bytes of SPEC §1
cdef int _REQUEST = 2
cdef int _REPLY = 3
cdef object _clock = time.time
cdef object _send = getattr(zmq.backend, "Socket", zmq.Socket).send
cdef Py_ssize_t _MAX_SUBJECT = CONSTANTS["MAX_SUBJECT"]  # aoz.protocol.subjects
cdef Py_ssize_t _HEADER_LEN = CONSTANTS["HEADER_LEN"]  # aoz.protocol.sequence
cdef uint8_t _AOZ_CODEC_IDS = CONSTANTS["AOZ_CODEC_IDS"]  # aoz.protocol.codecs
cdef uint8_t _FLAG = CONSTANTS["SEQUENCE_FLAG"]  # aoz.protocol.sequence
cdef uint8_t _HEADERS = CONSTANTS["HEADERS_FLAG"]  # aoz.protocol.headers
cdef Py_ssize_t _COPY_THRESHOLD = CONSTANTS["COPY_THRESHOLD"]  # aoz._hotpath
cdef unsigned int _YIELD_EVERY = CONSTANTS["YIELD_EVERY"]  # aoz._hotpath
cdef Py_ssize_t _HANDLE_LEN = CONSTANTS["HANDLE_LEN"]  # aoz.protocol.frames


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
    """aoz.protocol.headers.data_start: after the first byte, the sequence header and
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
    """Drain up to ``BATCH`` frames of the data SUB (see ``aoz._hotpath.drain_sub``)."""
    recv = sock.recv
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
            frame = recv(_NOBLOCK)
            n += 1
            flen = PyBytes_GET_SIZE(frame)
            nbytes += flen
            buf = <const uint8_t*>PyBytes_AS_STRING(frame)
            kind = _frame_kind(buf, flen, &nul)
            if kind == _REPLY:  # a reply to one of our requests (or not: on_reply says)
                on_reply(PyBytes_FromStringAndSize(<const char*>buf, nul), frame, nul + 3, now)
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
                    if found != NULL:
                        st = <list>found
                        if <uint64_t>st[0] == pid and <uint64_t>st[1] + 1 == seq:
                            st[1] = seq
                        else:
                            plane.sequence(sb, pid, seq, msg, subs)
                    else:
                        plane.sequence(sb, pid, seq, msg, subs)
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
    ``aoz.protocol.builder.Entry``, with fields the compiled Sender reads directly."""

    cdef public bytes header
    cdef public bytes prefix
    cdef public unsigned long long seq

    def __init__(self, bytes header, bytes prefix):
        self.header = header
        self.prefix = prefix
        self.seq = 0


cdef class Sender:
    """The send side of the hot path (see ``Sender`` in aoz/_hotpath.py).

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
    cdef unsigned long long _messages
    cdef unsigned long long _bytes
    cdef unsigned int _since_yield

    def __init__(self, builder):
        self._builder = builder
        self._entries = builder.entries
        self._sequenced = builder.publisher is not None
        self.pub = None
        self._messages = 0
        self._bytes = 0
        self._since_yield = 0

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

    def publish(self, subject, data, codec):
        cdef Py_ssize_t total
        cdef PyObject* found
        cdef Entry entry
        if codec is None and type(data) is bytes and self.pub is not None:
            found = PyDict_GetItem(self._entries, subject)
            if found != NULL and type(<object>found) is Entry:
                entry = <Entry>found
                total = (PyBytes_GET_SIZE(entry.prefix) + PyBytes_GET_SIZE(<bytes>data)
                         + (4 if self._sequenced else 0))
                if total < _COPY_THRESHOLD:
                    self.send(self._frame(entry, <bytes>data))
                    return self.due()
        self.send(self._builder.publish(subject, data, codec))
        return self.due()

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
        cdef list out = []
        cdef PyObject* found = PyDict_GetItem(self._entries, subject)
        cdef Entry entry
        cdef unsigned long long first
        if codec is not None or found == NULL or type(<object>found) is not Entry:
            return self._builder.publish_many(subject, items, codec)
        entry = <Entry>found
        first = entry.seq
        try:
            for data in items:
                if type(data) is bytes:
                    out.append(self._frame(entry, <bytes>data))
                else:
                    out.append(self._builder.publish(subject, data, codec))
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
        try:
            if n < _COPY_THRESHOLD:
                _send(pub, frame, _NOBLOCK)
            else:
                pub.send(frame, _NOBLOCK, copy=False)
        except _Again:
            raise WouldBlock(
                "a subscriber's queue at this publisher is full; `await node.publish(...)` "
                "waits for room"
            ) from None
        except _ZMQError as exc:
            raise translate(exc, "publish failed") from exc
        self._messages += 1
        self._bytes += n
