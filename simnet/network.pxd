# Declarations for the optional compiled build of network.py (Cython reads this
# file beside the .py when it compiles it; Python never does). They turn the
# hot classes into extension types with C fields, so the flow loops read and
# write plain doubles and integers instead of boxed Python objects. Every field
# keeps its Python name and stays readable and writable from Python.
#
# The hot methods are declared cpdef (callable from Python as before, called
# directly from C inside the module) so that their local variables can be typed.
# Integer counters are 64-bit here (bytes per link or pair up to 9.2e18); the
# pure-Python module has no such bound.

import cython
from cpython.ref cimport PyObject


cdef struct _QNode:  # a queued item of _KeyQueue, in its run's chain
    long long seq
    PyObject* item
    Py_ssize_t next


cdef struct _QEntry:  # a heap entry of _KeyQueue (a run, by key then first number) or _Heap
    double key
    long long seq
    Py_ssize_t head  # the run's first node (its items chain on through .next); _Heap: the item


cdef struct _TEntry:  # an entry of _IntTable: key -1 is empty
    long long key
    PyObject* item


ctypedef _TEntry* _TEntryPtr
ctypedef _QNode* _QNodePtr
ctypedef _QEntry* _QEntryPtr
ctypedef PyObject* _ObjectPtr  # a borrowed reference: a pointer, no count
ctypedef PyObject** _ObjectArray  # a list's items

cdef Py_ssize_t _OPEN_RUNS  # the length of _KeyQueue's open_tail and open_key
cdef Py_ssize_t _COMPACT_MIN

# The flow phases and the numeric constants of the hot paths, as C values: as module
# globals they would be a dictionary lookup and a boxed comparison at each use.
cdef int _ALPHA, _DRAINING, _LATENCY, _DONE, _TIMER, _HANDSHAKE
cdef Py_ssize_t _FAST_FORWARD_HOPS
cdef long long _FAST_FORWARD_RATES
cdef double _INF, _RATE_RTOL, _FULL_RTOL, _TIE_RTOL, _TOGETHER_RTOL
cdef object _ONE_TAG
cdef unsigned long long _HASH_MUL


cdef void* _grown(void* ptr, Py_ssize_t count, size_t size) except NULL


cdef inline bint _before(double key, long long seq, double key2, long long seq2) noexcept


@cython.locals(a=_QEntryPtr, b=_QEntryPtr)
cdef inline Py_ssize_t _least_child(_QEntryPtr entries, Py_ssize_t child, Py_ssize_t n) noexcept


@cython.locals(parent=Py_ssize_t)
cdef inline void _heap_add(_QEntryPtr entries, Py_ssize_t i, double key, long long seq,
                           Py_ssize_t head) noexcept


cdef inline void _place(_QEntryPtr entries, Py_ssize_t i) noexcept


@cython.locals(last=_QEntry, child=Py_ssize_t, parent=Py_ssize_t)
cdef inline void _heap_fill(_QEntryPtr entries, Py_ssize_t i, Py_ssize_t n,
                            bint placed) noexcept


cdef inline _Link _link_of(_QEntry entry)


cdef class _EntryHeap:
    cdef public Py_ssize_t n
    cdef public long long last_seq
    cdef Py_ssize_t cap
    cdef _QEntryPtr entries  # (head: a _KeyQueue run's first node, or an item's borrowed pointer)
    cdef list heap


cdef inline double _first_key(_EntryHeap h) noexcept


@cython.locals(cap=Py_ssize_t)
cdef inline int _heap_room(_EntryHeap h, Py_ssize_t used) except -1


