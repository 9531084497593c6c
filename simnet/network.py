"""Flow-level network model with max-min fair bandwidth sharing, on simpy.

A message is a *flow* over the directed links of its route. Links share their
bandwidth among the flows crossing them by max-min fairness (progressive
filling); a flow's rate changes whenever a flow that shares a link with it
(directly or through a chain of shared links) starts or ends. Rates are
recomputed only for that connected component of flows, never globally, so
thousands of concurrent flows in disjoint parts of a network stay cheap; and in
it only for the flows at or above the rate of what changed (slower flows keep
theirs, exactly so in exact arithmetic: see ``_flush``).

Units, everywhere in this module: time in seconds (``_s``), sizes in bytes
(``_bytes``), bandwidths and rates in bytes per second (``_bytes_per_s``).

Graph data model: a :class:`networkx.DiGraph` whose directed edges each carry
``bandwidth`` (bytes/s, > 0) and ``latency`` (s, >= 0). Edge attributes are
read once, the first time an edge appears on a route, and cached: mutate the
graph before building the network, not after.

Scheduling. The model keeps its own timers (alpha over, last byte left,
latency over) in one queue, due by time and then in the order they were set
(``_KeyQueue``), so ties are broken by insertion order and runs are
deterministic. Only the earliest timer is mirrored as a simpy timeout, so the
flows of a bulk-synchronous step that start or end at the same instant share
one simpy event. simpy cannot cancel a timeout: a flow whose rate changes sets
a new timer and keeps its number; the old one is skipped when it comes out
(compiled, it is killed in its queue node at once, so it passes without its flow
being read), and superseded timers at the head of the queue are dropped without a
wake-up. Rates are
recomputed once per simulated instant for all flows started or ended at that
instant (a zero-delay simpy event batches the starts), so an all-to-all burst
costs one water-filling, not one per message. ``transfer`` returns a simpy
event per message; ``start_transfer`` calls a callback at delivery instead,
from the wake-up that delivers, so a bulk-synchronous step costs no simpy
event per message at all (flows its callbacks start join that wake-up's
water-filling).

Floating point. A flow's remaining bytes are brought up to date lazily
(``remaining -= rate * (now - last_update)``, clamped at 0) only when its
rate changes; its completion is the timer ``last_update + remaining / rate``,
so a flow never finishes before its bytes have drained at its rates, and is
never lost. A recomputed rate within a relative 1e-12 of the current one is
treated as unchanged (no rescheduling), which keeps rounding noise from
churning timers; capacities can therefore be exceeded by at most that much.

Compiled build. ``setup.py`` compiles this module with Cython when it can;
``network.pxd`` declares C fields for the hot classes, C types for the
local variables of the hot methods and C values for the module's constants (the
flow phases, ``_INF``, the tolerances: as globals, each use would be a dictionary
lookup); Python never reads it, and annotations here are documentation only, also
to Cython. simpy's clock is read as ``env._now``, the attribute its ``now``
property returns, which is a Python call. The code is the same either way but for
storage (``if cython.compiled``): the queues (C arrays of structs, else a heap of
tuples), ``_IntTable`` (a C hash table, else a dict), a link's flows and a flow's links
(C arrays inside the objects, else a list and the path's tuple); ``simnet._compiled``
chooses which runs.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Hashable, Iterable, Sequence
from heapq import heappop, heappush
from typing import NamedTuple, SupportsIndex

import networkx as nx
import numpy as np
import simpy

try:
    import cython
except ImportError:  # no Cython here: this module runs as the Python it is
    from . import _nocython as cython

if cython.compiled:
    from cython.cimports.cpython.bytes import PyBytes_FromStringAndSize
    from cython.cimports.cpython.mem import PyMem_Free, PyMem_Realloc
    from cython.cimports.cpython.ref import Py_DECREF, Py_INCREF, PyObject

__all__ = [
    "EGRESS",
    "INGRESS",
    "FlowNetwork",
    "FlowState",
    "LinkKey",
    "Route",
    "TransferRecord",
]

LinkKey = tuple[Hashable, Hashable]
"""A directed link: a graph edge ``(u, v)``, or a virtual injection port
``(EGRESS, node)`` / ``(INGRESS, node)``."""

Route = Callable[[int, int], Sequence[tuple[Hashable, Hashable]]]
"""``route(src, dst)`` -> the directed edges of the path (empty if src == dst)."""

EGRESS = "egress"
"""First element of the key of a node's virtual egress (injection) link."""
INGRESS = "ingress"
"""First element of the key of a node's virtual ingress (ejection) link."""

# Flow phases; a flow's timer ends the phase it is in.
_ALPHA = 0  # paying the per-message overhead alpha_s
_DRAINING = 1  # bytes draining at the max-min rate
_LATENCY = 2  # last byte left, route latency passing
_DONE = 3  # delivered
_TIMER = 4  # not a message: a call_later timer
_HANDSHAKE = 5  # a rendezvous message whose request-to-send is on its way (or being sent)

# Wake-ups handled in one simpy step at most (see _on_wake), so a progress-reporting
# run still gets control back every so often ...
_FAST_FORWARD_HOPS = 4096
# ... and flow rates computed in one simpy step before it hands back: on a contended
# fabric every wake-up may recompute thousands of rates (an alltoall over 512 ranks of a
# fat-tree spent 148 s in 4,096 of them, its progress line silent).
_FAST_FORWARD_RATES = 1 << 20

# Runs of a key queue that a push looks for its key among (see _KeyQueue).
_OPEN_RUNS = 4
# Killed items a key queue holds before it compacts (when they are over half its items).
_COMPACT_MIN = 256

# math.inf as a module constant: a C double when compiled (network.pxd), where reading
# math.inf is a module attribute lookup each time.
_INF = math.inf

# Fibonacci hashing's multiplier (2**64 / the golden ratio): _IntTable's keys, src * n +
# dst, are spread over its entries by the top bits of key * _HASH_MUL.
_HASH_MUL = 0x9E3779B97F4A7C15

_RATE_RTOL = 1e-12  # a new rate this close to the current one is no change
# Jobs draining over a link together for less than this times the clock were not: the
# span is rounding (see _Meeting._settle).
_TOGETHER_RTOL = 1e-12
# A link whose capacity left is at most this times its capacity is full (see
# _fill_joining): a margin for rounding, far below what a link that is not full leaves.
_FULL_RTOL = 1e-9
# Rates within this (relative) of each other are taken as equal where the max-min test
# compares them (see _fill_joining): a margin for rounding, far above it.
_TIE_RTOL = 1e-10


class TransferRecord(NamedTuple):
    """Value of a completed transfer event.

    ``start_s`` is the simulated time ``transfer`` was called, ``end_s`` the
    time the last byte arrived at ``dst`` (so ``end_s - start_s`` includes
    alpha, draining and route latency).
    """

    src: int
    dst: int
    size_bytes: int
    start_s: float
    end_s: float
    tag: object = None


_ONE_TAG = object()
"""``tag2`` of a message delivered as ``on_delivery(tag)`` (any other: ``(tag, tag2)``)."""

_new_tuple = tuple.__new__  # skips NamedTuple's Python-level __new__ on the hot path


def _is_static_route(route: Route) -> bool:
    """Whether ``route`` is ``topologies.Router.path``: a pure function of (src, dst)
    (its routes are fixed by the graph, and with ECMP the default flow key is used)."""
    try:
        from topologies import Router
    except ImportError:  # pragma: no cover - topologies ships with simnet
        return False
    return getattr(route, "__func__", None) is Router.path and isinstance(
        getattr(route, "__self__", None), Router
    )


class LinkMeeting(NamedTuple):
    """What a watched link saw of the jobs sharing it (``FlowNetwork.meetings``)."""

    together_s: float  # seconds during which two or more jobs' bytes drained over it
    full_s: float  # of those, the seconds during which it was full (a bottleneck)
    job_s: list[float]  # each job's seconds draining there while another job did
    # its largest load (bytes/s) while two or more jobs drained over it
    peak_together_bytes_per_s: float = 0.0


class FlowState(NamedTuple):
    """A snapshot of one flow that is currently draining (see ``active_flows``)."""

    src: int
    dst: int
    size_bytes: int
    tag: object
    rate_bytes_per_s: float
    remaining_bytes: float
    links: tuple[LinkKey, ...]


def _grown(ptr: object, count: int, size: int) -> object:
    """``ptr`` (compiled: a C array, None when new) reallocated to ``count`` items of
    ``size`` bytes; raises MemoryError when that fails."""
    grown = PyMem_Realloc(ptr, count * size)
    if grown == cython.NULL:
        raise MemoryError()
    return grown


def _before(key: float, seq: int, key2: float, seq2: int) -> bool:
    """Whether the item (``key``, number ``seq``) comes out of a key queue before the
    item (``key2``, ``seq2``): the lesser key first, ties by the lesser number."""
    return key < key2 or (key == key2 and seq < seq2)


def _least_child(entries: object, child: int, n: int) -> int:
    """Compiled: of a heap's entries ``child`` and ``child + 1`` (if below ``n``), the
    one that comes out first."""
    if child + 1 < n:
        a = cython.address(entries[child + 1])
        b = cython.address(entries[child])
        if _before(a.key, a.seq, b.key, b.seq):
            return child + 1
    return child


def _heap_add(entries: object, i: int, key: float, seq: int, head: int) -> None:
    """Compiled: file the entry (``key``, ``seq``, ``head``) in a heap of ``i`` entries
    whose array has room for one more. ``seq`` is the greatest number queued, so a
    parent of equal key stops it."""
    while i > 0:
        parent = (i - 1) >> 1
        if entries[parent].key <= key:
            break
        entries[i] = entries[parent]
        i = parent
    entries[i].key = key
    entries[i].seq = seq
    entries[i].head = head


def _heap_fill(entries: object, i: int, n: int, placed: bool) -> None:
    """Compiled: the entry at ``i`` out of a heap, the last (``entries[n]``) in its
    place, in a heap of ``n`` entries from then on; with ``placed``, each entry moved
    tells its link where it is (a _LinkHeap's, see _place).

    Bottom-up: the hole goes down the lesser children to a leaf (one comparison a
    level), then the last entry, one of the latest as a rule, rises from there (rarely
    more than a level, above ``i`` if it must); a sift-down comparing it at each level
    too makes twice the comparisons. Entries differ in (key, number), so any heap of
    them pops in the same order."""
    last = entries[n]
    child = 2 * i + 1
    while child < n:
        child = _least_child(entries, child, n)
        entries[i] = entries[child]
        if placed:
            _place(entries, i)
        i = child
        child = 2 * i + 1
    while i > 0:
        parent = (i - 1) >> 1
        if _before(entries[parent].key, entries[parent].seq, last.key, last.seq):
            break
        entries[i] = entries[parent]
        if placed:
            _place(entries, i)
        i = parent
    entries[i] = last
    if placed:
        _place(entries, i)


class _EntryHeap:
    """What the network's heaps share (the timers' _KeyQueue and the water-filling's
    _Heap and _LinkHeap): their count of items, their last number and, compiled, their
    array of C entries (each a key, a number and a node or an item's borrowed pointer),
    grown by _heap_room; in Python, a list kept as a heap by heapq."""

    def __init__(self) -> None:
        self.n = 0  # items queued
        self.last_seq = 0  # the number of the last item filed (the first is 1)
        if not cython.compiled:
            self.heap: list[tuple[float, int, object]] = []
            return
        self.cap = 0
        self.entries = cython.NULL

    def __dealloc__(self) -> None:  # compiled only: the array (the items are borrowed)
        if cython.compiled:
            PyMem_Free(self.entries)

    def first_key(self) -> float:
        """The least key; the heap must not be empty (the network calls _first_key)."""
        return _first_key(self)


def _first_key(h: _EntryHeap) -> float:
    """The least key of a heap that is not empty (compiled: inlined where called)."""
    if not cython.compiled:
        return h.heap[0][0]
    return h.entries[0].key


def _heap_room(h: _EntryHeap, used: int) -> None:
    """Compiled: room in the heap's array for one more entry after the ``used`` ones
    (twice as long when full, 64 entries at first)."""
    if used == h.cap:
        cap = 2 * h.cap if h.cap else 64
        h.entries = cython.cast(
            _QEntryPtr,  # noqa: F821 (C types of network.pxd)
            _grown(h.entries, cap, cython.sizeof(_QEntry)),  # noqa: F821
        )
        h.cap = cap


