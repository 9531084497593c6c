# cython: language_level=3
"""Python's small-object arenas from one region backed by transparent huge pages.

CPython keeps its objects of up to 512 bytes in 1 MiB arenas, each mapped on its own
with 4 KiB pages. A large simulation's objects (flows, links, paths, plans) fill
thousands of arenas and are reached in no order, so most of its memory accesses also
miss the processor's address-translation cache (2,048 entries cover 8 MiB of 4 KiB
pages, 4 GiB of 2 MiB pages). ``install`` replaces the arena allocator (CPython's
``PyObject_SetArenaAllocator``) with one that carves arenas out of a region reserved
once and advised for huge pages (``madvise(MADV_HUGEPAGE)``), so the kernel backs it
with 2 MiB pages when it can. A freed arena is kept for the next one (its memory is
not returned to the system until the process ends); arenas made before ``install``
go back to the allocator that made them. Only the compiled build has this module.
"""

from libc.stdint cimport uintptr_t

cdef extern from "Python.h":
    ctypedef struct PyObjectArenaAllocator:
        void* ctx
        void* (*alloc)(void* ctx, size_t size) noexcept nogil
        void (*free)(void* ctx, void* ptr, size_t size) noexcept nogil
    void PyObject_GetArenaAllocator(PyObjectArenaAllocator* allocator)
    void PyObject_SetArenaAllocator(PyObjectArenaAllocator* allocator)

cdef extern from "sys/mman.h":
    """
    #ifndef MADV_HUGEPAGE
    #define MADV_HUGEPAGE -1  /* no transparent huge pages here: nothing to advise */
    #endif
    #ifndef MAP_NORESERVE
    #define MAP_NORESERVE 0
    #endif
    """
    void* mmap(void* addr, size_t length, int prot, int flags, int fd, long offset) nogil
    int madvise(void* addr, size_t length, int advice) nogil
    int mprotect(void* addr, size_t length, int prot) nogil
    int MADV_HUGEPAGE
    int PROT_NONE, PROT_READ, PROT_WRITE, MAP_PRIVATE, MAP_ANONYMOUS, MAP_NORESERVE
    void* MAP_FAILED

cdef size_t _HUGE_PAGE = 2 << 20  # bytes: the region starts on a 2 MiB boundary
cdef size_t _COMMIT_STEP = 64 << 20  # bytes made writable (and advised) at a time

cdef PyObjectArenaAllocator _previous  # the allocator of the arenas made before install
cdef char* _base = NULL  # the region: [_base, _base + _reserved)
cdef size_t _reserved = 0
cdef size_t _committed = 0  # bytes of the region made writable
cdef size_t _used = 0  # bytes of the region handed out as arenas (free ones included)
cdef size_t _arena_bytes = 0  # the arena size CPython asks for (1 MiB on 64-bit 3.10+)
cdef void* _free_arenas = NULL  # freed arenas, each holding the next one's address
cdef size_t _outside = 0  # arenas asked for once the region was full (made by _previous)


cdef void* _alloc(void* ctx, size_t size) noexcept nogil:
    global _committed, _used, _arena_bytes, _free_arenas, _outside
    cdef void* p
    if _arena_bytes == 0:
        _arena_bytes = size
    if size == _arena_bytes and _free_arenas != NULL:
        p = _free_arenas
        _free_arenas = (<void**>p)[0]
        return p
    if _used + size > _committed:
        if _committed + _COMMIT_STEP > _reserved or mprotect(
            _base + _committed, _COMMIT_STEP, PROT_READ | PROT_WRITE
        ) != 0:
            _outside += 1
            return _previous.alloc(_previous.ctx, size)
        if MADV_HUGEPAGE >= 0:
            madvise(_base + _committed, _COMMIT_STEP, MADV_HUGEPAGE)
        _committed += _COMMIT_STEP
    p = _base + _used
    _used += size
    return p


cdef void _free(void* ctx, void* ptr, size_t size) noexcept nogil:
    global _free_arenas
    if <char*>ptr >= _base and <char*>ptr < _base + _reserved:
        if size == _arena_bytes:
            (<void**>ptr)[0] = _free_arenas
            _free_arenas = ptr
        return
    _previous.free(_previous.ctx, ptr, size)


def install(size_t reserve_bytes) -> bool:
    """Serve CPython's arenas from a region of ``reserve_bytes`` bytes of address space
    (reserved, not allocated: memory is committed 64 MiB at a time as arenas are made).

    Returns False, changing nothing, when the reservation fails (an address-space limit,
    ``ulimit -v``); True once installed (a second call does nothing and returns True).
    """
    global _base, _reserved
    cdef PyObjectArenaAllocator mine
    cdef void* p
    if _base != NULL:
        return True
    if reserve_bytes < _COMMIT_STEP:
        raise ValueError(f"reserve_bytes must be at least {_COMMIT_STEP} bytes")
    p = mmap(NULL, reserve_bytes + _HUGE_PAGE, PROT_NONE,
             MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0)
    if p == MAP_FAILED:
        return False
    _base = <char*>((<uintptr_t>p + _HUGE_PAGE - 1) & ~(<uintptr_t>(_HUGE_PAGE - 1)))
    _reserved = reserve_bytes
    PyObject_GetArenaAllocator(&_previous)
    mine.ctx = NULL
    mine.alloc = _alloc
    mine.free = _free
    PyObject_SetArenaAllocator(&mine)
    return True


def stats() -> dict:
    """The region's counters, in bytes (``arena_bytes``: the size of one arena;
    ``arenas_outside``: arenas made by the previous allocator once the region was full)."""
    cdef size_t free_bytes = 0
    cdef void* p = _free_arenas
    while p != NULL:
        free_bytes += _arena_bytes
        p = (<void**>p)[0]
    return {
        "installed": _base != NULL,
        "region_start": <uintptr_t>_base,
        "reserved_bytes": _reserved,
        "committed_bytes": _committed,
        "arena_bytes": _arena_bytes,
        "arenas_bytes": _used,
        "free_arenas_bytes": free_bytes,
        "arenas_outside": _outside,
    }