@cython.final
cdef class _KeyQueue(_EntryHeap):
    cdef public long long popped_seq
    cdef public Py_ssize_t last_node
    cdef Py_ssize_t size
    cdef Py_ssize_t node_cap
    cdef _QNodePtr nodes
    cdef Py_ssize_t free_node
    cdef Py_ssize_t open_tail[4]  # _OPEN_RUNS: each open run's last node, -1: none
    cdef double open_key[4]
    cdef Py_ssize_t next_open
    cdef Py_ssize_t dead  # killed items still queued

    @cython.locals(seq=cython.longlong, i=Py_ssize_t, cap=Py_ssize_t, node=Py_ssize_t,
                   nodes=_QNodePtr)
    cpdef Py_ssize_t push(self, double key, object item) except -1

    cpdef long long first_seq(self) noexcept

    @cython.locals(item=_ObjectPtr)
    cpdef object first_item(self)

    cdef _ObjectPtr first_ptr(self) noexcept

    @cython.locals(nd=_QNodePtr)
    cpdef kill(self, Py_ssize_t node, long long seq)

    @cython.locals(nodes=_QNodePtr, entries=_QEntryPtr, kept=Py_ssize_t, i=Py_ssize_t,
                   j=Py_ssize_t, child=Py_ssize_t, head=Py_ssize_t, tail=Py_ssize_t,
                   node=Py_ssize_t, nxt=Py_ssize_t, top=_QEntry)
    cdef void _compact(self) noexcept

    @cython.locals(entries=_QEntryPtr, nodes=_QNodePtr, n=Py_ssize_t, i=Py_ssize_t,
                   node=Py_ssize_t, nxt=Py_ssize_t)
    cpdef object pop(self)


@cython.final
cdef class _Heap(_EntryHeap):
    @cython.locals(seq=cython.longlong, ptr=_ObjectPtr)
    cpdef push(self, double key, object item)

    @cython.locals(entries=_QEntryPtr, n=Py_ssize_t)
    cpdef object pop(self)


@cython.final
cdef class _LinkHeap(_EntryHeap):
    cdef dict live

    @cython.locals(i=Py_ssize_t, parent=Py_ssize_t, entries=_QEntryPtr, had=tuple)
    cpdef file(self, _Link link, double share)

    cpdef _Link pop(self)

    cpdef drop(self, _Link link)

    cdef _settle(self)

    @cython.locals(entries=_QEntryPtr, n=Py_ssize_t)
    cdef void _take(self, Py_ssize_t i) noexcept


@cython.final
cdef class _IntTable:
    cdef public Py_ssize_t n
    cdef Py_ssize_t cap
    cdef int shift  # 64 - log2(cap)
    cdef _TEntryPtr entries
    cdef dict d

    @cython.locals(h=cython.ulonglong)
    cdef inline Py_ssize_t _home(self, long long key) noexcept

    @cython.locals(mask=Py_ssize_t, i=Py_ssize_t, k=cython.longlong)
    cdef Py_ssize_t _slot(self, long long key) noexcept

    @cython.locals(i=Py_ssize_t)
    cpdef object get(self, long long key)

    @cython.locals(i=Py_ssize_t, j=Py_ssize_t, mask=Py_ssize_t, k=cython.longlong,
                   home=Py_ssize_t, entries=_TEntryPtr, stays=bint)
    cpdef object take(self, long long key)

    @cython.locals(i=Py_ssize_t)
    cpdef list items(self)

    @cython.locals(i=Py_ssize_t, old=object)
    cpdef object add(self, long long key, object item)

    @cython.locals(i=Py_ssize_t)
    cpdef put(self, long long key, object item)

    @cython.locals(old=_TEntryPtr, old_cap=Py_ssize_t, cap=Py_ssize_t, i=Py_ssize_t,
                   j=Py_ssize_t)
    cdef _grow(self)


@cython.final
cdef class _Series:
    cdef public Py_ssize_t n
    cdef Py_ssize_t cap
    cdef double* t
    cdef double* v

    @cython.locals(n=Py_ssize_t, cap=Py_ssize_t)
    cpdef record(self, double now, double load)

    @cython.locals(i=Py_ssize_t)
    cpdef list points(self)


@cython.final
cdef class _Meeting:
    cdef public list job_of
    cdef public list counts
    cdef public list job_s
    cdef public Py_ssize_t active
    cdef public double since_s
    cdef public double together_s
    cdef public double full_at
    cdef public bint full
    cdef public double full_s
    cdef public double load_now
    cdef public double peak_together

    @cython.locals(dt=cython.double, j=Py_ssize_t)
    cdef _settle(self, double now)

    @cython.locals(j=Py_ssize_t, c=Py_ssize_t)
    cpdef start(self, object src, double now)

    @cython.locals(j=Py_ssize_t, c=Py_ssize_t)
    cpdef end(self, object src, double now)

    cpdef load(self, double load, double now)