class _KeyQueue(_EntryHeap):
    """Items by a float key, least first, ties in the order they were pushed: the
    network's timers (key: the time due, s). ``push`` numbers each item; a flow
    keeps its live timer's number, so a timer it has superseded (its rate changed) is
    told apart when it comes out. In Python, a heap of ``(key, number, item)``.

    Compiled, the items pushed under one key since that key was last new are a run, a
    FIFO chain of C nodes, and a binary heap of C structs holds runs (each entry its
    run's key, first number and first node: the next item is one read from the top
    entry, no run record between them), not items: the flows of a bulk-synchronous
    step end, arrive and start at a few equal times, so most pushes append to a run
    that is already queued and most pops take a run's next item with no heap work. A
    push finds its run among the last ``_OPEN_RUNS`` runs made (one of them is
    the newest run of its key, if any is queued, as a key's runs are made only when it
    is not among them); a push under a key that is not there starts a new run, filed
    after the key's older runs. Runs of one key come out in the order they were made,
    each in the order pushed, which is the order of the items' numbers: the same order
    as the heap of tuples. An open run is known by its last node, where a push appends.
    Nodes are reused from a free list, so the queue allocates nothing once it has
    grown. Killed items (``kill``) are taken out all together once they are over half
    the queue (``_compact``).
    """

    def __init__(self) -> None:
        super().__init__()
        self.popped_seq = 0  # the number of the item pop() last returned
        self.last_node = 0  # compiled: the node of the item push() last queued (for kill)
        if not cython.compiled:
            return
        self.size = 0  # runs queued (heap entries)
        self.node_cap = 0
        self.nodes = cython.NULL
        self.free_node = -1  # the first of the unused nodes, chained by .next
        for i in range(_OPEN_RUNS):
            self.open_tail[i] = -1
            self.open_key[i] = 0.0
        self.next_open = 0
        self.dead = 0  # killed items still queued

    def __dealloc__(self) -> None:  # compiled only: the references the nodes hold
        if cython.compiled:  # (the entries' array: _EntryHeap's, after this)
            for i in range(self.size):
                node = self.entries[i].head
                while node >= 0:
                    if self.nodes[node].item != cython.NULL:
                        Py_DECREF(cython.cast(object, self.nodes[node].item))
                    node = self.nodes[node].next
            PyMem_Free(self.nodes)

    def push(self, key: float, item: object) -> int:
        """Queue ``item`` under ``key``; returns the item's number."""
        seq = self.last_seq + 1
        self.last_seq = seq
        if not cython.compiled:
            heappush(self.heap, (key, seq, item))
            self.n += 1
            return seq
        if key == 0.0:
            key = 0.0  # -0.0 is the key 0.0, as in a heap's comparisons
        # A node for the item.
        node = self.free_node
        if node < 0:
            cap = 2 * self.node_cap if self.node_cap else 256
            self.nodes = cython.cast(
                _QNodePtr,  # noqa: F821 (C types of network.pxd)
                _grown(self.nodes, cap, cython.sizeof(_QNode)),  # noqa: F821
            )
            for i in range(self.node_cap, cap - 1):
                self.nodes[i].next = i + 1
            self.nodes[cap - 1].next = -1
            node = self.node_cap
            self.node_cap = cap
        nodes = self.nodes
        self.free_node = nodes[node].next
        Py_INCREF(item)
        nodes[node].seq = seq
        nodes[node].item = cython.cast(cython.pointer(PyObject), item)
        nodes[node].next = -1
        self.last_node = node
        self.n += 1
        # Its key's open run, if there is one: the item goes after the run's last node.
        for i in range(_OPEN_RUNS):
            if self.open_key[i] == key and self.open_tail[i] >= 0:
                nodes[self.open_tail[i]].next = node
                self.open_tail[i] = node
                return seq
        # Else a new run, filed in the heap by (key, its first item's number).
        i = self.next_open
        self.open_tail[i] = node
        self.open_key[i] = key
        self.next_open = (i + 1) % _OPEN_RUNS
        i = self.size
        _heap_room(self, i)
        _heap_add(self.entries, i, key, seq, node)
        self.size += 1
        return seq

    def first_seq(self) -> int:
        """The first item's number; the queue must not be empty."""
        if not cython.compiled:
            return self.heap[0][1]
        return self.nodes[self.entries[0].head].seq

    def first_item(self) -> object:
        """The first item (None if killed); the queue must not be empty."""
        if not cython.compiled:
            return self.heap[0][2]
        item = self.first_ptr()
        return None if item == cython.NULL else cython.cast(object, item)

    def first_ptr(self) -> object:
        """Compiled only: the first item as a borrowed pointer (NULL if killed), read
        without touching the item; the queue must not be empty."""
        return self.nodes[self.entries[0].head].item

    def kill(self, node: int, seq: int) -> None:
        """Compiled: drop the item numbered ``seq`` if it is still queued in ``node``
        (``last_node`` after its push); it stays in its place, as None for ``pop`` and
        ``first_item``, so a superseded timer is passed over without touching its flow,
        whose object is likely out of the caches by then, until the killed items are
        over half the queue and ``_compact`` takes them all out. In Python nothing is
        dropped: callers tell superseded items by their numbers (``popped_seq``)."""
        if cython.compiled and 0 <= node < self.node_cap:
            nd = cython.address(self.nodes[node])
            if nd.seq == seq and nd.item != cython.NULL:
                Py_DECREF(cython.cast(object, nd.item))
                nd.item = cython.NULL
                self.dead += 1
                if self.dead > _COMPACT_MIN and 2 * self.dead > self.n:
                    self._compact()

    def _compact(self) -> None:
        """Compiled: take the killed items out of their runs, and the runs left empty out
        of the heap, which is made again (Floyd's heapify). A calibrated run's rates
        change tens of times a message, each change killing a timer: killed items
        outnumbered the live ones, and each cost a pop, its sifts in a heap grown by
        them (466 instructions a timer popped at 256 ranks). Done when they are more
        than half the items, so each costs O(1) here. The live items keep their nodes
        (a flow's ``tnode`` stays true) and their order: a run's items in the order
        pushed, runs by (key, first number), as before; open runs are closed (a later
        push of their key makes a new run, after them in that order, as its numbers
        are greater)."""
        if not cython.compiled:
            return
        nodes = self.nodes
        entries = self.entries
        kept = 0
        for i in range(self.size):
            head = -1
            tail = -1
            node = entries[i].head
            while node >= 0:
                nxt = nodes[node].next
                if nodes[node].item == cython.NULL:
                    nodes[node].next = self.free_node
                    self.free_node = node
                else:
                    if tail >= 0:
                        nodes[tail].next = node
                    else:
                        head = node
                    tail = node
                node = nxt
            if head >= 0:
                nodes[tail].next = -1
                entries[kept] = entries[i]
                entries[kept].head = head
                kept += 1
        for i in range(_OPEN_RUNS):
            self.open_tail[i] = -1
        self.n -= self.dead
        self.dead = 0
        self.size = kept
        # Floyd's heapify: each parent sifted down, the last first.
        i = (kept - 2) >> 1
        while i >= 0:
            top = entries[i]
            j = i
            child = 2 * j + 1
            while child < kept:
                child = _least_child(entries, child, kept)
                if _before(entries[child].key, entries[child].seq, top.key, top.seq):
                    entries[j] = entries[child]
                    j = child
                    child = 2 * j + 1
                else:
                    break
            entries[j] = top
            i -= 1

    def pop(self) -> object:
        """Take the first item out and return it (its number: ``popped_seq``)."""
        if not cython.compiled:
            _, self.popped_seq, item = heappop(self.heap)
            self.n -= 1
            return item
        entries = self.entries
        nodes = self.nodes
        node = entries[0].head
        if nodes[node].item == cython.NULL:  # killed
            item = None
            self.dead -= 1
        else:
            item = cython.cast(object, nodes[node].item)  # a new reference ...
            Py_DECREF(item)  # ... that takes over the node's
            nodes[node].item = cython.NULL  # (a freed node holds nothing: see kill)
        self.popped_seq = nodes[node].seq
        self.n -= 1
        nxt = nodes[node].next
        nodes[node].next = self.free_node
        self.free_node = node
        if nxt >= 0:
            entries[0].head = nxt
            return item
        # The run is spent (forget it if it is open: its last node was its tail), and
        # the last heap entry takes the root's place.
        for i in range(_OPEN_RUNS):
            if self.open_tail[i] == node:
                self.open_tail[i] = -1
        n = self.size - 1
        self.size = n
        if n:
            _heap_fill(entries, 0, n, False)
        return item


class _Heap(_EntryHeap):
    """Items by a float key, least first, ties in the order pushed (each push numbered
    as in _KeyQueue): the water-filling's kept flows to check, by rate (bytes/s). In
    Python, a heap of ``(key, number, item)``.

    Compiled, a binary heap of C entries, each its item's key, number and pointer,
    without references: the items are draining flows, which outlive a filling, and the
    filling pops them all. Their rates rarely tie in a calibrated run, so each was a
    run of its own in a _KeyQueue, paying for a node, its chain and the search of the
    open runs besides the heap; here an item is one entry."""

    def push(self, key: float, item: object) -> None:
        """Queue ``item`` under ``key``; compiled, the caller keeps it alive until it
        comes out."""
        seq = self.last_seq + 1
        self.last_seq = seq
        if not cython.compiled:
            heappush(self.heap, (key, seq, item))
            self.n += 1
            return
        _heap_room(self, self.n)
        ptr = cython.cast(_ObjectPtr, item)  # noqa: F821
        _heap_add(self.entries, self.n, key, seq, cython.cast(cython.Py_ssize_t, ptr))
        self.n += 1

    def pop(self) -> object:
        """Take the first item out and return it; the queue must not be empty."""
        if not cython.compiled:
            item = heappop(self.heap)[2]
            self.n -= 1
            return item
        entries = self.entries
        item = cython.cast(object, cython.cast(_ObjectPtr, entries[0].head))  # noqa: F821
        n = self.n - 1
        self.n = n
        if n:
            _heap_fill(entries, 0, n, False)
        return item


class _LinkHeap(_EntryHeap):
    """The water-filling's links by fair share (bytes/s), least first, ties in the order
    they were filed, each link queued at most once: the links filled over that have
    flows to freeze (``n_unfrozen``).

    ``file`` queues a link under a share, or, if it is queued under more, moves it to
    the new share as if filed again now; a link queued under less keeps its place (it
    is filed again when it comes out, if its share grew: the filling's lazy lower
    bound). ``drop`` takes a link out when its last flow to freeze froze through
    another link. So the heap holds no link twice and none with nothing left to freeze:
    in a calibrated run at 128 ranks, the keyed queue of one entry per filing popped
    52 links a message, 25 of them with nothing left to freeze and 12 of those filed
    twice.

    Compiled, a binary heap of C entries (share, number, the link's pointer, borrowed:
    links outlive the filling, which leaves the heap empty), each link knowing its
    entry's place (``qpos``, -1 when not queued). In Python, a heap of ``(share,
    number, link)`` and a dict of each queued link's live ``(share, number)``; entries
    superseded or dropped are passed over. Both come out in (share, number) order."""

    def __init__(self) -> None:
        super().__init__()
        if not cython.compiled:
            self.live: dict[_Link, tuple[float, int]] = {}

    def file(self, link: _Link, share: float) -> None:
        """Queue ``link`` under ``share``, unless it is queued under as little or less;
        queued under more, it moves to ``share`` and after the links filed before."""
        if not cython.compiled:
            had = self.live.get(link)
            if had is not None and not share < had[0]:
                return
            if had is None:
                self.n += 1
            self.last_seq += 1
            self.live[link] = (share, self.last_seq)
            heappush(self.heap, (share, self.last_seq, link))
            return
        i = link.qpos
        if i >= 0:
            if not share < self.entries[i].key:
                return
        else:
            _heap_room(self, self.n)
            i = self.n
            self.n = i + 1
        self.last_seq += 1
        entries = self.entries
        # Up from its place: its number is the greatest, so a parent of equal share
        # stops it.
        while i > 0:
            parent = (i - 1) >> 1
            if entries[parent].key <= share:
                break
            entries[i] = entries[parent]
            _place(entries, i)
            i = parent
        entries[i].key = share
        entries[i].seq = self.last_seq
        entries[i].head = cython.cast(cython.Py_ssize_t, cython.cast(_ObjectPtr, link))  # noqa: F821
        link.qpos = i

    def pop(self) -> _Link:
        """Take the first link out and return it; the heap must not be empty."""
        if not cython.compiled:
            link = heappop(self.heap)[2]
            del self.live[link]
            self.n -= 1
            self._settle()
            return link
        link = _link_of(self.entries[0])
        self._take(0)
        return link

    def drop(self, link: _Link) -> None:
        """Take ``link`` out if it is queued."""
        if not cython.compiled:
            if self.live.pop(link, None) is not None:
                self.n -= 1
                self._settle()
            return
        if link.qpos >= 0:
            self._take(link.qpos)

    def _settle(self) -> None:
        """Python only: the entries at the top that are no link's live one out, so that
        the top is the first link's (``first_key``)."""
        heap = self.heap
        live = self.live
        while heap and live.get(heap[0][2]) != heap[0][:2]:
            heappop(heap)

    def _take(self, i: int) -> None:
        """Compiled: the entry at ``i`` out, the last in its place (_heap_fill)."""
        entries = self.entries
        cython.cast(_Link, cython.cast(_ObjectPtr, entries[i].head)).qpos = -1  # noqa: F821
        n = self.n - 1
        self.n = n
        if i < n:
            _heap_fill(entries, i, n, True)


