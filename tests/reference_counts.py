"""Per-rank, per-iteration call counts and call bytes of the reference proxies,
computed here from the facts of ``shared/reference/proxies.md`` (sizes typed
in from that page, never imported from the code under test).

Call bytes follow the documented convention (README, ``workload.ops.call_bytes``):
count x 4 bytes per call; allgather: the rank's contribution; reduce_scatter:
the whole input vector (p blocks); alltoall: the bytes to the p - 1 peers.
"""

from __future__ import annotations

from collections import Counter


def sc(n: int, scale: float) -> int:
    """--scale: whole elements, at least 1."""
    return max(1, round(n * scale))


def gpt2_like(
    rank: int,
    world: int,
    layers: int,
    stages: int,
    mb: int,
    scale: float,
    pipe: int,
    first: list[int],
    middle: list[int],
    last: list[int],
) -> tuple[Counter, Counter]:
    calls: Counter = Counter()
    nbytes: Counter = Counter()
    stage = rank % stages
    lps = layers // stages
    if stages > 1:
        per_dir = 2 if 0 < stage < stages - 1 else 1  # middle stages send and receive
        calls["pp"] = 2 * mb * per_dir
        nbytes["pp"] = 2 * mb * per_dir * sc(pipe, scale) * 4
    if world // stages > 1:
        if stage == 0:
            grads = first + middle * (lps - 1)
        elif stage == stages - 1:
            grads = middle * (lps - 1) + last
        else:
            grads = middle * lps
        calls["dp"] = len(grads)
        nbytes["dp"] = sum(sc(g, scale) for g in grads) * 4
    return calls, nbytes


GPT2_PIPE = 808960
GPT2_AGG = ([85317120], [19677440], [84008960])
GPT2_TENSORS = (
    [
        64328960,
        1310720,
        1280,
        4915200,
        1638400,
        1280,
        6553600,
        6553600,
        1280,
        3840,
        1280,
        1280,
        5120,
        1280,
    ],
    [1280, 4915200, 1638400, 1280, 6553600, 6553600, 1280, 3840, 1280, 1280, 5120, 1280],
    [
        1280,
        4915200,
        1638400,
        1280,
        6553600,
        6553600,
        1280,
        64328960,
        1280,
        3840,
        1280,
        1280,
        5120,
        1280,
        1280,
    ],
)
BERT_PIPE = 1049600
BERT_AGG = ([44379136], [12596224], [45984572])
# The reference's non-aggregated lists (proxies.md gives their lengths and sums; the
# sizes typed in from bert_large.cpp and resnet50.cpp of spcl/DNN-cpp-proxies).
BERT_TENSORS = (
    [
        31254528, 524288, 2048, 1048576, 1048576, 1048576, 1048576, 4194304, 4194304,
        1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 4096, 1024, 1024, 1024,
    ],
    [
        1048576, 1048576, 1048576, 1048576, 4194304, 4194304, 1024, 1024, 1024, 1024,
        1024, 1024, 4096, 1024, 1024, 1024,
    ],
    [
        1048576, 1048576, 1048576, 1048576, 4194304, 4194304, 1048576, 1048576,
        31254528, 2048, 1024, 1024, 1024, 1024, 1024, 1024, 4096, 1024, 1024, 1024,
        1024, 30522, 1024, 1024, 1024, 2,
    ],
)  # fmt: skip
RESNET50 = [3104745, 4461568, 4462592, 4986880, 4468736, 4074560]
RESNET50_TENSORS = [
    1001, 2050048, 2048, 2048, 1048576, 512, 512, 2359296, 512, 512, 1048576, 2048,
    2048, 1048576, 512, 512, 2359296, 512, 512, 1048576, 2048, 2048, 1048576, 512, 512,
    2359296, 512, 512, 524288, 2048, 2048, 2097152, 1024, 1024, 262144, 256, 256,
    589824, 256, 256, 262144, 1024, 1024, 262144, 256, 256, 589824, 256, 256, 262144,
    1024, 1024, 262144, 256, 256, 589824, 256, 256, 262144, 1024, 1024, 262144, 256,
    256, 589824, 256, 256, 262144, 1024, 1024, 262144, 256, 256, 589824, 256, 256,
    262144, 1024, 1024, 262144, 256, 256, 589824, 256, 256, 131072, 1024, 1024, 524288,
    512, 512, 65536, 128, 128, 147456, 128, 128, 65536, 512, 512, 65536, 128, 128,
    147456, 128, 128, 65536, 512, 512, 65536, 128, 128, 147456, 128, 128, 65536, 512,
    512, 65536, 128, 128, 147456, 128, 128, 32768, 512, 512, 131072, 256, 256, 16384,
    64, 64, 36864, 64, 64, 16384, 256, 256, 16384, 64, 64, 36864, 64, 64, 16384, 256,
    256, 16384, 64, 64, 36864, 64, 64, 4096, 256, 256, 16384, 64, 64, 9408,
]  # fmt: skip
RESNET152 = [
    6511592,
    6567936,
    5905920,
    6113280,
    6176256,
    6112768,
    6176256,
    6112768,
    5321216,
    5194816,
]


