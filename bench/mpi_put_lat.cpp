// One-sided MPI_Put latency (as osu_put_latency: lock once, put + flush per iteration) and
// MPI_Get latency, rank 0 -> rank 1. Prints: op=<put|get> size=<bytes> lat_us=<per operation>.
#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    const int iters = argc > 1 ? std::atoi(argv[1]) : 2000;
    const size_t max = 1 << 20;
    std::vector<char> mem(max, 0), buf(max, 1);
    MPI_Win win;
    MPI_Win_create(mem.data(), MPI_Aint(max), 1, MPI_INFO_NULL, MPI_COMM_WORLD, &win);
    for (const char* op : {"put", "get"}) {
        for (size_t size : {8ul, 4096ul, 65536ul, 1048576ul}) {
            int n = size > 65536 ? iters / 20 + 1 : iters;
            double t = 0;
            if (rank == 0) {
                MPI_Win_lock(MPI_LOCK_SHARED, 1, 0, win);
                for (int i = -10; i < n; ++i) {
                    if (i == 0) t = MPI_Wtime();
                    if (op[0] == 'p') MPI_Put(buf.data(), int(size), MPI_CHAR, 1, 0, int(size), MPI_CHAR, win);
                    else MPI_Get(buf.data(), int(size), MPI_CHAR, 1, 0, int(size), MPI_CHAR, win);
                    MPI_Win_flush(1, win);
                }
                t = MPI_Wtime() - t;
                MPI_Win_unlock(1, win);
                std::printf("op=%s size=%zu lat_us=%.2f\n", op, size, t / n * 1e6);
                std::fflush(stdout);
            }
            MPI_Barrier(MPI_COMM_WORLD);
        }
    }
    MPI_Win_free(&win);
    MPI_Finalize();
    return 0;
}