cdef class _Link:
    # Field order is memory order: what a flow's start and end and the max-min search
    # read come first, next to the object header (cachegrind, 1,024 ranks: 2% fewer L1
    # data misses than in the order of the Python attributes; no wall-time difference
    # stands out of this machine's noise).
    cdef _ObjectArray fl  # the draining flows (references held): fl_small or the heap
    cdef public long long n_flows
    cdef public double capacity_bytes_per_s
    cdef public long long mark
    cdef public double rem_capacity_bytes_per_s
    cdef public long long n_unfrozen
    cdef public Py_ssize_t qpos  # its entry in the filling's _LinkHeap, -1: none
    cdef public double load_bytes_per_s
    cdef public long long load_mark
    cdef public double kept_max
    cdef public long long bytes_total
    cdef public double busy_since_s
    cdef public double busy_s
    cdef public double peak_load_bytes_per_s
    cdef public _Series series
    cdef public object key
    cdef public double latency_s
    cdef Py_ssize_t fl_cap
    cdef PyObject* fl_small[2]
    cdef public _Meeting watch


@cython.final
cdef class _Stack:
    cdef public Py_ssize_t n
    cdef _ObjectArray items  # borrowed pointers
    cdef Py_ssize_t cap


cdef class _Sink:
    cpdef delivered(self, object tag)


cdef class _Pair:
    cdef public long long in_flight
    cdef public double busy_since_s
    cdef public double busy_s


cdef class _Path(_Pair):
    # What a message's start reads first, next to the counters its pair keeps: its
    # links are in the object (lk_small), not only in the tuple .links (a cache line
    # elsewhere, a miss of its own a message on a big network).
    cdef public double latency_s
    cdef public Py_ssize_t n_links
    cdef _ObjectArray lk  # its links (borrowed: .links holds them): lk_small or the tuple's
    cdef PyObject* lk_small[6]
    cdef public object src
    cdef public object dst
    cdef public long long bytes_total
    cdef public double duration_s
    cdef public long long messages
    cdef public _Pair pair
    cdef public tuple edges
    cdef public tuple links


cdef class _Flow:  # (its free list and GC flag: decorators in network.py)
    cdef public double fill_bytes_per_s
    cdef _ObjectPtr bn  # its bottleneck, one of its links (borrowed; see _flush), or NULL
    cdef public double last_update_s
    cdef _ObjectArray lk  # its links (borrowed: its path holds them): lk_small or the path's
    cdef public Py_ssize_t n_links
    cdef public long long mark
    cdef public object notify
    cdef public _Path path
    cdef public int phase
    cdef public double rate_bytes_per_s
    cdef public double remaining_bytes
    cdef public long long seq
    cdef public long long size_bytes
    cdef public double start_s
    cdef public object tag
    cdef public object tag2
    cdef public long long timer
    cdef public Py_ssize_t tnode  # the timer queue's node of its live timer
    cdef PyObject* lk_small[6]


@cython.locals(path=_Path, key=tuple, v=object)  # v: an int or a float, as the figure's
cdef _add_pair_sums(dict out, paths, int figure)