def _link_of(entry: object) -> _Link:
    """Compiled: the link of a _LinkHeap entry."""
    return cython.cast(_Link, cython.cast(_ObjectPtr, entry.head))  # noqa: F821


def _place(entries: object, i: int) -> None:
    """Compiled: tell the link of ``entries[i]`` that its entry is at ``i`` (through the
    borrowed pointer: no reference counted)."""
    cython.cast(_Link, cython.cast(_ObjectPtr, entries[i].head)).qpos = i  # noqa: F821


class _IntTable:
    """Objects (not None) by a non-negative integer key: the static paths by ``src * n +
    dst``, the executor's pending messages by channel number.

    In Python, a dict. Compiled, open addressing over one C array of (key, object)
    entries, probed linearly from a multiplicative hash of the key, at most half full:
    a lookup reads one entry (a cache line) where a dict's reads its table, then its
    entry, then compares the key's int object, three cache misses on a big network; and
    no int object is made for a key. A key taken out leaves no tombstone: the entries
    after it in its probe sequence move back (see ``take``). ``get`` and ``take`` return
    None for a key not there.
    """

    def __init__(self) -> None:
        self.n = 0
        if not cython.compiled:
            self.d: dict[int, object] = {}
            return
        self.cap = 0
        self.shift = 64
        self.entries = cython.NULL

    def __dealloc__(self) -> None:  # compiled only: the objects' references, the array
        if cython.compiled:
            for i in range(self.cap):
                if self.entries[i].key >= 0:
                    Py_DECREF(cython.cast(object, self.entries[i].item))
            PyMem_Free(self.entries)

    def __len__(self) -> int:
        return self.n

    def _home(self, key: int) -> int:
        """Compiled: the entry where the probe for ``key`` starts (the top bits of its
        product with _HASH_MUL, mod 2**64)."""
        h = cython.cast(cython.ulonglong, key) * _HASH_MUL
        return cython.cast(cython.Py_ssize_t, h >> self.shift)

    def _slot(self, key: int) -> int:
        """Compiled: the entry of ``key``, or the empty one where it would go."""
        mask = self.cap - 1
        i = self._home(key)
        while True:
            k = self.entries[i].key
            if k == key or k < 0:
                return i
            i = (i + 1) & mask

    def get(self, key: int) -> object:
        """The object of ``key`` (>= 0), or None."""
        if not cython.compiled:
            return self.d.get(key)
        if not self.cap:
            return None
        i = self._slot(key)
        if self.entries[i].key < 0:
            return None
        return cython.cast(object, self.entries[i].item)

    def take(self, key: int) -> object:
        """Remove the object of ``key`` and return it; None if the key is not there."""
        if not cython.compiled:
            item = self.d.pop(key, None)
            if item is not None:
                self.n -= 1
            return item
        if not self.cap:
            return None
        i = self._slot(key)
        entries = self.entries
        if entries[i].key < 0:
            return None
        item = cython.cast(object, entries[i].item)  # a new reference ...
        Py_DECREF(item)  # ... that takes over the table's
        self.n -= 1
        # Move back every later entry of the run whose home slot is not in (i, j]:
        # probing from its home would otherwise stop at the hole.
        mask = self.cap - 1
        j = i
        while True:
            j = (j + 1) & mask
            k = entries[j].key
            if k < 0:
                break
            home = self._home(k)
            # It stays if its home is cyclically in (i, j].
            stays = (i < home <= j) if i <= j else (home > i or home <= j)
            if stays:
                continue
            entries[i] = entries[j]
            i = j
        entries[i].key = -1
        return item

    def items(self) -> list[tuple[int, object]]:
        """Every (key, object), in no particular order."""
        if not cython.compiled:
            return list(self.d.items())
        return [
            (self.entries[i].key, cython.cast(object, self.entries[i].item))
            for i in range(self.cap)
            if self.entries[i].key >= 0
        ]

    def add(self, key: int, item: object) -> object:
        """Set the object of ``key`` (>= 0) if it has none and return None; else return
        the one it has, unchanged (one probe either way)."""
        if key < 0:
            raise ValueError(f"keys must be >= 0, got {key}")
        if not cython.compiled:
            old = self.d.setdefault(key, item)
            if old is item and len(self.d) > self.n:
                self.n += 1
                return None
            return old
        if 2 * (self.n + 1) > self.cap:
            self._grow()
        i = self._slot(key)
        if self.entries[i].key == key:
            return cython.cast(object, self.entries[i].item)
        Py_INCREF(item)
        self.entries[i].key = key
        self.entries[i].item = cython.cast(cython.pointer(PyObject), item)
        self.n += 1
        return None

    def put(self, key: int, item: object) -> None:
        """Set the object of ``key`` (>= 0)."""
        if key < 0:
            raise ValueError(f"keys must be >= 0, got {key}")
        if not cython.compiled:
            if key not in self.d:
                self.n += 1
            self.d[key] = item
            return
        if 2 * (self.n + 1) > self.cap:
            self._grow()
        i = self._slot(key)
        Py_INCREF(item)
        if self.entries[i].key == key:
            Py_DECREF(cython.cast(object, self.entries[i].item))
        else:
            self.entries[i].key = key
            self.n += 1
        self.entries[i].item = cython.cast(cython.pointer(PyObject), item)

    def _grow(self) -> None:
        """Compiled: twice the entries (64 at first), every key placed again."""
        old = self.entries
        old_cap = self.cap
        cap = 2 * old_cap if old_cap else 64
        self.entries = cython.cast(
            _TEntryPtr,  # noqa: F821 (C types of network.pxd)
            _grown(cython.NULL, cap, cython.sizeof(_TEntry)),  # noqa: F821
        )
        self.cap = cap
        self.shift -= 1 if old_cap else 6  # 64 - log2(cap)
        for i in range(cap):
            self.entries[i].key = -1
        for i in range(old_cap):
            if old[i].key >= 0:
                j = self._slot(old[i].key)
                self.entries[j] = old[i]
        PyMem_Free(old)


class _Series:
    """A link's load series: change points ``(time_s, rate_bytes_per_s)``, the load
    piecewise constant from each to the next. Compiled, two C arrays of doubles (a
    point costs 16 bytes and no objects: a 1,024-rank fat-tree run records 2 million);
    in Python, two lists. ``points`` gives them as a list of tuples."""

    def __init__(self) -> None:
        self.n = 0
        if cython.compiled:
            self.cap = 0
            self.t = cython.NULL
            self.v = cython.NULL
        else:
            self.ts: list[float] = []
            self.vs: list[float] = []

    def __dealloc__(self) -> None:  # compiled only: the arrays
        if cython.compiled:
            PyMem_Free(self.t)
            PyMem_Free(self.v)

    def record(self, now: float, load: float) -> None:
        """A new load (bytes/s) from ``now`` (s): it replaces a point made at the same
        time (and then goes if the point before holds the same load); a series does not
        start at 0."""
        n = self.n
        if cython.compiled:
            if n and self.t[n - 1] == now:
                n -= 1
                self.n = n
                if n and self.v[n - 1] == load:
                    return
            if n or load != 0.0:
                if n == self.cap:
                    cap = 2 * n if n else 8
                    self.t = cython.cast(
                        cython.p_double, _grown(self.t, cap, cython.sizeof(cython.double))
                    )
                    self.v = cython.cast(
                        cython.p_double, _grown(self.v, cap, cython.sizeof(cython.double))
                    )
                    self.cap = cap
                self.t[n] = now
                self.v[n] = load
                self.n = n + 1
            return
        if n and self.ts[-1] == now:
            self.ts.pop()
            self.vs.pop()
            n -= 1
            self.n = n
            if n and self.vs[-1] == load:
                return
        if n or load != 0.0:
            self.ts.append(now)
            self.vs.append(load)
            self.n = n + 1

    def points(self) -> list[tuple[float, float]]:
        """The change points, oldest first."""
        if cython.compiled:
            return [(self.t[i], self.v[i]) for i in range(self.n)]
        return list(zip(self.ts, self.vs, strict=True))

    def array(self) -> np.ndarray:
        """The change points, oldest first, as an ``(n, 2)`` float64 array of
        ``time_s, rate_bytes_per_s`` rows: 16 bytes a point, where ``points``' tuples
        take about 110 (a 1,152-rank GPT-3 run records 16 million points)."""
        out = np.empty((self.n, 2))
        if cython.compiled:
            if self.n:
                size = self.n * cython.sizeof(cython.double)
                t = PyBytes_FromStringAndSize(cython.cast(cython.p_char, self.t), size)
                v = PyBytes_FromStringAndSize(cython.cast(cython.p_char, self.v), size)
                out[:, 0] = np.frombuffer(t)
                out[:, 1] = np.frombuffer(v)
        else:
            out[:, 0] = self.ts
            out[:, 1] = self.vs
        return out


class _Meeting:
    """Which jobs' bytes drain over one link at the same time, and whether the link is full
    meanwhile: a watched link's record (``FlowNetwork.watch_links``). A job drains there
    while one of its flows is in its draining phase on the link (not while it pays alpha
    or its route latency passes). The link is full while its load is its capacity (within
    rounding): a job there could go faster only at another's expense (unless each one's
    flows are held elsewhere at exactly their share: a tie, full with nobody waiting)."""

    __slots__ = (
        "active",
        "counts",
        "full",
        "full_at",
        "full_s",
        "job_of",
        "job_s",
        "load_now",
        "peak_together",
        "since_s",
        "together_s",
    )

    def __init__(self, job_of: list[int], n_jobs: int, capacity_bytes_per_s: float) -> None:
        self.job_of = job_of  # source endpoint -> its job's index
        self.counts = [0] * n_jobs  # each job's flows draining here now
        self.job_s = [0.0] * n_jobs  # seconds each job drained here while another did
        self.active = 0  # jobs draining here now
        self.since_s = 0.0  # the last change (s)
        self.together_s = 0.0  # seconds during which two or more jobs drained here
        # A load at or above this (bytes/s) fills the link: below its capacity by the
        # max-min test's margin for rounding (_FULL_RTOL).
        self.full_at = capacity_bytes_per_s * (1.0 - _FULL_RTOL)
        self.full = False  # whether the link is full now
        self.full_s = 0.0  # seconds during which two or more jobs drained here, it full
        self.load_now = 0.0  # the link's load now (bytes/s)
        # its largest load (bytes/s) over a span two or more jobs drained here
        self.peak_together = 0.0

    def _settle(self, now: float) -> None:
        """Count the time since the last change, if two or more jobs drained meanwhile.
        A span within rounding of nothing is none: a job whose first byte comes as
        another's last leaves can be 1e-19 s "together" with it."""
        dt = now - self.since_s
        if self.active >= 2 and dt > now * _TOGETHER_RTOL:
            self.together_s += dt
            if self.full:
                self.full_s += dt
            if self.load_now > self.peak_together:
                self.peak_together = self.load_now
            for j in range(len(self.counts)):
                if self.counts[j]:
                    self.job_s[j] += dt
        self.since_s = now

    def start(self, src: object, now: float) -> None:
        """A flow from endpoint ``src`` begins draining over the link at ``now`` (s)."""
        j = self.job_of[src]
        if j < 0:
            raise ValueError(f"watched link: endpoint {src!r} sends but has no job")
        self._settle(now)
        c = self.counts[j]
        if not c:
            self.active += 1
        self.counts[j] = c + 1

    def end(self, src: object, now: float) -> None:
        """A flow from endpoint ``src`` stops draining over the link at ``now`` (s)."""
        j = self.job_of[src]
        self._settle(now)
        c = self.counts[j] - 1
        if not c:
            self.active -= 1
        self.counts[j] = c

    def load(self, load: float, now: float) -> None:
        """The link's load became ``load`` (bytes/s) at ``now`` (s)."""
        self._settle(now)
        self.load_now = load
        self.full = load >= self.full_at


