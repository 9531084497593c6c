# Declarations for the optional compiled build of executor.py (see network.pxd):
# the waiters ticked once per delivered message, as extension types, and C types
# for the locals of the per-message functions.

import cython

from simnet.network cimport FlowNetwork, _IntTable, _Path, _Sink


cdef class _Channels:
    cdef public _IntTable sends
    cdef public _IntTable recvs
    cdef public long long eager


cdef class _Waiter(_Sink):
    cdef public long long n

    cpdef delivered(self, object sw)


cdef class _Eager(_Sink):
    cdef public bint arrived
    cdef public _Waiter receiver

    cpdef delivered(self, object _tag)


cdef class _Req(_Waiter):
    cdef public object then


cdef class _WaitAll(_Waiter):
    cdef public object rank


cdef class _StepTable:
    cdef public Py_ssize_t p
    cdef public Py_ssize_t s
    cdef public list messages
    cdef public list reduces
    cdef public list copies
    cdef public list reduced_into
    cdef int[::1] src
    cdef int[::1] dst
    cdef long long[::1] nbytes
    cdef unsigned char[::1] reduce
    cdef long long[::1] nsteps
    cdef long long[::1] row
    cdef public list rows

    cpdef long long steps_of(self, Py_ssize_t m)


cpdef object _reduced_bytes_received(_StepTable table)


@cython.locals(m=Py_ssize_t, shared=dict, out=list)
cpdef object _delay_lists(_StepTable table, tuple costs)


cdef class _Coll(_Waiter):
    cdef public long long base  # channel numbers fit 64 bits (see PhaseSim._collective)
    cdef public Py_ssize_t delayed
    cdef public object delays
    cdef public object done
    cdef public tuple endpoints
    cdef public bint handshake
    cdef public _Channels channels
    cdef public Py_ssize_t i
    cdef public object late
    cdef public Py_ssize_t me
    cdef public FlowNetwork net
    cdef public Py_ssize_t nsteps
    cdef public object owner
    cdef public list prows
    cdef public object sim
    cdef public tuple steps
    cdef public _StepTable table

    @cython.locals(steps=tuple, table=_StepTable, i=Py_ssize_t,
                   nsteps=Py_ssize_t, pending=cython.longlong, endpoints=tuple,
                   step=tuple, n=Py_ssize_t, nr=Py_ssize_t, j=Py_ssize_t, k=Py_ssize_t,
                   t_now=cython.double, me=Py_ssize_t, p=Py_ssize_t, base=cython.longlong,
                   row=cython.longlong, src=Py_ssize_t, dst=Py_ssize_t, prows=list,
                   plist=list)
    cpdef bint advance(self) except -1

    @cython.locals(chan=_Channels, sc=_Coll, path=_Path, msg=_Eager)
    cdef inline int _recv(self, long long key) except -1

    @cython.locals(chan=_Channels, rw=object, path=_Path, msg=_Eager, size=cython.longlong,
                   eager=bint)
    cdef inline int _send(self, long long key, list plist, Py_ssize_t dst, object size_bytes,
                          double t_now) except -1

    @cython.locals(path=_Path)
    cdef inline _Path _path_of(self, list plist, Py_ssize_t src, Py_ssize_t dst)


cdef _push(_IntTable table, long long channel, object item)


cdef object _pop(_IntTable table, long long channel)


@cython.locals(n=cython.longlong, c=_Coll)
cdef _tick(_Waiter w)


cdef class _Rank:
    cdef public list deferred
    cdef public list ends
    cdef public Py_ssize_t i
    cdef public bint in_mpi
    cdef public Py_ssize_t it
    cdef public Py_ssize_t iterations
    cdef public object noise
    cdef public list ops
    cdef public object rank
    cdef public dict reqs
    cdef public double overhead
    cdef public object resume
    cdef public double scale
    cdef public object sim
    cdef public list starts
    cdef public object tl

    @cython.locals(ops=list, starts=list, ends=list, reqs=dict, pending=list,
                   i=Py_ssize_t, n_ops=Py_ssize_t, d=cython.double)
    cpdef run(self)


@cython.locals(uses=dict, same=dict, flat=list, st=tuple, recvs=tuple, sends=tuple,
               send=tuple, f=list, t=tuple, u=list, copy=dict, reduce=dict, tot=dict,
               messages=Py_ssize_t, n=Py_ssize_t)
cpdef tuple _flatten(plan)


@cython.locals(out=list)
cdef tuple _pairs_flat(dict d)


@cython.final
cdef class _RowSums:
    cdef list accts
    cdef list sums

    @cython.locals(i=Py_ssize_t, d=dict)
    cpdef dict of(self, dict acct)

    @cython.locals(i=Py_ssize_t, acct=dict, total=object)
    cpdef add_up(self)


@cython.locals(add=tuple, acct=dict, tot=tuple, members=tuple, i=Py_ssize_t, j=Py_ssize_t,
               row=cython.longlong, member=cython.longlong, size=cython.longlong,
               total=cython.longlong, key=object)
cdef _add_bytes(tuple adds, long long calls, _RowSums into)


cdef class _Tally:
    cdef public tuple adds
    cdef public long long calls
    cdef public long long row

    @cython.locals(n=cython.longlong)
    cpdef settle(self, _RowSums into)


cdef class _TableTally(_Tally):
    cdef public _StepTable table
    cdef public Py_ssize_t me
    cdef public tuple members
    cdef public dict reduced
    cdef public dict copied

    @cython.locals(n=cython.longlong, t=_StepTable, s=Py_ssize_t, me=Py_ssize_t,
                   i=Py_ssize_t, k=Py_ssize_t, d=Py_ssize_t, last=Py_ssize_t, red=int,
                   run_bytes=cython.longlong)
    cpdef settle(self, _RowSums into)

    @cython.locals(key=object, total=cython.longlong)
    cdef _add(self, dict acct, Py_ssize_t member, long long nbytes)


@cython.locals(n=cython.longlong)
cdef _count_call(_Tally tally, object sim)


cdef class _Seq:
    cdef public long long n
    cdef public object stream


cdef class _Call:
    cdef public object base  # Python ints: a channel number too big for C raises in _Coll
    cdef public object delays
    cdef public tuple endpoints
    cdef public Py_ssize_t me
    cdef public long long messages
    cdef public bint nccl
    cdef public bint owned
    cdef public object pipes
    cdef public list prows
    cdef public object rank
    cdef public _Seq seq
    cdef public object sim
    cdef public object steps
    cdef public bint streamed
    cdef public object stride
    cdef public _Tally tally


@cython.locals(seq=_Seq, k=cython.longlong)
cdef bint _call(_Call c, object op, object done) except -1


@cython.locals(coll=_Coll)
cdef bint _start_call(_Call c, object op, object done, long long k) except -1