cdef class FlowNetwork:
    cdef public object env
    cdef public object graph
    cdef public object route
    cdef public double alpha_s
    cdef public double send_overhead_s
    cdef public bint rendezvous_handshake
    cdef public dict _send_free
    cdef public object injection_bandwidth_bytes_per_s
    cdef public bint record_link_series
    cdef public long long transfers_started
    cdef public long long transfers_completed
    cdef public long long recomputations
    cdef public long long flows_rerated
    cdef public long long rates_changed
    cdef public dict _links
    cdef public dict _paths
    cdef public dict _last_path
    cdef public dict _path_of_edges
    cdef public _IntTable _static
    cdef public Py_ssize_t _n_ends
    cdef public list _static_list
    cdef public object _route_once
    cdef public dict _self_paths
    cdef public dict _pairs
    cdef public _KeyQueue _timers
    cdef public _LinkHeap _fill_queue
    cdef public _Heap _check_queue
    cdef public _Stack _comp_links
    cdef public _Stack _comp_flows
    cdef public _Stack _touched
    cdef public list _wake_pending
    cdef public bint _waking
    cdef public double _now_s
    cdef public list _dirty
    cdef public list _env_queue
    cdef public bint _flush_scheduled
    cdef public long long _epoch
    cdef public dict _watch
    cdef public list _job_of
    cdef public Py_ssize_t _n_jobs
    cdef object __weakref__

    cpdef start_transfer(self, src, dst, size_bytes, on_delivery, tag=*, tag2=*)

    cdef inline double _clock(self) except? -1.0

    @cython.locals(path=_Path)
    cpdef _Path path_between(self, src, dst)

    cpdef _Path known_path(self, src, dst)

    @cython.locals(flow=_Flow)
    cpdef start_on_path(self, _Path path, size_bytes, on_delivery, tag=*, tag2=*)

    @cython.locals(flow=_Flow, size=cython.longlong)
    cpdef _Flow _message(self, _Path path, size_bytes, on_delivery, tag, tag2)

    cpdef _set_timer(self, _Flow flow, double time_s)

    @cython.locals(pending=list, timers=_KeyQueue, seq=cython.longlong)
    cdef Py_ssize_t _add_timer(self, double time_s, _Flow flow) except -1

    @cython.locals(path=_Path, pair=_Pair, n=cython.longlong,
                   size=cython.longlong, t=cython.double, alpha_s=cython.double,
                   o=cython.double, seq=cython.longlong)
    cpdef _launch(self, _Flow flow, double now, bint paid=*)

    @cython.locals(o=cython.double, s=cython.double, t=cython.double, free=dict)
    cpdef double send_overhead_end(self, src, dst, double now) except? -1.0

    @cython.locals(path=_Path)
    cpdef start_rendezvous(self, src, dst, size_bytes, on_delivery, tag, double send_posted_s,
                           tag2=*)

    @cython.locals(flow=_Flow, now=cython.double, delay=cython.double, start=cython.double)
    cpdef rendezvous_on_path(self, _Path path, size_bytes, on_delivery, tag,
                             double send_posted_s, tag2=*, bint handshake=*)

    @cython.locals(timer=_Flow, t=cython.double)
    cpdef call_later(self, double delay_s, callback, arg=*)

    @cython.locals(table=_IntTable, n=Py_ssize_t, s=cython.longlong, d=cython.longlong)
    cdef _Path _known_path(self, src, dst)

    @cython.locals(path=_Path)
    cpdef _Path _path(self, src, dst)

    @cython.locals(known=dict, links=list, link=_Link, latency_s=cython.double, path=_Path)
    cpdef _Path _resolve(self, src, dst, tuple edges, bint keyed=*)

    @cython.locals(flow=_Flow, link=_Link, path=_Path, pair=_Pair, n=cython.longlong,
                   timers=_KeyQueue,
                   dirty=list, pending=list, size=cython.longlong,
                   phase=cython.int, now=cython.double, t=cython.double, limit=cython.double,
                   rate=cython.double,
                   target=cython.double, nt=cython.double, hops=Py_ssize_t, queue=list,
                   due=cython.double, j=Py_ssize_t, rated_until=cython.longlong)
    cpdef _on_wake(self, ev)

    @cython.locals(link=_Link, nl=Py_ssize_t, j=Py_ssize_t, latency_s=cython.double,
                   dirty=list)
    cpdef _begin(self, _Flow flow, double now)

    @cython.locals(path=_Path, pair=_Pair, n=cython.longlong, tag2=object, notify=object,
                   sink=_Sink)
    cpdef _deliver(self, _Flow flow, double now)

    @cython.locals(old=cython.double, rem=cython.double)
    cpdef _apply_rate(self, _Flow f, double rate, double now)

    @cython.locals(seed=_Link, link=_Link, f=_Flow, seeds=list, links=_Stack, flows=_Stack,
                   touched=_Stack, n=Py_ssize_t, i=Py_ssize_t, j=Py_ssize_t, k=Py_ssize_t,
                   base=cython.longlong, stamp=cython.longlong, rate=cython.double,
                   old=cython.double, cap=cython.double, tol=cython.double)
    cpdef _flush(self, double now)


# Prefetches of the objects a loop is about to read (their first two cache lines, where
# a _Link's or a _Flow's fields are): on a big network each is a cache miss, and asked
# for together the misses overlap instead of coming one after another. Hints only:
# nothing is read or changed.
cdef extern from *:
    """
    #if defined(__GNUC__) || defined(__clang__)
    #define __simnet_prefetch_line(p) __builtin_prefetch(p)
    #else
    #define __simnet_prefetch_line(p) ((void)(p))
    #endif
    static inline void __simnet_prefetch_items(PyObject** items, Py_ssize_t n) {
        if (n > 32) n = 32;
        for (Py_ssize_t i = 0; i < n; i++) {
            __simnet_prefetch_line((const char*)items[i]);
            __simnet_prefetch_line((const char*)items[i] + 64);
        }
    }
    static inline PyObject** __simnet_tuple_items(PyObject* o) {
        return ((PyTupleObject*)o)->ob_item;
    }
    static inline void __simnet_prefetch(PyObject* o) {
        __simnet_prefetch_line((const char*)o);
        __simnet_prefetch_line((const char*)o + 64);
    }
    static inline void __simnet_prefetch_ptr(PyObject* o) {
        if (o) __simnet_prefetch(o);
    }
    """
    void _prefetch_items "__simnet_prefetch_items"(_ObjectArray items, Py_ssize_t n)
    _ObjectArray _tuple_items "__simnet_tuple_items"(tuple o)
    void _prefetch_ptr "__simnet_prefetch_ptr"(_ObjectPtr o)