class _Link:
    """One directed link (graph edge or virtual injection port) and its counters."""

    __slots__ = (
        "busy_s",
        "busy_since_s",
        "bytes_total",
        "capacity_bytes_per_s",
        "fl",
        "kept_max",
        "key",
        "latency_s",
        "load_bytes_per_s",
        "load_mark",
        "mark",
        "n_flows",
        "n_unfrozen",
        "peak_load_bytes_per_s",
        "qpos",
        "rem_capacity_bytes_per_s",
        "series",
        "watch",
    )

    def __init__(self, key: LinkKey, capacity_bytes_per_s: float, latency_s: float) -> None:
        self.key = key
        self.capacity_bytes_per_s = capacity_bytes_per_s
        self.latency_s = latency_s
        # Flows draining through this link, in the order they began (so results are
        # deterministic), and their number, n_flows; added by _list_flow, taken out by
        # _unlist the moment they stop draining, read by _flow_at. In Python a list;
        # compiled, an array of the flows' pointers (references held) inside the link
        # while it holds at most two, else on the heap: no list object between a link
        # and its flows, where each visit of a link on a big network was one more
        # cache miss.
        self.n_flows = 0
        if cython.compiled:
            self.fl = cython.address(self.fl_small[0])
            self.fl_cap = 2
        else:
            self.fl: list[_Flow] = []
        self.bytes_total = 0
        self.busy_s = 0.0
        self.busy_since_s = 0.0
        self.load_bytes_per_s = 0.0
        self.peak_load_bytes_per_s = 0.0
        self.series: _Series | None = None  # with record_link_series
        self.watch: _Meeting | None = None  # a jobs run's record (FlowNetwork.watch_links)
        # Scratch space for the max-min pass (see FlowNetwork._flush).
        self.mark = 0
        self.load_mark = 0
        self.kept_max = 0.0
        self.rem_capacity_bytes_per_s = 0.0
        self.n_unfrozen = 0
        self.qpos = -1  # compiled: its place in the filling's heap (_LinkHeap), -1: none

    def __dealloc__(self) -> None:  # compiled only: the flows' references, the array
        if cython.compiled:
            for i in range(self.n_flows):
                Py_DECREF(cython.cast(object, self.fl[i]))
            if self.fl != cython.address(self.fl_small[0]):
                PyMem_Free(self.fl)

    @property
    def flows(self) -> list[_Flow]:
        """The flows draining through the link, in the order they began (a new list)."""
        return [_flow_at(self, i) for i in range(self.n_flows)]


def _flow_at(link: _Link, i: int) -> _Flow:
    """The ``i``-th of the flows draining through ``link`` (0 <= i < n_flows)."""
    if cython.compiled:
        return cython.cast(_Flow, link.fl[i])
    return link.fl[i]


def _list_flow(link: _Link, flow: _Flow) -> int:
    """Add a flow that begins draining to the link's flows; returns their new number."""
    n = link.n_flows
    if cython.compiled:
        if n == link.fl_cap:
            cap = 2 * n
            small = cython.address(link.fl_small[0])
            inline = link.fl == small
            grown = cython.cast(
                _ObjectArray,  # noqa: F821 (a C type of network.pxd)
                _grown(
                    cython.NULL if inline else link.fl,
                    cap,
                    cython.sizeof(_ObjectPtr),  # noqa: F821
                ),
            )
            if inline:  # (the heap array's first: its items move there)
                for i in range(n):
                    grown[i] = small[i]
            link.fl = grown
            link.fl_cap = cap
        Py_INCREF(flow)
        link.fl[n] = cython.cast(_ObjectPtr, flow)  # noqa: F821
    else:
        link.fl.append(flow)
    n += 1
    link.n_flows = n
    return n


class _Stack:
    """Links or flows as a max-min pass gathers them (the links filled over, the flows
    filled again, the links whose loads to sum), kept by the network from pass to
    pass. In Python its items are a list; compiled, an array of borrowed pointers that
    is reset, not freed: each component of each pass made four lists before, and their appends,
    growth and freeing were about 6% of a contended message's instructions (callgrind,
    1,024 ranks). Borrowed is safe: links live as long as the network, and a flow
    gathered in a pass drains (a link holds it) until the pass is over."""

    __slots__ = ("items", "n")

    def __init__(self) -> None:
        self.n = 0
        if cython.compiled:
            self.items = cython.NULL
            self.cap = 0
        else:
            self.items: list = []

    def __dealloc__(self) -> None:  # compiled only: the array
        if cython.compiled:
            PyMem_Free(self.items)


def _push(stack: _Stack, item: object) -> None:
    """Add ``item`` (a _Link or a _Flow) at the end of ``stack``."""
    n = stack.n
    if cython.compiled:
        if n == stack.cap:
            _grow_stack(stack)
        stack.items[n] = cython.cast(_ObjectPtr, item)  # noqa: F821
    else:
        stack.items.append(item)
    stack.n = n + 1


def _grow_stack(stack: _Stack) -> int:
    """Double a full stack's array (compiled only; apart from _push, which the C compiler
    then inlines where it is called)."""
    n = stack.n
    cap = 2 * n if n else 64
    stack.items = cython.cast(
        _ObjectArray,  # noqa: F821 (a C type of network.pxd)
        _grown(stack.items, cap, cython.sizeof(_ObjectPtr)),  # noqa: F821
    )
    stack.cap = cap
    return 0


def _truncate(stack: _Stack, n: int) -> None:
    """Keep the first ``n`` items of ``stack`` (0: none)."""
    stack.n = n
    if not cython.compiled:
        del stack.items[n:]


def _empty(links: _Stack, flows: _Stack, touched: _Stack) -> None:
    """Empty a max-min pass's three stacks (see FlowNetwork._flush)."""
    _truncate(links, 0)
    _truncate(flows, 0)
    _truncate(touched, 0)


def _link_in(stack: _Stack, i: int) -> _Link:
    """The ``i``-th item of a stack of links."""
    if cython.compiled:
        return cython.cast(_Link, stack.items[i])
    return stack.items[i]


def _flow_in(stack: _Stack, i: int) -> _Flow:
    """The ``i``-th item of a stack of flows."""
    if cython.compiled:
        return cython.cast(_Flow, stack.items[i])
    return stack.items[i]


class _Sink:
    """What a message can be delivered to by a direct call: a message started with
    ``on_delivery`` None and a ``_Sink`` as ``tag2`` is delivered as
    ``tag2.delivered(tag)``. Compiled, that is a C call through the type, where calling
    a Python-level function parses and checks its arguments each message."""

    __slots__ = ()

    def delivered(self, tag: object) -> None:
        raise NotImplementedError


class _Pair:
    """Per (src, dst): messages in flight (posted, not yet delivered) and the seconds
    during which at least one was, shared by every path of the pair."""

    __slots__ = ("busy_s", "busy_since_s", "in_flight")

    def __init__(self) -> None:
        self.in_flight = 0
        self.busy_since_s = 0.0
        self.busy_s = 0.0


class _Path(_Pair):
    """A resolved route between two endpoints and the per-path pair counters.

    ``pair`` holds the counters of its pair (src, dst), shared by every path of it; or
    is None where the path is its pair's only one (a route that is a pure function of
    the pair: the static table), which then keeps them itself, one object fewer for
    each message to reach."""

    __slots__ = (
        "bytes_total",
        "dst",
        "duration_s",
        "edges",
        "latency_s",
        "links",
        "messages",
        "n_links",
        "pair",
        "src",
    )

    def __init__(
        self,
        src: int,
        dst: int,
        edges: tuple,
        links: tuple[_Link, ...],
        latency_s: float,
        pair: _Pair | None,
    ) -> None:
        self.in_flight = 0
        self.busy_since_s = 0.0
        self.busy_s = 0.0
        self.src = src
        self.dst = dst
        self.edges = edges
        self.links = links
        self.n_links = len(links)
        if cython.compiled:
            _keep_links(self, links)
        self.latency_s = latency_s
        self.pair = pair
        self.bytes_total = 0
        self.duration_s = 0.0
        self.messages = 0


# Cython takes class decorators from here, not from network.pxd (where a free list once
# declared was silently ignored), and only on a class marked cclass here too.
@cython.freelist(1024)
@cython.no_gc
@cython.cclass
class _Flow:
    """One message in flight: its route, size, phase, rate and timer.

    Made and freed once per message, so a plain slotted object with no
    ``__init__`` (``start_transfer`` sets every field); compiled, freed objects are
    kept for the next messages (a free list), which skips the allocator and reuses
    memory that is likely still in cache. Compiled, flows are not tracked by the
    cyclic collector: a flow in flight is held by the timer queue, whose C nodes the
    collector cannot see (from its start to the next max-min pass of that instant, by
    its links' lists and the pass's seeds instead), so tracking one never let the
    collector free it, and untracking it at every message's end unlinked it from the
    collector's list (touching two other objects).
    """

    __slots__ = (
        "bn",
        "fill_bytes_per_s",
        "last_update_s",
        "lk",
        "mark",
        "n_links",
        "notify",
        "path",
        "phase",
        "rate_bytes_per_s",
        "remaining_bytes",
        "seq",
        "size_bytes",
        "start_s",
        "tag",
        "tag2",
        "timer",
        "tnode",
    )

    @property
    def links(self) -> tuple[_Link, ...]:
        """The links the flow drains through: its route's, or none (no bytes)."""
        return tuple([_link_at(self, j) for j in range(self.n_links)])


def _link_at(flow: _Flow, j: int) -> _Link:
    """The ``j``-th link the flow drains through (0 <= j < n_links)."""
    if cython.compiled:
        return cython.cast(_Link, flow.lk[j])
    return flow.lk[j]


def _set_bn(f: _Flow, link: _Link) -> None:
    """Make ``link`` (one of the flow's) its bottleneck (compiled: a borrowed pointer,
    the flow's path holds its links)."""
    if cython.compiled:
        f.bn = cython.cast(_ObjectPtr, link)  # noqa: F821 (a C type of network.pxd)
    else:
        f.bn = link


def _bn_is(f: _Flow, link: _Link) -> bool:
    """Whether ``link`` is the flow's bottleneck; compiled, two pointers compared: the
    bottleneck's object, likely out of the caches, is not read (reading it for its
    reference count was an eighth of the kept flows' scan in a calibrated run)."""
    if cython.compiled:
        return f.bn == cython.cast(_ObjectPtr, link)  # noqa: F821
    return f.bn is link


def _bn_of(f: _Flow) -> _Link:
    """The flow's bottleneck link (set once it has a rate)."""
    if cython.compiled:
        return cython.cast(_Link, f.bn)
    return f.bn


def _keep_links(path: _Path, links: tuple) -> None:
    """Compiled only: the path's links (its tuple ``links``) where a message's start
    reads them (see ``_inline_links``)."""
    path.lk = _inline_links(
        _tuple_items(links),  # noqa: F821 (network.pxd)
        len(links),
        cython.address(path.lk_small[0]),
    )


def _set_links(flow: _Flow, path: _Path) -> None:
    """Make ``path``'s links the links the flow drains through.

    Compiled, up to six are copied into the flow (a fat-tree's longest route), from
    the path's own copy, so the max-min passes and the flow's end reach them from the
    flow without touching its path (see ``_inline_links``)."""
    n = path.n_links
    flow.n_links = n
    if cython.compiled:
        flow.lk = _inline_links(path.lk, n, cython.address(flow.lk_small[0]))
    else:
        flow.lk = path.links


def _inline_links(items: object, n: int, small: object) -> object:
    """Compiled only: the ``n`` link pointers ``items`` copied into an object's inline
    array ``small`` (six long: lk_small in network.pxd) and returned from there, or
    ``items`` itself for a longer route. Borrowed either way: the path's tuple holds
    the links."""
    if n > 6:
        return items
    for j in range(n):
        small[j] = items[j]
    return small


def _add_pair_sums(out: dict, paths: Iterable[_Path], figure: int) -> None:
    """Add one figure of the ``paths`` that carried messages to ``out``'s by (src, dst):
    ``figure`` 0 their bytes, 1 their messages' durations (s), 2 their messages."""
    for path in paths:
        if path.messages:
            key = (path.src, path.dst)
            if figure == 0:
                v = path.bytes_total
            elif figure == 1:
                v = path.duration_s
            else:
                v = path.messages
            out[key] = out.get(key, 0) + v


def _endpoint(x: int, n: int) -> int:
    """``x`` (an int) if it is an endpoint's number, 0 <= x < n; else -1 (also for an
    int too large for C, which compiled must not raise: the Router names it)."""
    if cython.compiled:
        overflow = 0
        v = _as_longlong(x, cython.address(overflow))  # noqa: F821 (network.pxd)
        return v if overflow == 0 and 0 <= v < n else -1
    return x if 0 <= x < n else -1


