# The types of nesting.py when Cython compiles it (setup.py): the estimate's classes as extension
# types, their helpers as C methods; start, end and read stay callable from Python.
cimport cython


cdef class _Estimate:
    cdef public list stack, kept, live, foreign
    cdef public dict every, at, marks, since, closed
    cdef public dict active
    cdef public Py_ssize_t reopened
    cdef public object raw

    @cython.locals(position=Py_ssize_t)
    cdef _push(self, str name, bint foreign=*, bint kept=*)
    @cython.locals(position=Py_ssize_t)
    cdef str _pop(self)
    cdef _topmost(self, tuple kinds, records, tuple above)
    cdef _forget_since(self)
    @cython.locals(deepest=Py_ssize_t, depth=Py_ssize_t)
    cdef Py_ssize_t _deepest_record(self)
    cdef _forget_record(self, str recorded)
    cdef _forget_from(self, Py_ssize_t position)
    cdef _forget_after(self, Py_ssize_t position)
    @cython.locals(forgotten=Py_ssize_t)
    cdef _forget_above(self, Py_ssize_t position, tuple place)
    cdef _deactivate(self, str name)
    @cython.locals(end=Py_ssize_t, nest=list)
    cdef Py_ssize_t _past_alone(self, list tags, Py_ssize_t i)
    cdef _reopen(self)


cdef class OpenElements(_Estimate):
    @cython.locals(last=Py_ssize_t, i=Py_ssize_t, after=Py_ssize_t)
    cpdef read(self, list tags)
    @cython.locals(end=Py_ssize_t)
    cdef Py_ssize_t _past_skipped(self, list tags, Py_ssize_t i)
    cdef bint _records_alone(self, str name)
    cpdef start(self, str name)
    cdef _open(self, str name)
    cpdef end(self, str name)
    @cython.locals(position=Py_ssize_t)
    cdef str _last_heading(self, str name)
    cdef _end_option(self)
    cdef _close(self, str name, Py_ssize_t position)
    @cython.locals(position=Py_ssize_t)
    cdef _end_last(self, str name)
    cdef _close_since(self, str recorded, tuple stops)
    cdef bint _may_close(self, str name, str closes)