def cosmoflow(scale: float) -> tuple[Counter, Counter]:
    halo = [2097152, 1048576, 524288, 262144, 131072, 262144, 524288, 1048576]
    allgather = [65536, 256, 128]
    reduce_scatter = [128, 256, 65536]
    calls = Counter(mp=len(halo) * 4 + 3 + 3, dp=1, world=5)
    nbytes = Counter(
        mp=4 * sum(4 * sc(h, scale) for h in halo)
        + 4 * sum(sc(a, scale) for a in allgather)
        + 4 * sum(4 * sc(r, scale) for r in reduce_scatter),
        dp=4 * sc(1050737, scale),
        world=4 * sum(sc(c, scale) for c in [3539456, 884992, 221312, 55360, 3488]),
    )
    return calls, nbytes


def dlrm(world: int, scale: float) -> tuple[Counter, Counter]:
    per_peer = sc(262144 // world, scale)
    return (
        Counter(world=4),
        Counter(world=2 * per_peer * 4 * (world - 1) + 4 * (sc(728065, scale) + sc(49536, scale))),
    )


def pipeline_calls(stage: int, stages: int, mb: int) -> int:
    """Point-to-point calls of a pipeline iteration (forward + backward): the two
    end stages call once per micro-batch and direction, middle stages twice."""
    if stages == 1:
        return 0
    return 2 * mb * (2 if 0 < stage < stages - 1 else 1)


def gpt3(stage: int, stages: int, mb: int, scale: float) -> tuple[Counter, Counter]:
    """A full GPT-3 iteration: 2 tensor allreduces per micro-batch and direction,
    one data-parallel gradient allreduce."""
    pp = pipeline_calls(stage, stages, mb)
    calls = Counter(tp=4 * mb, dp=1)
    nbytes = Counter(tp=4 * mb * sc(25165824, scale) * 4, dp=sc(452984832, scale) * 4)
    if pp:
        calls["pp"] = pp
        nbytes["pp"] = pp * sc(25165824, scale) * 4
    return calls, nbytes


def gpt3_moe(
    stage: int, stages: int, mb: int, scale: float, a2a_size: int = 16
) -> tuple[Counter, Counter]:
    pp = pipeline_calls(stage, stages, mb)
    calls = Counter(moe=4 * mb, ep=1, dp=1, pp=pp)
    nbytes = Counter(
        moe=4 * mb * sc(25165824 // 16, scale) * 4 * (a2a_size - 1),
        ep=sc(1207959552 // 16, scale) * 4,
        dp=sc(603979776, scale) * 4,
        pp=pp * sc(25165824, scale) * 4,
    )
    return calls, nbytes