class FlowNetwork:
    """Flow-level network with max-min fair bandwidth sharing.

    ``transfer(src, dst, size_bytes, tag)`` returns a :class:`simpy.Event`
    whose value is a :class:`TransferRecord`; see its docstring for timing.

    Parameters
    ----------
    env:
        The simpy environment the transfers run in.
    graph:
        Directed graph; every edge used by a route needs ``bandwidth``
        (bytes/s, > 0) and ``latency`` (s, >= 0).
    route:
        ``route(src, dst)`` returns the directed edges ``(u, v)`` of the path
        from ``src`` to ``dst`` (empty when ``src == dst``). It is called once
        per transfer with ``src != dst``, so it may return different paths over
        time; returning the same tuple for a pair is fastest. The one exception:
        ``start_transfer`` calls a ``topologies.Router``'s ``path`` once per
        pair, as its routes are a pure function of the pair.
    alpha_s:
        Per-message overhead in seconds, paid before the first byte moves.
    injection_bandwidth_bytes_per_s:
        If set, every flow also crosses a virtual egress link of its ``src``
        (key ``(EGRESS, src)``) and a virtual ingress link of its ``dst``
        (key ``(INGRESS, dst)``), each with this capacity and zero latency.
    record_link_series:
        Keep per link a piecewise-constant series of
        ``(time_s, total_rate_bytes_per_s)`` change points (see ``link_series``).
    send_overhead_s:
        LogGP's o (s): paid by each message at its sender, one after another.
    rendezvous_handshake:
        ``start_rendezvous`` makes its data wait for a request-to-send: a zero-byte
        message's time (``alpha_s`` + route latency) after the send was posted.

    Statistics (bytes are exact integers, times in s, rates in bytes/s). Links
    appear once some route has used them, in order of first use.

    * ``link_bytes()``: bytes per link, each flow adding its size to every link
      of its route (injection ports included) when its last byte leaves;
    * ``link_busy_s()``: seconds per link with at least one flow draining;
    * ``utilisation(link, horizon_s)`` and ``busy_fraction(link, horizon_s)``;
    * ``link_peak_load_bytes_per_s()``: the largest sum of flow rates ever seen
      on each link; ``max_overload_ratio()`` is the largest peak / capacity;
    * ``pair_bytes``, ``pair_duration_s``, ``pair_messages``: per ``(src, dst)``
      bytes, sum of transfer durations (``end_s - start_s``) and message count
      of completed transfers; ``pair_busy_s``: seconds with at least one message
      of the pair in flight; ``pair_rate_bytes_per_s(src, dst)``: bytes over busy
      seconds;
    * counters ``transfers_started``, ``transfers_completed``,
      ``recomputations`` (components whose max-min rates were computed),
      ``flows_rerated`` (flow rates computed, summed over recomputations) and
      ``rates_changed`` (of those, the rates that were new: a flow's first, or one
      that moved by more than the rounding tolerance); ``flows_rerated -
      rates_changed`` is max-min work that found a rate as it was.
    """

    def __init__(
        self,
        env: simpy.Environment,
        graph: nx.DiGraph,
        route: Route,
        *,
        alpha_s: float = 0.0,
        injection_bandwidth_bytes_per_s: float | None = None,
        record_link_series: bool = False,
        send_overhead_s: float = 0.0,
        rendezvous_handshake: bool = False,
    ) -> None:
        if not graph.is_directed():
            raise TypeError(
                "graph must be a networkx.DiGraph (one edge per direction, each with "
                "'bandwidth' in bytes/s and 'latency' in s); convert with graph.to_directed()"
            )
        alpha_s = float(alpha_s)
        if not (math.isfinite(alpha_s) and alpha_s >= 0.0):
            raise ValueError(f"alpha_s must be a finite number >= 0 seconds, got {alpha_s!r}")
        send_overhead_s = float(send_overhead_s)
        if not (math.isfinite(send_overhead_s) and send_overhead_s >= 0.0):
            raise ValueError(
                f"send_overhead_s must be a finite number >= 0 seconds, got {send_overhead_s!r}"
            )
        if injection_bandwidth_bytes_per_s is not None:
            injection_bandwidth_bytes_per_s = float(injection_bandwidth_bytes_per_s)
            if not (
                math.isfinite(injection_bandwidth_bytes_per_s)
                and injection_bandwidth_bytes_per_s > 0.0
            ):
                raise ValueError(
                    "injection_bandwidth_bytes_per_s must be a finite number > 0 bytes/s "
                    f"or None, got {injection_bandwidth_bytes_per_s!r}"
                )
        self.env = env
        self.graph = graph
        self.route = route
        self.alpha_s = alpha_s
        self.rendezvous_handshake = bool(rendezvous_handshake)
        self.send_overhead_s = send_overhead_s
        # Per source endpoint: when its last message's send overhead ends (seconds).
        self._send_free: dict[int, float] = {}
        self.injection_bandwidth_bytes_per_s = injection_bandwidth_bytes_per_s
        self.record_link_series = bool(record_link_series)

        self.transfers_started = 0
        self.transfers_completed = 0
        self.recomputations = 0
        self.flows_rerated = 0
        self.rates_changed = 0

        self._links: dict[LinkKey, _Link] = {}
        self._paths: dict[tuple, _Path] = {}  # (src, dst, edges) -> path
        self._last_path: dict[tuple[int, int], _Path] = {}  # last path of each pair
        # id(edges) -> its path; valid while path.edges is that very object (which the
        # path keeps alive, so the id cannot be reused by another object meanwhile).
        self._path_of_edges: dict[int, _Path] = {}
        # The path of each pair src -> dst by src * n + dst, when the route is known to be
        # a pure function of the pair and the endpoints are 0..n-1 (n of them): one probe
        # of a C table per message when compiled (see _IntTable).
        self._static: _IntTable | None = None
        self._n_ends = 0
        if _is_static_route(route):
            ends = route.__self__.endpoint_ints
            if not ends or (min(ends) == 0 and max(ends) == len(ends) - 1):
                self._static = _IntTable()
                self._n_ends = len(ends)
        # The static table's paths in the order they were made (what _paths holds for
        # other routes), and the Router's route without its own cache: the table keeps
        # every route once.
        self._static_list: list[_Path] = []
        self._route_once = route.__self__.path_uncached if self._static is not None else None
        self._self_paths: dict[int, _Path] = {}  # src == dst
        self._pairs: dict[tuple[int, int], _Pair] = {}

        # The flows' and call_later's timers, due by time, then in the order they were set.
        self._timers = _KeyQueue()
        self._fill_queue = _LinkHeap()  # the water-filling's, empty between fills
        self._check_queue = _Heap()  # kept flows to test during it (see _fill_joining)
        # A max-min pass's links filled over, flows filled again and links whose loads to
        # sum (see _flush); empty between passes.
        self._comp_links = _Stack()
        self._comp_flows = _Stack()
        self._touched = _Stack()
        self._wake_pending: list[float] = []  # target times of scheduled simpy wake-ups
        self._waking = False  # inside _on_wake (then _now_s is simpy's clock)
        self._now_s = 0.0
        self._dirty: list[_Link] = []  # links whose flows began or ended (see _flush)
        # simpy's event queue, a heap of (time, priority, id, event), when this simpy
        # version keeps it where _on_wake can look (else every wake-up is a timeout).
        # Only a plain Environment: a RealtimeEnvironment must wait out every instant.
        queue = getattr(env, "_queue", None)
        plain = type(env) is simpy.Environment and type(queue) is list and hasattr(env, "_now")
        self._env_queue = queue if plain else None
        self._flush_scheduled = False
        self._epoch = 0
        # Links to watch for jobs draining over them together: key -> its record, made
        # when the link is (see watch_links).
        self._watch: dict[LinkKey, _Meeting | None] | None = None

    # ------------------------------------------------------------------ API

    def watch_links(self, keys: Iterable[LinkKey], job_of: list[int], n_jobs: int) -> None:
        """Record, on each link of ``keys``, when two or more jobs' bytes drain over it at
        once, and when they do while it is full (read with ``meetings``). ``job_of[src]``
        is the index (0 .. n_jobs - 1) of the job whose ranks send from endpoint ``src``:
        every message's source must have one. Call before any transfer; only the links
        named pay for it."""
        if self._links:
            raise RuntimeError("watch_links: call it before the first transfer")
        self._watch = {k: None for k in keys}
        self._job_of = job_of
        self._n_jobs = int(n_jobs)

    def meetings(self) -> dict[LinkKey, LinkMeeting]:
        """Each watched link that carried bytes -> its :class:`LinkMeeting`: when two or
        more jobs' bytes drained over it at once, and when they did while it was full;
        links of ``watch_links`` that no message crossed are left out."""
        if not self._watch:
            return {}
        return {
            k: LinkMeeting(m.together_s, m.full_s, list(m.job_s), m.peak_together)
            for k, m in self._watch.items()
            if m is not None
        }

    def transfer(
        self, src: int, dst: int, size_bytes: SupportsIndex, tag: object = None
    ) -> simpy.Event:
        """Send ``size_bytes`` bytes from ``src`` to ``dst``; return an event.

        Called at simulated time ``t0`` (s), the message first pays the
        per-message overhead ``alpha_s`` (s); then its bytes drain across all
        links of its route at the flow's max-min fair rate (bytes/s, recomputed
        whenever a flow sharing a link with it, directly or transitively,
        starts or ends); once its last byte has left, the route latency (sum of
        edge latencies, s) passes; then the returned event succeeds with a
        :class:`TransferRecord` ``(src, dst, size_bytes, start_s=t0, end_s, tag)``.

        An uncontended message thus takes exactly
        ``alpha_s + size_bytes / bottleneck_bandwidth + route_latency`` seconds
        (the bottleneck including injection ports, if configured). A zero-byte
        message takes ``alpha_s + route_latency`` and uses no bandwidth;
        ``src == dst`` takes ``alpha_s`` only (the route is not consulted).
        With ``send_overhead_s`` o (LogGP's o), a message first waits until its
        sender's previous messages have paid theirs, then pays o, then ``alpha_s``:
        k messages posted at once by one sender start after o, 2o, ..., k o.
        ``size_bytes`` must be an integer >= 0; ``tag`` is passed through.
        """
        size = size_bytes if type(size_bytes) is int else operator.index(size_bytes)
        env = self.env
        done = simpy.Event(env)
        start_s = env.now

        def delivered(tag: object) -> None:
            done.succeed(_new_tuple(TransferRecord, (src, dst, size, start_s, env.now, tag)))

        self.start_transfer(src, dst, size, delivered, tag)
        return done

    def start_transfer(
        self,
        src: int,
        dst: int,
        size_bytes: SupportsIndex,
        on_delivery: Callable[..., None] | None,
        tag: object = None,
        tag2: object = _ONE_TAG,
    ) -> None:
        """``transfer`` for callers that need no event: call ``on_delivery(tag)`` instead
        (``on_delivery(tag, tag2)`` when ``tag2`` is given: two objects to hand over
        without a tuple made for them per message).

        Same model, timing, routing and statistics as :meth:`transfer`, but no
        simpy event is scheduled per message: at the simulated time the
        transfer's event would succeed, ``on_delivery(tag)`` is called directly
        from the network's timer handling (which batches every flow ending at
        that instant into one simpy wake-up), never from within this call: a
        message with nothing to wait for is delivered through a timer due now.
        ``on_delivery`` may start new transfers; None delivers to ``tag2``, a
        ``_Sink``, as ``tag2.delivered(tag)``. ``size_bytes`` must be an integer >= 0.
        """
        self.start_on_path(self.path_between(src, dst), size_bytes, on_delivery, tag, tag2)

    def path_between(self, src: int, dst: int) -> _Path:
        """The path of the transfers from endpoint ``src`` to ``dst``, made (routed) on
        first use, as the first transfer would make it. While :attr:`routes_per_pair`
        holds, a caller may keep it and start transfers on it (:meth:`start_on_path`,
        :meth:`rendezvous_on_path`) instead of naming the pair each time."""
        path = self._known_path(src, dst)
        if path is None:
            path = self._path(src, dst)
        return path

    def known_path(self, src: int, dst: int) -> _Path | None:
        """The path the transfers from endpoint ``src`` to ``dst`` took, if the network
        routed the pair and keeps its routes by pair (:attr:`routes_per_pair`); else
        None. Nothing is routed here: its ``edges`` are the route's, for the caller that
        wants the route of a pair the run used without routing it again."""
        return self._known_path(src, dst)

    @property
    def routes_per_pair(self) -> bool:
        """Whether every transfer of a pair takes one path (the route is a pure function
        of the pair and the endpoints are 0..n-1): paths from :meth:`path_between` may
        then be kept for the pair's later transfers."""
        return self._static is not None

    def start_on_path(
        self,
        path: _Path,
        size_bytes: SupportsIndex,
        on_delivery: Callable[..., None] | None,
        tag: object = None,
        tag2: object = _ONE_TAG,
    ) -> None:
        """:meth:`start_transfer` on the pair's ``path`` (from :meth:`path_between`)."""
        flow = self._message(path, size_bytes, on_delivery, tag, tag2)
        self._launch(flow, self._clock())

    def _message(
        self,
        path: _Path,
        size_bytes: SupportsIndex,
        on_delivery: Callable | None,
        tag: object,
        tag2: object,
    ) -> _Flow:
        """A message on ``path``, not started yet (``size_bytes`` checked: an integer >= 0)."""
        size = size_bytes if type(size_bytes) is int else operator.index(size_bytes)
        if size < 0:
            raise ValueError(
                f"size_bytes must be >= 0, got {size} (src={path.src}, dst={path.dst})"
            )
        flow = _Flow.__new__(_Flow)
        flow.notify = on_delivery
        flow.path = path
        flow.size_bytes = size
        flow.tag = tag
        flow.tag2 = tag2
        return flow

    def send_overhead_end(self, src: int, dst: int, now: float) -> float:
        """When a rendezvous send from endpoint ``src`` to ``dst`` posted at ``now`` (s)
        has paid LogGP's o for its request-to-send: a sender's messages pay it one after
        another in the order they are posted (eager ones as they start). ``now`` without
        a send overhead or to itself. Pass the result to :meth:`rendezvous_on_path` as
        the send's posting time: its data does not pay o again."""
        o = self.send_overhead_s
        if o <= 0.0 or src == dst:
            return now
        free = self._send_free
        s = free.get(src, 0.0)
        t = (s if s > now else now) + o
        free[src] = t
        return t

    def _launch(self, flow: _Flow, now: float, paid: bool = False) -> None:
        """Start a message whose path, size, tag and delivery callback are set, at ``now``
        (s): what ``start_transfer`` does once it has made the flow. ``paid``: its send
        overhead was paid when it was posted (a rendezvous send's)."""
        path = flow.path
        src = path.src
        size = flow.size_bytes
        seq = self.transfers_started
        self.transfers_started = seq + 1
        pair = path.pair
        if pair is None:
            pair = path  # (its pair's only path: it keeps the pair's counters)
        n = pair.in_flight
        if not n:
            pair.busy_since_s = now
        pair.in_flight = n + 1
        flow.seq = seq
        if size:
            _set_links(flow, path)
        else:
            flow.n_links = 0  # (no bytes: nothing to drain)
        flow.start_s = now
        flow.remaining_bytes = size + 0.0
        flow.rate_bytes_per_s = 0.0
        flow.last_update_s = now
        flow.phase = _ALPHA
        flow.timer = 0
        flow.mark = 0
        if cython.compiled:
            flow.bn = cython.NULL
        else:
            flow.bn = None
        flow.fill_bytes_per_s = -1.0
        alpha_s = self.alpha_s
        o = self.send_overhead_s
        if o > 0.0 and src != path.dst and not paid:
            # LogGP's o: the sender's messages pay it one after another, then alpha.
            t = self.send_overhead_end(src, path.dst, now) + alpha_s
        elif alpha_s > 0.0:
            t = now + alpha_s
        elif flow.n_links:
            self._begin(flow, now)  # a C call when compiled
            return
        else:
            # Nothing to drain: deliver after the route latency, or now, but by a timer.
            flow.phase = _LATENCY
            t = now + path.latency_s
        flow.timer = self._add_timer(t, flow)

    def start_rendezvous(
        self,
        src: int,
        dst: int,
        size_bytes: int,
        on_delivery: Callable[..., None] | None,
        tag: object,
        send_posted_s: float,
        tag2: object = _ONE_TAG,
    ) -> None:
        """``start_transfer`` of a rendezvous message whose receive is posted now and
        whose send was posted at ``send_posted_s`` (s; with a send overhead, when it had
        paid it: :meth:`send_overhead_end`, which may be later than now).

        With ``rendezvous_handshake``, the sender's request-to-send crosses the route
        first, as a zero-byte message (``alpha_s`` + route latency, s); the receiver
        then pulls the data (the get protocol of MPICH's and UCX's rendezvous), so the
        data's transfer starts at ``max(now, send_posted_s + alpha_s + latency)``: one
        extra message latency when both sides post together, none when the receive
        comes later than the request. Without it, the data starts at
        ``max(now, send_posted_s)``. The data does not pay the send overhead again.
        """
        path = self.path_between(src, dst)
        self.rendezvous_on_path(path, size_bytes, on_delivery, tag, send_posted_s, tag2)

    def rendezvous_on_path(
        self,
        path: _Path,
        size_bytes: int,
        on_delivery: Callable[..., None] | None,
        tag: object,
        send_posted_s: float,
        tag2: object = _ONE_TAG,
        handshake: bool = True,
    ) -> None:
        """:meth:`start_rendezvous` on the pair's ``path`` (from :meth:`path_between`);
        ``handshake`` False: without the request-to-send even where the network has one
        (a library whose receive buffers are set up beforehand, as NCCL's)."""
        now = self._clock()
        start = send_posted_s  # (its send overhead paid: see send_overhead_end)
        if handshake and self.rendezvous_handshake and path.src != path.dst:
            start = start + self.alpha_s + path.latency_s  # the request-to-send's crossing
        delay = start - now
        flow = self._message(path, size_bytes, on_delivery, tag, tag2)
        if delay > 0.0:
            # The message waits as a timer of its own, launched when it fires (as
            # start_transfer would be then, without a second object).
            flow.phase = _HANDSHAKE
            self._set_timer(flow, now + delay)
        else:
            self._launch(flow, now, True)

    def call_later(
        self, delay_s: float, callback: Callable[[object], None], arg: object = None
    ) -> None:
        """Call ``callback(arg)`` once ``delay_s`` simulated seconds (>= 0) have passed.

        A plain timer on the network's clock, for callers that keep their own state
        machines (the executor's compute phases): it shares the network's batched
        wake-ups, so the timers of many ranks ending at one instant cost one simpy
        event, not one each. Timers due at the same instant run in the order they
        were set, interleaved with the network's own by that order.
        """
        if not delay_s >= 0.0:
            raise ValueError(f"delay_s must be >= 0 seconds, got {delay_s!r}")
        t = self._clock() + float(delay_s)
        timer = _Flow.__new__(_Flow)
        timer.phase = _TIMER
        timer.notify = callback
        timer.tag = arg
        timer.timer = self._add_timer(t, timer)

    def _known_path(self, src: int, dst: int) -> _Path | None:
        """The path of a pair already in the static table; None if it is not there (or
        the route is not static, or src or dst is not an endpoint's number)."""
        table = self._static
        n = self._n_ends
        if table is None or type(src) is not int or type(dst) is not int:
            return None
        s = _endpoint(src, n)
        d = _endpoint(dst, n)
        if s < 0 or d < 0:
            return None
        return table.get(s * n + d)

    def _path(self, src: int, dst: int) -> _Path:
        """The path of a transfer from src to dst: route() called, the result cached."""
        if src == dst:
            path = self._self_paths.get(src)
            if path is None:
                # (no route is asked for, so nothing else would check the node)
                if src not in self.graph:
                    raise ValueError(
                        f"a transfer from {src!r} to itself: {src!r} is not a node of the graph"
                    )
                path = self._self_paths[src] = _Path(src, dst, (), (), 0.0, self._pair(src, dst))
            return path
        if self._static is not None and type(src) is int and type(dst) is int:
            # A pure function of the pair, asked once per pair (start_transfer looks in
            # the static table first): no cache below would ever hit.
            edges = self._route_once(src, dst)  # (raises unless src, dst are endpoints)
            if type(edges) is not tuple:
                edges = tuple(edges)
            path = self._resolve(src, dst, edges, False)
            self._static_list.append(path)
            self._static.put(src * self._n_ends + dst, path)
            return path
        edges = self.route(src, dst)
        path = self._path_of_edges.get(id(edges))
        if path is None or path.edges is not edges or path.src != src:
            if type(edges) is not tuple:
                edges = tuple(edges)
            path = self._last_path.get((src, dst))
            if path is None or (path.edges is not edges and path.edges != edges):
                path = self._resolve(src, dst, edges)
                self._last_path[(src, dst)] = path
            if path.edges is edges:
                self._path_of_edges[id(edges)] = path
        return path

    def active_flows(self) -> list[FlowState]:
        """Snapshot of the flows draining now, in start order, rates in bytes/s."""
        now = self.env.now + 0.0
        flows: dict[_Flow, None] = {}
        for link in self._links.values():
            flows.update((f, None) for f in link.flows)
        out = []
        for f in sorted(flows, key=operator.attrgetter("seq")):
            rem = f.remaining_bytes
            if f.rate_bytes_per_s:
                rem = max(0.0, rem - f.rate_bytes_per_s * (now - f.last_update_s))
            p = f.path
            out.append(
                FlowState(
                    p.src,
                    p.dst,
                    f.size_bytes,
                    f.tag,
                    f.rate_bytes_per_s,
                    rem,
                    tuple(link.key for link in f.links),
                )
            )
        return out

    @property
    def active_flow_count(self) -> int:
        """Number of flows currently draining bytes."""
        return len(self.active_flows())

    def link_capacity_bytes_per_s(self, link: LinkKey) -> float:
        """Capacity of a graph edge or virtual injection link, in bytes/s."""
        return self._link(link).capacity_bytes_per_s

    def link_bytes(self) -> dict[LinkKey, int]:
        """Exact bytes carried per link."""
        return {k: link.bytes_total for k, link in self._links.items()}

    def link_busy_s(self) -> dict[LinkKey, float]:
        """Seconds per link with at least one flow draining, up to now."""
        now = self.env.now + 0.0
        return {k: self._busy_s(link, now) for k, link in self._links.items()}

    def link_peak_load_bytes_per_s(self) -> dict[LinkKey, float]:
        """Peak instantaneous load (sum of flow rates, bytes/s) seen per link."""
        return {k: link.peak_load_bytes_per_s for k, link in self._links.items()}

    def link_series(self) -> dict[LinkKey, list[tuple[float, float]]]:
        """Per link, change points ``(time_s, total_rate_bytes_per_s)`` of its load.

        The load is piecewise constant: each value holds from its time until the
        next change point; before the first point it is 0. Requires
        ``record_link_series=True``.
        """
        if not self.record_link_series:
            raise RuntimeError(
                "link series were not recorded: build FlowNetwork(..., record_link_series=True)"
            )
        return {
            k: link.series.points() if link.series is not None else []
            for k, link in self._links.items()
        }

    def link_series_arrays(self) -> dict[LinkKey, np.ndarray]:
        """``link_series`` as ``(n, 2)`` float64 arrays of ``time_s,
        total_rate_bytes_per_s`` rows (the same points, 16 bytes each)."""
        if not self.record_link_series:
            raise RuntimeError(
                "link series were not recorded: build FlowNetwork(..., record_link_series=True)"
            )
        return {
            k: link.series.array() if link.series is not None else np.empty((0, 2))
            for k, link in self._links.items()
        }

    def utilisation(self, link: LinkKey, horizon_s: float) -> float:
        """Mean fraction of the link's capacity used over ``[0, horizon_s]``.

        ``link_bytes / (capacity_bytes_per_s * horizon_s)``; bytes count when a
        flow's last byte leaves, so call it once the traffic of interest is done.
        """
        if not horizon_s > 0:
            raise ValueError(f"horizon_s must be > 0 seconds, got {horizon_s!r}")
        lk = self._link(link)
        return lk.bytes_total / (lk.capacity_bytes_per_s * horizon_s)

    def busy_fraction(self, link: LinkKey, horizon_s: float) -> float:
        """Fraction of ``[0, horizon_s]`` during which the link carried at least one flow."""
        if not horizon_s > 0:
            raise ValueError(f"horizon_s must be > 0 seconds, got {horizon_s!r}")
        return self._busy_s(self._link(link), self.env.now) / horizon_s

    def max_overload_ratio(self) -> float:
        """Largest ``peak load / capacity`` over all links (<= 1 up to rounding)."""
        return max(
            (lk.peak_load_bytes_per_s / lk.capacity_bytes_per_s for lk in self._links.values()),
            default=0.0,
        )

    def _pair_sums(self, figure: int) -> dict:
        """(src, dst) -> one figure summed over the pair's paths (see ``_add_pair_sums``)."""
        out: dict = {}
        for paths in (self._self_paths.values(), self._paths.values(), self._static_list):
            _add_pair_sums(out, paths, figure)
        return out

    @property
    def pair_bytes(self) -> dict[tuple[int, int], int]:
        """Exact bytes of completed transfers per ``(src, dst)``."""
        return self._pair_sums(0)

    @property
    def pair_duration_s(self) -> dict[tuple[int, int], float]:
        """Sum of ``end_s - start_s`` of completed transfers per ``(src, dst)``, in s."""
        return self._pair_sums(1)

    @property
    def pair_messages(self) -> dict[tuple[int, int], int]:
        """Number of completed transfers per ``(src, dst)``."""
        return self._pair_sums(2)

    @property
    def pair_busy_s(self) -> dict[tuple[int, int], float]:
        """Seconds per ``(src, dst)`` during which at least one of its messages was in
        flight (posted and not yet delivered), up to now; pairs that sent nothing are absent."""
        now = self.env.now + 0.0
        return {
            k: p.busy_s + (now - p.busy_since_s if p.in_flight else 0.0)
            for k, p in self._pairs.items()
            if p.busy_s or p.in_flight
        }

    def pair_rate_bytes_per_s(self, src: int, dst: int) -> float:
        """Achieved average rate of a pair, in bytes/s: the bytes of its delivered
        messages over the time it had messages in flight (``pair_busy_s``), so messages
        in flight together add up; 0.0 if it has none."""
        busy = self.pair_busy_s.get((src, dst), 0.0)
        done = self.pair_bytes.get((src, dst))
        if done is None or busy <= 0.0:
            return 0.0
        return done / busy

    # ------------------------------------------------------- route resolution

    def _link(self, key: LinkKey, register: bool = False) -> _Link:
        """The cached link of ``key``; built from the graph on first sight.

        Only links met on a route are registered (and so appear in the
        statistics); a query about another link gets a fresh, idle one.
        """
        link = self._links.get(key)
        if link is not None:
            return link
        u, v = key
        if u in (EGRESS, INGRESS) and self.injection_bandwidth_bytes_per_s is not None:
            link = _Link(key, self.injection_bandwidth_bytes_per_s, 0.0)
        else:
            if not self.graph.has_edge(u, v):
                raise KeyError(
                    f"link {key!r} is not a directed edge of the graph; "
                    "the route function must return edges (u, v) present in the DiGraph"
                )
            data = self.graph.edges[u, v]
            try:
                bw = float(data["bandwidth"])
                lat = float(data["latency"])
            except KeyError as exc:
                raise KeyError(
                    f"edge {key!r} has no {exc.args[0]!r} attribute; every edge needs "
                    "'bandwidth' (bytes/s) and 'latency' (s)"
                ) from None
            if not (math.isfinite(bw) and bw > 0.0):
                raise ValueError(
                    f"edge {key!r}: bandwidth must be finite and > 0 bytes/s, got {bw}"
                )
            if not (math.isfinite(lat) and lat >= 0.0):
                raise ValueError(f"edge {key!r}: latency must be finite and >= 0 s, got {lat}")
            link = _Link(key, bw, lat)
        if register:
            if self.record_link_series:
                link.series = _Series()
            if self._watch is not None and key in self._watch:
                link.watch = self._watch[key] = _Meeting(
                    self._job_of, self._n_jobs, link.capacity_bytes_per_s
                )
            self._links[key] = link
        return link

    def _resolve(self, src: int, dst: int, edges: tuple, keyed: bool = True) -> _Path:
        """The path object of ``edges`` from src to dst, validated, and cached by
        ``(src, dst, edges)`` if ``keyed``; else the caller keeps it, as its pair's only
        path, which keeps the pair's counters itself."""
        for e in edges:
            if type(e) is not tuple:
                edges = tuple([tuple(x) for x in edges])  # e.g. [[u, v], ...]
                break
        key = None
        if keyed:
            key = (src, dst, edges)
            path = self._paths.get(key)
            if path is not None:
                return path
        if not edges:
            raise ValueError(f"route({src}, {dst}) returned no edges although src != dst")
        prev = src
        for e in edges:
            if len(e) != 2 or e[0] != prev:
                raise ValueError(
                    f"route({src}, {dst}) is not a path from {src} to {dst}: edge {e!r} "
                    f"does not start at {prev!r}"
                )
            prev = e[1]
        if prev != dst:
            raise ValueError(f"route({src}, {dst}) ends at {prev!r}, not at {dst!r}")
        known = self._links
        links = []
        latency_s = 0.0
        for e in edges:
            link = known.get(e)  # (a route's links are mostly known: no call)
            if link is None:
                link = self._link(e, True)
            links.append(link)
            latency_s += link.latency_s
        if self.injection_bandwidth_bytes_per_s is not None:
            # (registered after the route's own links: the statistics list links in
            # order of first use)
            egress = known.get((EGRESS, src))
            if egress is None:
                egress = self._link((EGRESS, src), True)
            ingress = known.get((INGRESS, dst))
            if ingress is None:
                ingress = self._link((INGRESS, dst), True)
            links = [egress, *links, ingress]
        if keyed:
            path = _Path(src, dst, edges, tuple(links), latency_s, self._pair(src, dst))
            self._paths[key] = path
        else:  # the pair's only path (the static table): it is its own pair
            path = _Path(src, dst, edges, tuple(links), latency_s, None)
            self._pairs[(src, dst)] = path
        return path

    def _pair(self, src: int, dst: int) -> _Pair:
        pair = self._pairs.get((src, dst))
        if pair is None:
            pair = self._pairs[(src, dst)] = _Pair()
        return pair

    @staticmethod
    def _busy_s(link: _Link, now: float) -> float:
        if link.n_flows:
            return link.busy_s + (now - link.busy_since_s)
        return link.busy_s

    # ------------------------------------------------------------ scheduling

    def _set_timer(self, flow: _Flow, time_s: float) -> None:
        """(Re)schedule the end of the flow's current phase at time_s."""
        flow.timer = self._add_timer(time_s, flow)

    def _add_timer(self, time_s: float, flow: _Flow) -> int:
        """Queue the flow's timer at time_s (s), with a wake-up at or before it; returns
        the timer's number (for ``flow.timer``: a timer whose number the flow no longer
        holds is superseded)."""
        timers = self._timers
        seq = timers.push(time_s, flow)
        flow.tnode = timers.last_node
        if not self._waking:
            pending = self._wake_pending
            if not pending or time_s < pending[0]:
                self._schedule_wake(time_s)
        # Else the end of the wake-up schedules one for the earliest timer.
        return seq

    def _schedule_wake(self, time_s: float) -> None:
        env = self.env
        delay = time_s - env._now
        ev = simpy.Timeout(env, delay if delay > 0.0 else 0.0, time_s)
        ev.callbacks.append(self._on_wake)
        heappush(self._wake_pending, time_s)

    def _on_wake(self, ev: simpy.Event) -> None:
        pending = self._wake_pending
        heappop(pending)
        now = self.env._now + 0.0
        target = ev.value
        # now + (target - now) may round one ulp below target: the timer is due.
        limit = target if target > now else now
        timers = self._timers
        self._waking = True
        self._now_s = now
        env = self.env
        hops = 0
        rated_until = self.flows_rerated + _FAST_FORWARD_RATES
        try:
            while True:
                while True:
                    # Handlers may set timers at `now`: they come after those due now.
                    while timers.n and _first_key(timers) <= limit:
                        flow = timers.pop()
                        if flow is None or flow.timer != timers.popped_seq:
                            continue  # superseded by a later reschedule
                        flow.timer = 0
                        if cython.compiled and timers.n:
                            # (a borrowed pointer: taking a reference would write to
                            # the next flow, waiting for it here instead of prefetching)
                            _prefetch_ptr(timers.first_ptr())  # noqa: F821 (network.pxd)
                        phase = flow.phase
                        if phase == _DRAINING:
                            # self._end_drain(flow, now), inlined
                            size = flow.size_bytes
                            dirty = self._dirty
                            flow.phase = _LATENCY
                            if cython.compiled:
                                _prefetch_items(flow.lk, flow.n_links)  # noqa: F821
                            for j in range(flow.n_links):
                                link = _link_at(flow, j)
                                n = _unlist(link, flow)
                                if link.watch is not None:
                                    link.watch.end(flow.path.src, now)
                                link.bytes_total += size
                                if n:
                                    dirty.append(link)
                                else:
                                    # What _flush does for an empty seed, done now.
                                    link.busy_s += now - link.busy_since_s
                                    if link.load_bytes_per_s != 0.0:
                                        if link.series is None and link.watch is None:
                                            link.load_bytes_per_s = 0.0
                                        else:
                                            _set_load(link, 0.0, now)
                            flow.rate_bytes_per_s = 0.0
                            flow.remaining_bytes = 0.0
                            flow.timer = self._add_timer(now + flow.path.latency_s, flow)
                        elif phase == _LATENCY:
                            self._deliver(flow, now)  # a C call when compiled
                        elif phase == _TIMER:
                            flow.notify(flow.tag)
                        elif phase == _HANDSHAKE:
                            self._launch(flow, now, True)
                        else:
                            self._begin(flow, now)
                    if self._dirty:
                        self._flush(now)
                    if not (timers.n and _first_key(timers) <= limit):
                        break
                # Drop the leading superseded completion timers, so rescheduled flows
                # do not cost a simpy wake-up each.
                while timers.n:
                    if cython.compiled:
                        if timers.first_ptr() != cython.NULL:
                            break  # (superseded timers are killed: see _apply_rate)
                    else:
                        flow = timers.first_item()
                        if flow.timer == timers.first_seq():
                            break
                    timers.pop()
                if not timers.n:
                    return  # nothing left
                nt = _first_key(timers)
                if pending:
                    due = pending[0]  # (a C double when compiled: no boxing of nt)
                    if due <= nt:
                        return  # a wake-up is already due first
                queue = self._env_queue
                if (
                    queue is not None
                    and hops < _FAST_FORWARD_HOPS
                    and self.flows_rerated < rated_until
                ):
                    if queue:
                        due = queue[0][0]  # simpy's next event's time
                    if not queue or nt < due:
                        # No simpy event is due before (or at) our next timer, so
                        # nothing can happen in between: move the clock there ourselves
                        # rather than through a simpy timeout (what simpy would do, minus
                        # its cost).
                        env._now = nt
                        now = limit = nt
                        self._now_s = nt
                        hops += 1
                        continue
                self._schedule_wake(nt)
                return
        finally:
            self._waking = False

    def _clock(self) -> float:
        """simpy's clock now (s, a float: simpy starts at an int 0). Inside a wake-up it is
        the wake-up's own copy, which it keeps equal to simpy's (its fast forward moves
        both): a C read, where ``env._now`` is a Python attribute lookup (about a fifth
        of a message's attribute lookups went to it, measured with callgrind)."""
        if self._waking:
            return self._now_s
        return self.env._now + 0.0

    def _on_flush(self, _ev: simpy.Event) -> None:
        self._flush_scheduled = False
        if self._dirty:
            self._flush(self.env._now + 0.0)

    # ----------------------------------------------------------- flow phases

    def _begin(self, flow: _Flow, now: float) -> None:
        """alpha_s has passed: start draining (or go straight to latency/delivery)."""
        nl = flow.n_links
        if not nl:
            latency_s = flow.path.latency_s
            if latency_s > 0.0:
                flow.phase = _LATENCY
                self._set_timer(flow, now + latency_s)
            else:
                self._deliver(flow, now)
            return
        flow.phase = _DRAINING
        # Each of its links gained a flow: the next recomputation starts from them all.
        dirty = self._dirty
        if cython.compiled:
            _prefetch_items(flow.lk, nl)  # noqa: F821 (network.pxd)
        for j in range(nl):
            link = _link_at(flow, j)
            if not link.n_flows:
                link.busy_since_s = now
            _list_flow(link, flow)
            if link.watch is not None:
                link.watch.start(flow.path.src, now)
            dirty.append(link)
        if not self._waking and not self._flush_scheduled:
            self._flush_scheduled = True
            ev = simpy.Event(self.env)
            ev.callbacks.append(self._on_flush)
            ev.succeed()

    def _deliver(self, flow: _Flow, now: float) -> None:
        path = flow.path
        path.bytes_total += flow.size_bytes
        path.duration_s += now - flow.start_s
        path.messages += 1
        pair = path.pair
        if pair is None:
            pair = path
        n = pair.in_flight - 1
        pair.in_flight = n
        if not n:
            pair.busy_s += now - pair.busy_since_s
        flow.phase = _DONE
        self.transfers_completed += 1
        tag2 = flow.tag2
        notify = flow.notify
        if notify is None:
            sink = tag2  # (a _Sink: checked when compiled)
            sink.delivered(flow.tag)
        elif tag2 is _ONE_TAG:
            notify(flow.tag)
        else:
            notify(flow.tag, tag2)

    # ------------------------------------------------------------- max-min

    def _apply_rate(self, f: _Flow, rate: float, now: float) -> None:
        """Bring the flow's remaining bytes up to now, switch rate, reschedule its end."""
        self.rates_changed += 1
        old = f.rate_bytes_per_s
        rem = f.remaining_bytes
        if old > 0.0:
            rem -= old * (now - f.last_update_s)
            if rem < 0.0:
                rem = 0.0
            f.remaining_bytes = rem
        f.last_update_s = now
        f.rate_bytes_per_s = rate
        if f.timer:  # its end at the old rate, superseded (compiled: dropped now)
            self._timers.kill(f.tnode, f.timer)
        f.timer = self._add_timer(now + rem / rate, f)

    def _flush(self, now: float) -> None:
        """Recompute the max-min rates that the flows begun and ended since the last
        recomputation can change (see below and _fill_joining for which those are)."""
        seeds = self._dirty
        self._dirty = []
        # Stamps: the seeds carry `base` in load_mark until they are visited; the flows
        # filled again (and the links filled over) carry `stamp` in mark, as do the links
        # whose loads are to be summed in load_mark.
        base = self._epoch + 1
        stamp = base + 1
        self._epoch = stamp
        links = self._comp_links
        flows = self._comp_flows
        touched = self._touched
        for seed in seeds:
            seed.load_mark = base
        # Max-min fairness has a test (Bertsekas and Gallager): rates that fit every link
        # are the max-min fair ones if and only if each flow crosses a full link on which
        # no flow is faster (its bottleneck, which each flow keeps: bn). A flow keeps its
        # rate as long as its bottleneck stays one, which can only stop when that link's
        # set of flows or the rate of one of them changes. So the flows filled again are
        # those that began, and those whose bottleneck lost or gained a flow (the
        # seeds'); the others keep their rates, taken from what they leave of each link.
        # During the filling, a kept flow that the test fails on a link whose flows
        # change joins it (_fill_joining), so the change spreads only as far as it moves
        # a bottleneck. The rates are those of filling everything again up to rounding
        # (kept rates are subtracted first, not in filling order; ties are taken within
        # _TIE_RTOL): the times of the fingerprint cases are equal to the last digit.
        for seed in seeds:
            if seed.load_mark != base:
                continue  # (listed twice)
            seed.load_mark = stamp
            _push(touched, seed)
            n = seed.n_flows
            if n == 0:
                if seed.load_bytes_per_s != 0.0:
                    if seed.series is None and seed.watch is None:
                        seed.load_bytes_per_s = 0.0
                    else:
                        _set_load(seed, 0.0, now)
                continue
            for i in range(n):
                f = _flow_at(seed, i)
                if f.mark == stamp:
                    continue
                if f.rate_bytes_per_s != 0.0 and not _bn_is(f, seed):
                    continue  # its bottleneck is elsewhere (tested in _fill_joining)
                if _gather(f, stamp, links, flows):
                    continue
                # Fast path: a flow alone on all its links gets its bottleneck.
                f.mark = stamp
                self.recomputations += 1
                self.flows_rerated += 1
                rate = _INF
                for j in range(f.n_links):
                    link = _link_at(f, j)
                    cap = link.capacity_bytes_per_s
                    if cap < rate:
                        rate = cap
                        _set_bn(f, link)
                old = f.rate_bytes_per_s
                if old == 0.0:
                    # self._apply_rate(f, rate, now) of a flow that just began, inlined
                    self.rates_changed += 1
                    f.last_update_s = now
                    f.rate_bytes_per_s = rate
                    f.timer = self._add_timer(now + f.remaining_bytes / rate, f)
                elif abs(rate - old) > old * _RATE_RTOL:
                    self._apply_rate(f, rate, now)
                else:
                    rate = old
                for j in range(f.n_links):
                    link = _link_at(f, j)
                    if link.load_bytes_per_s != rate:
                        if (
                            link.series is None
                            and link.watch is None
                            and rate <= link.peak_load_bytes_per_s
                        ):
                            link.load_bytes_per_s = rate
                        else:
                            _set_load(link, rate, now)
                    if link.load_mark == base:
                        link.load_mark = stamp  # (a seed, summed now)
        if flows.n:
            self.recomputations += 1
            _ready(links, stamp, self._check_queue)
            _fill_joining(links, stamp, self._fill_queue, self._check_queue, flows)
            self.flows_rerated += flows.n
            for i in range(flows.n):
                f = _flow_in(flows, i)
                rate = f.fill_bytes_per_s
                f.fill_bytes_per_s = -1.0
                old = f.rate_bytes_per_s
                tol = old * _RATE_RTOL
                if rate - old > tol or old - rate > tol:
                    self._apply_rate(f, rate, now)
                    for j in range(f.n_links):
                        link = _link_at(f, j)
                        if link.load_mark != stamp:
                            link.load_mark = stamp
                            _push(touched, link)
        for i in range(touched.n):
            _sum_load(_link_in(touched, i), now)
        _empty(links, flows, touched)


