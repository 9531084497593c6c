/* The ResNet-50 proxy's allreduce phase as a bare C loop (bench/bench_c_loop.py).

   Written from the documented facts (shared/reference/proxies.md): six blocking
   allreduces over all ranks of 3104745, 4461568, 4462592, 4986880, 4468736 and 4074560
   float32 elements, zero-filled buffers, SUM, plain MPI_Init (thread level single), a
   barrier, then WARMUP untimed and RUNS timed iterations timed with MPI_Wtime.

   usage: resnet50_allreduce MODE WARMUP RUNS
     MODE 0: a send and a receive buffer of its own per message;
     MODE 1: in place, in one shared buffer (what the Python proxy does).
   Rank 0 prints one JSON line: {"mode": M, "s_per_iter": T}. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

static const int SIZES[6] = {3104745, 4461568, 4462592, 4986880, 4468736, 4074560};

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    if (argc != 4) {
        fprintf(stderr, "usage: %s MODE(0|1) WARMUP RUNS\n", argv[0]);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    int mode = atoi(argv[1]), warmup = atoi(argv[2]), runs = atoi(argv[3]), rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    float *send[6], *recv[6];
    float *shared = calloc(4986880, sizeof(float));
    for (int i = 0; i < 6; i++) {
        send[i] = calloc(SIZES[i], sizeof(float));
        recv[i] = calloc(SIZES[i], sizeof(float));
    }
    double t0 = 0.0;
    for (int it = 0; it < warmup + runs; it++) {
        if (it == warmup) {
            MPI_Barrier(MPI_COMM_WORLD);
            t0 = MPI_Wtime();
        }
        for (int i = 0; i < 6; i++) {
            if (mode == 0)
                MPI_Allreduce(send[i], recv[i], SIZES[i], MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
            else
                MPI_Allreduce(MPI_IN_PLACE, shared, SIZES[i], MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        }
    }
    double per_iter = (MPI_Wtime() - t0) / runs;
    if (rank == 0) printf("{\"mode\": %d, \"s_per_iter\": %.9f}\n", mode, per_iter);
    for (int i = 0; i < 6; i++) {
        free(send[i]);
        free(recv[i]);
    }
    free(shared);
    MPI_Finalize();
    return 0;
}