cdef extern from "Python.h":
    # -1 with *overflow set (no exception) for an int outside C's long long
    long long _as_longlong "PyLong_AsLongLongAndOverflow"(object o, int* overflow) except? -1


@cython.locals(v=cython.longlong, overflow=cython.int)
cdef long long _endpoint(object x, long long n) except? -2


@cython.locals(i=Py_ssize_t, n=Py_ssize_t, target=_ObjectPtr, items=_ObjectArray)
cdef Py_ssize_t _unlist(_Link link, _Flow flow) except -1


@cython.locals(n=Py_ssize_t)
cdef inline int _push(_Stack stack, object item) except -1


@cython.locals(n=Py_ssize_t, cap=Py_ssize_t)
cdef int _grow_stack(_Stack stack) except -1


cdef inline void _truncate(_Stack stack, Py_ssize_t n) noexcept


cdef inline void _empty(_Stack links, _Stack flows, _Stack touched) noexcept


cdef inline _Link _link_in(_Stack stack, Py_ssize_t i)


cdef inline _Flow _flow_in(_Stack stack, Py_ssize_t i)


cdef inline _Flow _flow_at(_Link link, Py_ssize_t i)


cdef inline _Link _link_at(_Flow flow, Py_ssize_t j)


cdef inline void _set_bn(_Flow f, _Link link) noexcept


cdef inline bint _bn_is(_Flow f, _Link link) noexcept


cdef inline _Link _bn_of(_Flow f)


cdef _keep_links(_Path path, tuple links)


@cython.locals(n=Py_ssize_t)
cdef _set_links(_Flow flow, _Path path)


@cython.locals(j=Py_ssize_t)
cdef inline _ObjectArray _inline_links(_ObjectArray items, Py_ssize_t n,
                                       _ObjectArray small) noexcept


@cython.locals(n=Py_ssize_t, cap=Py_ssize_t, i=Py_ssize_t, small=_ObjectArray,
               grown=_ObjectArray, inline=bint)
cdef Py_ssize_t _list_flow(_Link link, _Flow flow) except -1


@cython.locals(i=Py_ssize_t, load=cython.double)
cdef _sum_load(_Link link, double now)


@cython.locals(series=_Series, watch=_Meeting)
cdef _set_load(_Link link, double load, double now)


@cython.locals(l2=_Link, f=_Flow, i=Py_ssize_t, j=Py_ssize_t, n=cython.longlong)
cdef inline int _freeze(_Link link, double cur, long long epoch, _LinkHeap queue) except -1


@cython.locals(l2=_Link, k=Py_ssize_t, nl=Py_ssize_t, low=cython.double, cap=cython.double,
               shared=bint)
cdef bint _gather(_Flow f, long long stamp, _Stack links, _Stack flows) except -1


@cython.locals(j=Py_ssize_t)
cdef _ready(_Stack links, long long stamp, _Heap checks)


@cython.locals(f=_Flow, i=Py_ssize_t, n=cython.longlong, rem=cython.double, top=cython.double,
               rate=cython.double)
cdef _ready_link(_Link link, long long stamp, _Heap checks)


@cython.locals(link=_Link, f=_Flow, i=Py_ssize_t, j=Py_ssize_t, n=cython.longlong,
               level=cython.double, share=cython.double, cur=cython.double, rate=cython.double,
               above=cython.double, top=cython.double, ok=bint, joined=bint)
cdef _fill_joining(_Stack links, long long stamp, _LinkHeap queue, _Heap checks,
                   _Stack flows)


@cython.locals(l2=_Link, j=Py_ssize_t, rate=cython.double, rem=cython.double,
               n=cython.longlong)
cdef _join(_Flow f, long long stamp, _Stack links, _Stack flows, _LinkHeap queue,
           _Heap checks)
