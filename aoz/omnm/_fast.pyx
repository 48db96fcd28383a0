# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""The omnm codec compiled: the twin of ``aoz/omnm/_codec.py``, the same bytes and values.

Theory of operation. ``decode`` walks the buffer once in C and builds the same
:class:`~aoz.omnm.Message` the pure codec builds (names and fids come from a small cache
keyed by the field header's bytes, values are made with the C API, each ``Field`` and
the ``Message`` are allocated in one step and their slots filled). ``encode`` writes every field into one growing C buffer, then makes one
``bytes``; ASCII names and texts are copied straight out of the ``str``, and Message,
Time and Price fields are read from their slots. ``message_init`` is ``Message.__init__``
for a list of ready Fields, without a Python frame.

Both take a fast path for well-formed input of the common types and hand everything
else to the pure twin, whole: a malformed payload is decoded again by ``_codec.decode``,
which raises its :class:`~aoz.DecodeError`; a value the fast path does not take (a
wrong type, out of range, a subclass, a ``VECTOR_MSG``, a Mapping that is not a
dict...) is encoded by ``_codec.encode``, which encodes it or raises its
:class:`~aoz.EncodeError`. So the errors (and their messages) are the pure twin's by
construction, and what the twin tests check is that the fast path never accepts what
the pure one refuses and never writes or reads anything else. Vector values are read
and written by the pure twin's own per-type functions (``READER_BY_ID``,
``WRITER_BY_ID``), and a dict value that is not a plain str, float, int, bool, bytes,
Time, datetime, Price, dict or Message gets its type from ``field_from_value``: one set
of rules for both.