def _gather(f: _Flow, stamp: int, links: _Stack, flows: _Stack) -> bool:
    """Add ``f`` to the flows to fill again (marked ``stamp``) and its links to those
    filled over, unless it is alone on every link it crosses (False: it is not added).

    A link that only this flow crosses is but a cap on its rate, and of those only the
    first of lowest capacity can freeze it (the others come later at the same share, or
    at a higher one, and find it frozen): only that one is filled over, which leaves
    every rate as it was, bit for bit."""
    nl = f.n_links
    if cython.compiled:
        _prefetch_items(f.lk, nl)  # noqa: F821 (network.pxd)
    low = _INF
    shared = False
    for k in range(nl):
        l2 = _link_at(f, k)
        if l2.n_flows == 1:
            cap = l2.capacity_bytes_per_s
            if cap < low:
                low = cap
        else:
            shared = True
    if not shared:
        return False
    f.mark = stamp
    _push(flows, f)
    for k in range(nl):
        l2 = _link_at(f, k)
        if l2.mark == stamp:
            continue
        if l2.n_flows == 1:
            if l2.capacity_bytes_per_s != low:
                continue
            low = -1.0  # picked
        l2.mark = stamp
        _push(links, l2)
    return True


def _ready(links: _Stack, stamp: int, checks: _Heap) -> None:
    """Make the links filled over (``links``) ready for the water-filling (see
    _fill_joining): each link's capacity less the rates of the flows that keep theirs
    (not marked ``stamp``), in list order, its number of flows to fill and its fastest
    kept flow's rate; each kept flow whose bottleneck it is filed in ``checks`` under
    its rate."""
    for j in range(links.n):
        _ready_link(_link_in(links, j), stamp, checks)