``aoz.omnm._backend`` uses this module only when its ``ABI`` and ``CONSTANTS`` match.
"""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.bytearray cimport PyByteArray_AS_STRING, PyByteArray_GET_SIZE
from cpython.datetime cimport (
    PyDateTime_DATE_GET_HOUR,
    PyDateTime_DATE_GET_MICROSECOND,
    PyDateTime_DATE_GET_MINUTE,
    PyDateTime_DATE_GET_SECOND,
    PyDateTime_GET_DAY,
    PyDateTime_GET_MONTH,
    PyDateTime_GET_YEAR,
    datetime,
    datetime_tzinfo,
    import_datetime,
)
from cpython.dict cimport PyDict_Next
from cpython.list cimport PyList_Append
from cpython.object cimport PyTypeObject
from cpython.ref cimport Py_DECREF, Py_INCREF, PyObject
from cpython.tuple cimport PyTuple_SET_ITEM
from libc.stdint cimport int8_t, int16_t, int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t
from libc.stdlib cimport free, malloc, realloc
from libc.string cimport memchr, memcmp, memcpy, memset

import datetime as _dt
import sys

from ..errors import DecodeError
from ._codec import MAX_DEPTH as _MAX_DEPTH_PY
from ._codec import READER_BY_ID, WRITER_BY_ID
from ._codec import decode as _pure_decode
from ._codec import encode as _pure_encode
from ._model import PURE_MESSAGE_INIT, Field, FieldType, Message, Price, Time, field_from_value

import_datetime()

cdef extern from "Python.h":
    double PyFloat_Unpack4(const char* p, int le) except? -1.0
    double PyFloat_Unpack8(const char* p, int le) except? -1.0
    int PyFloat_Pack4(double x, char* p, int le) except -1
    int PyFloat_Pack8(double x, char* p, int le) except -1
    object PyUnicode_DecodeUTF8(const char* s, Py_ssize_t size, const char* errors)
    object PyUnicode_AsEncodedString(object u, const char* encoding, const char* errors)
    object PyUnicode_FromOrdinal(int ordinal)
    bint PyUnicode_IS_COMPACT_ASCII(object u)
    void* PyUnicode_DATA(object u)
    Py_ssize_t PyUnicode_GET_LENGTH(object u)
    unsigned int PyUnicode_READ_CHAR(object u, Py_ssize_t i)
    PyObject* PyType_GenericAlloc(PyTypeObject* t, Py_ssize_t n) except NULL
    PyObject* PyList_GET_ITEM(object l, Py_ssize_t i)
    Py_ssize_t PyList_GET_SIZE(object l)
    PyObject* PyTuple_GET_ITEM(object t, Py_ssize_t i)
    PyTypeObject* Py_TYPE(PyObject* o)
    object PyLong_FromLongLong(long long v)
    object PyLong_FromUnsignedLongLong(unsigned long long v)
    long long PyLong_AsLongLongAndOverflow(object v, int* overflow) except? -1
    double PyLong_AsDouble(object v) except? -1.0
    object PyFloat_FromDouble(double v)
    double PyFloat_AS_DOUBLE(object v)

#: bump with any change to the functions' contract (aoz.omnm._backend checks it)
ABI = 1
#: the format's numbers built in below; aoz.omnm._backend checks them against its own
CONSTANTS = {"MAX_DEPTH": 32, "U32_MAX": 0xFFFF_FFFF, "TYPES": tuple(sorted({
    "MSG": 1, "OPAQUE": 7, "STRING": 8, "BOOL": 9, "CHAR": 10, "I8": 14, "U8": 15,
    "I16": 16, "U16": 17, "I32": 18, "U32": 19, "I64": 20, "U64": 21, "F32": 24, "F64": 25,
    "TIME": 26, "PRICE": 27, "VECTOR_MSG": 47}.items()))}

cdef int MAX_DEPTH = CONSTANTS["MAX_DEPTH"]
cdef long long U32M = CONSTANTS["U32_MAX"]  # a C constant: the literal would be a Python int
cdef object _Field = Field
cdef PyTypeObject* _FieldType = <PyTypeObject*>Field
cdef object _Message = Message
cdef object _Time = Time
cdef object _Price = Price
cdef object _FieldTypeCls = FieldType
cdef object _tuple_new = tuple.__new__
# Field values are allocated directly (as tuple.__new__ does) where tuples keep no hash
# cache; elsewhere through tuple.__new__.
cdef bint _DIRECT_TUPLES = sys.version_info < (3, 14)
cdef object _field_from_value = field_from_value
cdef object _readers = READER_BY_ID
cdef object _writers = WRITER_BY_ID
cdef object _UTC = _dt.UTC
cdef object _TRUE = True
cdef object _FALSE = False

# type byte -> FieldType member (NULL: not an omnm type)
cdef PyObject* _BY_ID[256]
memset(_BY_ID, 0, sizeof(_BY_ID))
cdef list _KEEP = []  # owns the members _BY_ID points to
for _t in FieldType:
    _KEEP.append(_t)
    _BY_ID[<int>_t.value] = <PyObject*>_t


# the type bytes of CONSTANTS["TYPES"]
cdef enum:
    T_MSG = 1
    T_OPAQUE = 7
    T_STRING = 8
    T_BOOL = 9
    T_CHAR = 10
    T_I8 = 14
    T_U8 = 15
    T_I16 = 16
    T_U16 = 17
    T_I32 = 18
    T_U32 = 19
    T_I64 = 20
    T_U64 = 21
    T_F32 = 24
    T_F64 = 25
    T_TIME = 26
    T_PRICE = 27
    T_VECTOR_MSG = 47

assert _MAX_DEPTH_PY == MAX_DEPTH


class _Fallback(Exception):
    """The fast path does not take this input: the pure twin decides."""


cdef object _FALLBACK = _Fallback


# ----------------------------------------------------------------------------- helpers
cdef inline uint32_t _u32(const uint8_t* p) noexcept:
    return (<uint32_t>p[0] | (<uint32_t>p[1] << 8) | (<uint32_t>p[2] << 16)
            | (<uint32_t>p[3] << 24))


cdef inline uint64_t _u64(const uint8_t* p) noexcept:
    return (<uint64_t>_u32(p)) | ((<uint64_t>_u32(p + 4)) << 32)


cdef inline object _field(object name, object fid, object ft, object value):
    """Field(name, fid, ft, value), allocated in one step."""
    cdef PyObject* raw
    cdef object f
    if not _DIRECT_TUPLES:
        return _tuple_new(_Field, (name, fid, ft, value))
    raw = PyType_GenericAlloc(_FieldType, 4)
    f = <object>raw
    Py_DECREF(f)  # <object> took a second reference: f owns the only one
    Py_INCREF(name)
    PyTuple_SET_ITEM(f, 0, name)
    Py_INCREF(fid)
    PyTuple_SET_ITEM(f, 1, fid)
    Py_INCREF(ft)
    PyTuple_SET_ITEM(f, 2, ft)
    Py_INCREF(value)
    PyTuple_SET_ITEM(f, 3, value)
    return f


# Field headers (type, fid, name) repeat message after message: a direct-mapped cache of
# the name's text and the fid's int, keyed by the header's bytes.
cdef enum:
    HEAD_SLOTS = 1024
cdef PyObject* _head_raw[HEAD_SLOTS]
cdef PyObject* _head_name[HEAD_SLOTS]
cdef PyObject* _head_fid[HEAD_SLOTS]
memset(_head_raw, 0, sizeof(_head_raw))
memset(_head_name, 0, sizeof(_head_name))
memset(_head_fid, 0, sizeof(_head_fid))


cdef Py_ssize_t _head(const uint8_t* p, Py_ssize_t n) except -1:
    """The cache slot holding the name (None when empty) and fid of the field header
    ``p[:n]`` (type byte, fid, name; no NUL)."""
    # hash: the type, fid and length, and up to 8 bytes from each end of the name (the
    # memcmp below decides; a collision only costs a miss)
    cdef uint64_t a = 0, z = 0
    cdef Py_ssize_t k = n - 3 if n - 3 < 8 else 8
    memcpy(&a, p + 3, k)
    memcpy(&z, p + n - k, k)
    cdef uint64_t h = ((<uint64_t>p[0] | (<uint64_t>p[1] << 8) | (<uint64_t>p[2] << 16)
                        | (<uint64_t>n << 24)) * 0x9E3779B97F4A7C15u)
    h = (h ^ a) * 0x9E3779B97F4A7C15u
    h = (h ^ z) * 0x9E3779B97F4A7C15u
    cdef uint32_t slot = <uint32_t>(h >> 40) & (HEAD_SLOTS - 1)
    cdef PyObject* raw = _head_raw[slot]
    if (raw != NULL and PyBytes_GET_SIZE(<object>raw) == n
            and memcmp(PyBytes_AS_STRING(<object>raw), p, n) == 0):
        return slot
    cdef object key = PyBytes_FromStringAndSize(<const char*>p, n)
    cdef object text = (PyUnicode_DecodeUTF8(<const char*>p + 3, n - 3, "surrogateescape")
                        if n > 3 else None)
    cdef object number = <long>(p[1] | (<uint16_t>p[2] << 8))
    Py_INCREF(key)
    Py_INCREF(text)
    Py_INCREF(number)
    if raw != NULL:
        Py_DECREF(<object>raw)
        Py_DECREF(<object>_head_name[slot])
        Py_DECREF(<object>_head_fid[slot])
    _head_raw[slot] = <PyObject*>key
    _head_name[slot] = <PyObject*>text
    _head_fid[slot] = <PyObject*>number
    return slot


# A Message is made as Message._of makes it, without the call: allocated, and its two
# slots filled at their offsets.
cdef extern from "Python.h":
    ctypedef struct PyMemberDef:
        Py_ssize_t offset
    ctypedef struct PyMemberDescrObject:
        PyMemberDef* d_member

cdef PyTypeObject* _MessageType = <PyTypeObject*>Message


cdef Py_ssize_t _slot_offset(object cls, str name) except -1:
    d = cls.__dict__.get(name)
    if type(d).__name__ != "member_descriptor" or d.__objclass__ is not cls:
        raise ImportError(f"{cls.__qualname__}.{name} is not a slot")
    return (<PyMemberDescrObject*><PyObject*>d).d_member.offset


cdef Py_ssize_t _FIELDS_AT = _slot_offset(Message, "_fields")
cdef Py_ssize_t _INDEX_AT = _slot_offset(Message, "_index")
# Time and Price are msgspec Structs: their fields are slots too
cdef Py_ssize_t _SECONDS_AT = _slot_offset(Time, "seconds")
cdef Py_ssize_t _MICROS_AT = _slot_offset(Time, "microseconds")
cdef Py_ssize_t _PRECISION_AT = _slot_offset(Time, "precision")
cdef Py_ssize_t _HINTS_AT = _slot_offset(Time, "hints")
cdef Py_ssize_t _VALUE_AT = _slot_offset(Price, "value")
cdef Py_ssize_t _PRICE_HINTS_AT = _slot_offset(Price, "hints")


cdef inline object _slot(object o, Py_ssize_t at):
    """The value in the slot at ``at`` of ``o`` (an exact instance of the slot's class)."""
    cdef PyObject* v = (<PyObject**>(<char*>(<PyObject*>o) + at))[0]
    if v == NULL:  # an unset slot: the pure twin says what that is
        raise _FALLBACK
    return <object>v


cdef object _message(list fields):
    cdef PyObject* raw = PyType_GenericAlloc(_MessageType, 0)
    cdef object m = <object>raw
    Py_DECREF(m)  # <object> took a second reference: m owns the only one
    Py_INCREF(fields)
    (<PyObject**>(<char*>raw + _FIELDS_AT))[0] = <PyObject*>fields
    Py_INCREF(None)
    (<PyObject**>(<char*>raw + _INDEX_AT))[0] = <PyObject*>None
    return m


cdef object _pure_init = PURE_MESSAGE_INIT


cdef inline void _set_slot(PyObject* m, Py_ssize_t at, object value) noexcept:
    cdef PyObject** slot = <PyObject**>(<char*>m + at)
    cdef PyObject* old = slot[0]
    Py_INCREF(value)
    slot[0] = <PyObject*>value
    if old != NULL:
        Py_DECREF(<object>old)


def message_init(self, fields=None):
    """``Message.__init__`` for a list or tuple of Fields, without a Python frame; other
    arguments go to the pure ``Message.__init__``. (aoz.omnm._backend installs it.)"""
    cdef object tf = type(fields)
    cdef list lst
    cdef Py_ssize_t i
    if (tf is list or tf is tuple) and isinstance(self, _Message):
        lst = list(fields)
        for i in range(PyList_GET_SIZE(lst)):
            if <PyObject*>Py_TYPE(PyList_GET_ITEM(lst, i)) != <PyObject*>_FieldType:
                break
        else:
            _set_slot(<PyObject*>self, _FIELDS_AT, lst)
            _set_slot(<PyObject*>self, _INDEX_AT, None)
            return
    _pure_init(self, fields)


# ----------------------------------------------------------------------------- decoding
def decode(data):
    """Decode omnm bytes into a Message; raises DecodeError if malformed (see _codec)."""
    cdef bytes buf = data if type(data) is bytes else bytes(data)
    cdef const uint8_t* p = <const uint8_t*>PyBytes_AS_STRING(buf)
    try:
        return _decode(buf, p, 0, PyBytes_GET_SIZE(buf), 0)
    except (_Fallback, DecodeError):
        return _pure_decode(buf)


cdef object _decode(bytes data, const uint8_t* buf, Py_ssize_t pos, Py_ssize_t end,
                    int depth):
    if depth > MAX_DEPTH or end - pos < 3 or buf[pos] != 0x4F or buf[pos + 1] != 1:
        raise _FALLBACK
    pos += 3 + buf[pos + 2]
    if pos > end:
        raise _FALLBACK
    cdef list fields = []
    cdef uint8_t tb, b
    cdef PyObject* ftp
    cdef object ft, name, value, fid
    cdef const uint8_t* nul
    cdef Py_ssize_t start, nxt, nlen, slot
    cdef uint32_t n, nanos
    cdef int64_t seconds
    cdef int hints
    while pos < end:
        if end - pos < 4:
            raise _FALLBACK
        tb = buf[pos]
        ftp = _BY_ID[tb]
        if ftp == NULL:
            raise _FALLBACK
        ft = <object>ftp
        nul = <const uint8_t*>memchr(buf + pos + 3, 0, end - pos - 3)
        if nul == NULL:
            raise _FALLBACK
        nlen = nul - (buf + pos)
        slot = _head(buf + pos, nlen)
        name = <object>_head_name[slot]
        fid = <object>_head_fid[slot]
        pos += nlen + 1
        if tb == T_STRING:
            if end - pos < 4:
                raise _FALLBACK
            n = _u32(buf + pos)
            start = pos + 4
            if n == 0 or n > end - start or buf[start + n - 1] != 0:
                raise _FALLBACK
            nxt = start + n
            nul = <const uint8_t*>memchr(buf + start, 0, n)
            value = PyUnicode_DecodeUTF8(<const char*>buf + start, nul - (buf + start),
                                         "surrogateescape")
        elif tb == T_F64:
            nxt = pos + 8
            if nxt > end:
                raise _FALLBACK
            value = PyFloat_FromDouble(PyFloat_Unpack8(<const char*>buf + pos, 1))
        elif T_I8 <= tb <= T_U64:
            nxt = pos + (1 << ((tb - T_I8) >> 1))
            if nxt > end:
                raise _FALLBACK
            if tb == T_I8:
                value = <long>(<int8_t>buf[pos])
            elif tb == T_U8:
                value = <long>buf[pos]
            elif tb == T_I16:
                value = <long>(<int16_t>(buf[pos] | (<uint16_t>buf[pos + 1] << 8)))
            elif tb == T_U16:
                value = <long>(buf[pos] | (<uint16_t>buf[pos + 1] << 8))
            elif tb == T_I32:
                value = <long>(<int32_t>_u32(buf + pos))
            elif tb == T_U32:
                value = PyLong_FromLongLong(_u32(buf + pos))
            elif tb == T_I64:
                value = PyLong_FromLongLong(<int64_t>_u64(buf + pos))
            else:
                value = PyLong_FromUnsignedLongLong(_u64(buf + pos))
        elif tb == T_F32:
            nxt = pos + 4
            if nxt > end:
                raise _FALLBACK
            value = PyFloat_FromDouble(PyFloat_Unpack4(<const char*>buf + pos, 1))
        elif tb == T_TIME:
            nxt = pos + 32
            if nxt > end:
                raise _FALLBACK
            seconds = <int64_t>_u64(buf + pos)
            nanos = _u32(buf + pos + 8)
            if nanos >= 1000000000:
                raise _FALLBACK
            hints = buf[pos + 13]
            # OpenMAMA's reader (mamaDateTime_setWithHints) adds HAS_DATE past one day
            if (<uint64_t>seconds & 0xFFFFFFFFu) > 86400:
                hints |= 1
            value = _Time(seconds, nanos // 1000, buf[pos + 12], hints)
        elif tb == T_PRICE:
            nxt = pos + 16
            if nxt > end:
                raise _FALLBACK
            value = _Price(PyFloat_Unpack8(<const char*>buf + pos, 1), buf[pos + 8])
        elif tb == T_BOOL or tb == T_CHAR:
            nxt = pos + 1
            if nxt > end:
                raise _FALLBACK
            b = buf[pos]
            if tb == T_CHAR:
                value = PyUnicode_FromOrdinal(b)
            elif b == 1:
                value = _TRUE
            elif b == 0:
                value = _FALSE
            else:
                value = <long>(<int8_t>b)
        elif tb == T_OPAQUE or tb == T_MSG:
            if end - pos < 4:
                raise _FALLBACK
            n = _u32(buf + pos)
            start = pos + 4
            if n > end - start:
                raise _FALLBACK
            nxt = start + n
            if tb == T_OPAQUE:
                value = PyBytes_FromStringAndSize(<const char*>buf + start, n)
            else:
                value = _decode(data, buf, start, nxt, depth + 1)
        else:  # vectors: the pure twin's readers (they raise DecodeError when malformed)
            value, nxt = _readers[tb](data, pos, end, depth, ft)
        PyList_Append(fields, _field(name, fid, ft, value))
        pos = nxt
    return _message(fields)


# ----------------------------------------------------------------------------- encoding
cdef struct Buf:
    char* p
    Py_ssize_t n
    Py_ssize_t cap
    bint heap  # p was malloc'ed (else it is the caller's stack buffer)


cdef int _grow(Buf* b, Py_ssize_t more) except -1:
    cdef Py_ssize_t cap = b.cap * 2
    while cap < b.n + more:
        cap *= 2
    cdef char* p
    if b.heap:
        p = <char*>realloc(b.p, cap)
    else:  # leaving the caller's stack buffer
        p = <char*>malloc(cap)
        if p != NULL:
            memcpy(p, b.p, b.n)
    if p == NULL:
        raise MemoryError()
    b.p = p
    b.cap = cap
    b.heap = True
    return 0


cdef inline char* _room(Buf* b, Py_ssize_t more) except NULL:
    """Room for ``more`` bytes at the end; the caller fills them and adds to b.n."""
    if b.n + more > b.cap:
        _grow(b, more)
    return b.p + b.n


cdef inline void _put_u32(char* p, uint32_t v) noexcept:
    p[0] = <char>(v & 0xFF)
    p[1] = <char>((v >> 8) & 0xFF)
    p[2] = <char>((v >> 16) & 0xFF)
    p[3] = <char>((v >> 24) & 0xFF)


cdef inline void _put_u64(char* p, uint64_t v) noexcept:
    _put_u32(p, <uint32_t>(v & 0xFFFFFFFFu))
    _put_u32(p + 4, <uint32_t>(v >> 32))


cdef int _put(Buf* b, const char* s, Py_ssize_t n) except -1:
    cdef char* p = _room(b, n)
    memcpy(p, s, n)
    b.n += n
    return 0


def encode(message):
    """Encode an omnm message (a Message, a dict or a list of Fields); see _codec.encode."""
    cdef char first[1024]  # most messages fit: no malloc
    cdef Buf b
    b.cap = sizeof(first)
    b.n = 0
    b.p = first
    b.heap = False
    try:
        memcpy(b.p, b"O\x01\x00", 3)
        b.n = 3
        try:
            _encode_fields(&b, message, 0)
        except Exception:  # anything the fast path does not take: the pure twin decides
            return _pure_encode(message)
        return PyBytes_FromStringAndSize(b.p, b.n)
    finally:
        if b.heap:
            free(b.p)


cdef int _encode_fields(Buf* b, object message, int depth) except -1:
    cdef object fields, f, key, value
    cdef Py_ssize_t pos = 0
    cdef PyObject* k
    cdef PyObject* v
    if depth > MAX_DEPTH:
        raise _FALLBACK
    tm = type(message)
    if tm is _Message:
        fields = _slot(message, _FIELDS_AT)
    elif tm is list or tm is tuple:
        fields = message
    elif tm is dict:
        while PyDict_Next(message, &pos, &k, &v):
            key = <object>k
            if type(key) is not str or PyUnicode_GET_LENGTH(key) == 0:
                raise _FALLBACK
            value = <object>v
            _encode_inferred(b, key, value, depth)
        return 0
    else:
        raise _FALLBACK
    if type(fields) is not list:
        if type(fields) is not tuple:
            raise _FALLBACK
        fields = list(fields)
    cdef Py_ssize_t i
    cdef PyObject* fp
    for i in range(PyList_GET_SIZE(fields)):  # the list may shrink under a callback
        if i >= PyList_GET_SIZE(fields):
            raise _FALLBACK
        fp = PyList_GET_ITEM(fields, i)
        if <PyObject*>Py_TYPE(fp) != <PyObject*>_FieldType:
            raise _FALLBACK
        f = <object>fp  # a reference: the list may change under a callback
        _encode_field(b, <object>PyTuple_GET_ITEM(f, 0), <object>PyTuple_GET_ITEM(f, 1),
                      <object>PyTuple_GET_ITEM(f, 2), <object>PyTuple_GET_ITEM(f, 3), depth)
    return 0


cdef int _header(Buf* b, object name, object fid, int tb) except -1:
    cdef long id_
    cdef int overflow = 0
    cdef const char* s
    cdef Py_ssize_t n
    cdef object raw
    cdef char* p
    if type(fid) is not int:
        raise _FALLBACK
    id_ = PyLong_AsLongLongAndOverflow(fid, &overflow)
    if overflow or id_ < 0 or id_ > 0xFFFF:
        raise _FALLBACK
    if name is None or (type(name) is str and PyUnicode_GET_LENGTH(name) == 0):
        if id_ == 0:
            raise _FALLBACK
        n = 0
        s = NULL
    elif type(name) is str:
        if PyUnicode_IS_COMPACT_ASCII(name):
            s = <const char*>PyUnicode_DATA(name)
            n = PyUnicode_GET_LENGTH(name)
        else:
            raw = PyUnicode_AsEncodedString(name, "utf-8", "surrogateescape")
            s = PyBytes_AS_STRING(raw)
            n = PyBytes_GET_SIZE(raw)
        if memchr(s, 0, n) != NULL:
            raise _FALLBACK
    else:
        raise _FALLBACK
    p = _room(b, n + 4)
    p[0] = <char>tb
    p[1] = <char>(id_ & 0xFF)
    p[2] = <char>(id_ >> 8)
    if n:
        memcpy(p + 3, s, n)
    p[3 + n] = 0
    b.n += n + 4
    return 0


cdef int _text(Buf* b, object v) except -1:
    """A STRING value: u32 length (with the NUL), the UTF-8 bytes, NUL."""
    cdef const char* s
    cdef Py_ssize_t n
    cdef object raw
    if type(v) is not str:
        raise _FALLBACK
    if PyUnicode_IS_COMPACT_ASCII(v):
        s = <const char*>PyUnicode_DATA(v)
        n = PyUnicode_GET_LENGTH(v)
    else:
        raw = PyUnicode_AsEncodedString(v, "utf-8", "surrogateescape")
        s = PyBytes_AS_STRING(raw)
        n = PyBytes_GET_SIZE(raw)
    if n >= U32M or memchr(s, 0, n) != NULL:
        raise _FALLBACK
    cdef char* p = _room(b, n + 5)
    _put_u32(p, <uint32_t>(n + 1))
    memcpy(p + 4, s, n)
    p[4 + n] = 0
    b.n += n + 5
    return 0


cdef int _time_parts(Buf* b, long long seconds, long long micros, long long precision,
                     long long hints) except -1:
    if not (0 <= seconds <= U32M and 0 <= micros < 1000000
            and 0 <= precision <= 255 and 0 <= hints <= 255):
        raise _FALLBACK
    cdef char* p = _room(b, 32)
    memset(p, 0, 32)
    _put_u64(p, <uint64_t>seconds)
    _put_u32(p + 8, <uint32_t>(micros * 1000))
    p[12] = <char>precision
    p[13] = <char>hints
    b.n += 32
    return 0


cdef long long _int(object v) except? -1:
    """An exact int that fits in 64 signed bits, else _Fallback."""
    cdef int overflow = 0
    if type(v) is not int:
        raise _FALLBACK
    cdef long long x = PyLong_AsLongLongAndOverflow(v, &overflow)
    if overflow:
        raise _FALLBACK
    return x


cdef inline long long _days_from_civil(long long y, long long m, long long d) noexcept:
    # days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's algorithm)
    y -= m <= 2
    cdef long long era = (y if y >= 0 else y - 399) // 400
    cdef long long yoe = y - era * 400
    cdef long long doy = (153 * (m + (-3 if m > 2 else 9)) + 2) // 5 + d - 1
    cdef long long doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    return era * 146097 + doe - 719468


cdef int _time(Buf* b, object v) except -1:
    cdef object t = type(v)
    cdef long long days
    if t is _Time:
        _time_parts(b, _int(_slot(v, _SECONDS_AT)), _int(_slot(v, _MICROS_AT)),
                    _int(_slot(v, _PRECISION_AT)), _int(_slot(v, _HINTS_AT)))
    elif t is datetime and datetime_tzinfo(v) is _UTC:
        # Time.from_datetime of a UTC datetime: microsecond precision, date and time
        days = _days_from_civil(PyDateTime_GET_YEAR(v), PyDateTime_GET_MONTH(v),
                                PyDateTime_GET_DAY(v))
        _time_parts(b, days * 86400 + PyDateTime_DATE_GET_HOUR(v) * 3600
                    + PyDateTime_DATE_GET_MINUTE(v) * 60 + PyDateTime_DATE_GET_SECOND(v),
                    PyDateTime_DATE_GET_MICROSECOND(v), 6, 3)
    else:
        raise _FALLBACK
    return 0


cdef int _price(Buf* b, object v) except -1:
    cdef object t = type(v)
    cdef object value
    cdef long long hints
    if t is _Price:
        value = _slot(v, _VALUE_AT)
        hints = _int(_slot(v, _PRICE_HINTS_AT))
        if not 0 <= hints <= 255:
            raise _FALLBACK
    elif t is float or t is int:
        value = v
        hints = 0x20  # mamaPrice_setValue: a valid price, no precision
    else:
        raise _FALLBACK
    cdef char* p = _room(b, 16)
    memset(p, 0, 16)
    if type(value) is float:
        PyFloat_Pack8(PyFloat_AS_DOUBLE(value), p, 1)
    elif type(value) is int:
        PyFloat_Pack8(PyLong_AsDouble(value), p, 1)
    else:
        raise _FALLBACK
    p[8] = <char>hints
    b.n += 16
    return 0


cdef int _nested(Buf* b, object v, int depth) except -1:
    """A MSG value: u32 length, then the message with its own header."""
    if type(v) is not _Message and type(v) is not dict:
        raise _FALLBACK
    cdef Py_ssize_t at = b.n
    cdef char* p = _room(b, 7)
    memcpy(p + 4, b"O\x01\x00", 3)
    b.n += 7
    _encode_fields(b, v, depth + 1)
    _put_u32(b.p + at, <uint32_t>(b.n - at - 4))
    return 0


cdef int _vector(Buf* b, int tb, object v, int depth) except -1:
    """A vector value, by the pure twin's writer; VECTOR_MSG (which may warn) goes to
    the pure twin whole."""
    if tb == T_VECTOR_MSG:
        raise _FALLBACK
    writer = _writers[tb]
    if writer is None:
        raise _FALLBACK
    cdef bytearray out = bytearray()
    writer(out, v, depth)
    _put(b, PyByteArray_AS_STRING(out), PyByteArray_GET_SIZE(out))
    return 0


cdef int _encode_field(Buf* b, object name, object fid, object ft, object v,
                       int depth) except -1:
    if type(ft) is not _FieldTypeCls:
        raise _FALLBACK
    cdef int tb = <int>(<long>ft)
    _header(b, name, fid, tb)
    _value(b, tb, v, depth)
    return 0


cdef int _value(Buf* b, int tb, object v, int depth) except -1:
    cdef char* p
    cdef long long x
    cdef int overflow = 0
    cdef unsigned long long ux
    cdef object tv = type(v)
    cdef double d
    if tb == T_STRING:
        _text(b, v)
    elif tb == T_F64 or tb == T_F32:
        if tv is float:
            d = PyFloat_AS_DOUBLE(v)
        elif tv is int:
            d = PyLong_AsDouble(v)
        else:
            raise _FALLBACK
        p = _room(b, 8)
        if tb == T_F64:
            PyFloat_Pack8(d, p, 1)
            b.n += 8
        else:
            PyFloat_Pack4(d, p, 1)
            b.n += 4
    elif T_I8 <= tb <= T_U64:
        if tv is not int:
            raise _FALLBACK
        p = _room(b, 8)
        if tb == T_U64:
            ux = v  # OverflowError for negatives and past 2**64-1: the pure twin says so
            _put_u64(p, ux)
            b.n += 8
            return 0
        x = PyLong_AsLongLongAndOverflow(v, &overflow)
        if overflow:
            raise _FALLBACK
        if tb == T_I8:
            if not -128 <= x <= 127:
                raise _FALLBACK
            p[0] = <char>x
            b.n += 1
        elif tb == T_U8:
            if not 0 <= x <= 255:
                raise _FALLBACK
            p[0] = <char>x
            b.n += 1
        elif tb == T_I16 or tb == T_U16:
            if not (-32768 <= x <= 32767 if tb == T_I16 else 0 <= x <= 0xFFFF):
                raise _FALLBACK
            p[0] = <char>(x & 0xFF)
            p[1] = <char>((x >> 8) & 0xFF)
            b.n += 2
        elif tb == T_I32 or tb == T_U32:
            if not (-2147483648 <= x <= 2147483647 if tb == T_I32 else 0 <= x <= U32M):
                raise _FALLBACK
            _put_u32(p, <uint32_t>(x & U32M))
            b.n += 4
        else:  # I64
            _put_u64(p, <uint64_t>x)
            b.n += 8
    elif tb == T_TIME:
        _time(b, v)
    elif tb == T_PRICE:
        _price(b, v)
    elif tb == T_BOOL:
        if v is _TRUE or v is _FALSE:
            x = 1 if v is _TRUE else 0
        else:
            x = _int(v)
            if not -128 <= x <= 127:
                raise _FALLBACK
        p = _room(b, 1)
        p[0] = <char>x
        b.n += 1
    elif tb == T_CHAR:
        if tv is not str or PyUnicode_GET_LENGTH(v) != 1 or PyUnicode_READ_CHAR(v, 0) > 255:
            raise _FALLBACK
        p = _room(b, 1)
        p[0] = <char>PyUnicode_READ_CHAR(v, 0)
        b.n += 1
    elif tb == T_OPAQUE:
        if tv is bytes:
            x = PyBytes_GET_SIZE(v)
            if x > U32M:
                raise _FALLBACK
            p = _room(b, 4)
            _put_u32(p, <uint32_t>x)
            b.n += 4
            _put(b, PyBytes_AS_STRING(v), x)
        else:
            raise _FALLBACK
    elif tb == T_MSG:
        _nested(b, v, depth)
    else:
        _vector(b, tb, v, depth)
    return 0


cdef int _encode_inferred(Buf* b, object name, object v, int depth) except -1:
    """A dict item: the type inferred as field_from_value does."""
    cdef object tv = type(v)
    cdef long long x
    cdef int overflow = 0
    cdef int tb
    if tv is str:
        _header(b, name, 0, T_STRING)
        _text(b, v)
    elif tv is float:
        _header(b, name, 0, T_F64)
        _value(b, T_F64, v, depth)
    elif tv is int:
        x = PyLong_AsLongLongAndOverflow(v, &overflow)
        if overflow:
            if overflow < 0:
                raise _FALLBACK
            _header(b, name, 0, T_U64)  # past 2**63-1; _value falls back past 2**64-1
            _value(b, T_U64, v, depth)
            return 0
        if x >= 0:
            tb = (T_U8 if x <= 0xFF else T_U16 if x <= 0xFFFF else T_U32 if x <= U32M
                  else T_U64)
        else:
            tb = (T_I8 if x >= -128 else T_I16 if x >= -32768 else T_I32
                  if x >= -2147483648 else T_I64)
        _header(b, name, 0, tb)
        _value(b, tb, v, depth)
    elif tv is bool:
        _header(b, name, 0, T_BOOL)
        _value(b, T_BOOL, v, depth)
    elif tv is _Time or tv is datetime:
        _header(b, name, 0, T_TIME)
        _time(b, v)
    elif tv is _Price:
        _header(b, name, 0, T_PRICE)
        _price(b, v)
    elif tv is bytes:
        _header(b, name, 0, T_OPAQUE)
        _value(b, T_OPAQUE, v, depth)
    elif tv is dict or tv is _Message:
        _header(b, name, 0, T_MSG)
        _nested(b, v, depth)
    else:
        # lists (vectors), Typed, subclasses, None...: the one inference rule both twins
        # share makes the Field (or raises, and the pure twin says so)
        f = _field_from_value(name, 0, v)
        _encode_field(b, <object>PyTuple_GET_ITEM(f, 0), <object>PyTuple_GET_ITEM(f, 1),
                      <object>PyTuple_GET_ITEM(f, 2), <object>PyTuple_GET_ITEM(f, 3), depth)
    return 0