def _ready_link(link: _Link, stamp: int, checks: _Heap) -> None:
    """One link of :func:`_ready`."""
    rem = link.capacity_bytes_per_s
    n = link.n_flows
    top = 0.0
    if cython.compiled:
        _prefetch_items(link.fl, n)  # noqa: F821 (network.pxd)
    for i in range(link.n_flows):
        f = _flow_at(link, i)
        if f.mark != stamp:
            rate = f.rate_bytes_per_s
            rem -= rate
            n -= 1
            if rate > top:
                top = rate
            if _bn_is(f, link):
                checks.push(rate, f)
    link.rem_capacity_bytes_per_s = rem
    link.n_unfrozen = n
    link.kept_max = top


def _fill_joining(
    links: _Stack, stamp: int, queue: _LinkHeap, checks: _Heap, flows: _Stack
) -> None:
    """Progressive filling of the flows marked ``stamp`` over ``links`` (made ready by
    _ready), the kept flows joining it where the test of max-min fairness (see _flush)
    says they must change; leaves each flow's rate in ``fill_bytes_per_s`` and its
    bottleneck in ``bn``.

    In the filling's order (shares only grow): a link about to freeze its flows at a
    share joins first every kept flow there that is faster (``kept_max`` says whether
    one may be); a kept flow whose bottleneck has capacity left, or flows to fill there
    at a higher share, once the level reaches its rate (its entry in ``checks``), joins
    then. A flow that joins gives its rate back to its links and is filled from the
    level on: every share it touches stays at or above the level, as the filling needs."""
    if queue.n:
        raise RuntimeError("the water-filling's queue was left holding links")
    for j in range(links.n):
        link = _link_in(links, j)
        if link.n_unfrozen:
            queue.file(link, link.rem_capacity_bytes_per_s / link.n_unfrozen)
    level = 0.0
    while queue.n or checks.n:
        if checks.n and (not queue.n or _first_key(checks) <= _first_key(queue)):
            f = checks.pop()
            if f.mark == stamp:
                continue  # it joined
            link = _bn_of(f)
            n = link.n_unfrozen
            rate = f.rate_bytes_per_s
            if n:
                ok = link.rem_capacity_bytes_per_s / n <= rate * (1.0 + _TIE_RTOL)
            else:
                ok = link.rem_capacity_bytes_per_s <= link.capacity_bytes_per_s * _FULL_RTOL
            if not ok:
                _join(f, stamp, links, flows, queue, checks)
            continue
        share = _first_key(queue)
        link = queue.pop()
        n = link.n_unfrozen  # (> 0: a link is dropped when it has none to freeze)
        cur = link.rem_capacity_bytes_per_s / n
        if cur > share:
            queue.file(link, cur)
            continue
        # Shares never decrease in exact arithmetic; do not let rounding do it.
        if cur < level:
            cur = level
        above = cur * (1.0 + _TIE_RTOL)
        if link.kept_max > above:
            joined = False
            top = 0.0
            for i in range(link.n_flows):
                f = _flow_at(link, i)
                if f.mark != stamp:
                    rate = f.rate_bytes_per_s
                    if rate > above:
                        _join(f, stamp, links, flows, queue, checks)
                        joined = True
                    elif rate > top:
                        top = rate
            link.kept_max = top
            if joined:  # (its share grew: out of the queue, it is filed again here)
                queue.file(link, link.rem_capacity_bytes_per_s / link.n_unfrozen)
                continue
        level = cur
        _freeze(link, cur, stamp, queue)


def _join(
    f: _Flow, stamp: int, links: _Stack, flows: _Stack, queue: _LinkHeap, checks: _Heap
) -> None:
    """A kept flow joins the filling (see _fill_joining): its rate goes back to its links
    (those not filled over yet join them, made ready), each filed again where its share
    fell or it had none (a link filed under less than its share is filed again lazily
    when it comes out)."""
    rate = f.rate_bytes_per_s
    f.mark = stamp
    f.fill_bytes_per_s = -1.0
    _push(flows, f)
    for j in range(f.n_links):
        l2 = _link_at(f, j)
        if l2.mark != stamp:
            l2.mark = stamp
            _push(links, l2)
            _ready_link(l2, stamp, checks)
        else:
            n = l2.n_unfrozen
            rem = l2.rem_capacity_bytes_per_s
            l2.rem_capacity_bytes_per_s = rem + rate
            l2.n_unfrozen = n + 1
            if n and rate >= rem / n:
                continue  # its share grew: the entry it has, under less, comes first
        queue.file(l2, l2.rem_capacity_bytes_per_s / l2.n_unfrozen)


def _unlist(link: _Link, flow: _Flow) -> int:
    """Take ``flow`` out of the link's draining flows, keeping the others' order; returns
    their new number.

    Found by identity without reading the other flows (compiled: their pointers only):
    a flow that has stopped draining leaves its links at once, so the max-min pass
    and the load sums never step over ended flows, whose objects
    would be cache misses on a big network."""
    n = link.n_flows
    if cython.compiled:
        target = cython.cast(_ObjectPtr, flow)  # noqa: F821 (a C type of network.pxd)
        items = link.fl
        i = 0
        while i < n and items[i] != target:
            i += 1
        if i < n:
            n -= 1
            while i < n:
                items[i] = items[i + 1]
                i += 1
            link.n_flows = n
            Py_DECREF(flow)  # the link's reference
            return n
    else:
        flows = link.fl
        for i, f in enumerate(flows):
            if f is flow:
                del flows[i]
                n -= 1
                link.n_flows = n
                return n
    raise RuntimeError("a draining flow was missing from one of its links")


def _sum_load(link: _Link, now: float) -> None:
    """Sum the rates of the link's flows into its load (recorded if it changed)."""
    load = 0.0
    if cython.compiled:
        _prefetch_items(link.fl, link.n_flows)  # noqa: F821 (network.pxd)
    for i in range(link.n_flows):
        load += _flow_at(link, i).rate_bytes_per_s
    if load != link.load_bytes_per_s:
        _set_load(link, load, now)


def _set_load(link: _Link, load: float, now: float) -> None:
    """Record a new total rate of a link (callers check that it changed)."""
    link.load_bytes_per_s = load
    if load > link.peak_load_bytes_per_s:
        link.peak_load_bytes_per_s = load
    series = link.series
    if series is not None:
        series.record(now, load)
    watch = link.watch
    if watch is not None:
        watch.load(load, now)


def _freeze(link: _Link, cur: float, epoch: int, queue: _LinkHeap) -> None:
    """Freeze the unfrozen flows of ``link`` (those marked ``epoch``) at the share ``cur``
    (bytes/s), take it from their links and make ``link`` their bottleneck (``bn``); a
    link left with no flow to freeze leaves ``queue``."""
    for i in range(link.n_flows):
        f = _flow_at(link, i)
        if f.fill_bytes_per_s < 0.0 and f.mark == epoch:
            f.fill_bytes_per_s = cur
            for j in range(f.n_links):
                l2 = _link_at(f, j)
                l2.rem_capacity_bytes_per_s -= cur
                n = l2.n_unfrozen - 1
                l2.n_unfrozen = n
                if n == 0:
                    queue.drop(l2)
            _set_bn(f, link)
