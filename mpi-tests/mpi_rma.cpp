// MPI one-sided operations over osc ucx, every result checked:
//   active target (fence):  Put, Get, Accumulate(SUM)
//   passive target (lock):  Put/Get with flush, Fetch_and_op(SUM) counter, Compare_and_swap
//                           spin-lock counter, while the target computes outside MPI.
// Any rank count >= 2. Exit code non-zero on the first wrong value (reported with its place).
#include <mpi.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace {

int g_rank = 0, g_size = 0;
long g_errors = 0;

void expect_eq(const char* what, long idx, int64_t got, int64_t want) {
    if (got == want) return;
    if (g_errors++ < 5)
        std::fprintf(stderr, "rank %d: %s[%ld] = %lld, expected %lld\n", g_rank, what, idx,
                     (long long)got, (long long)want);
}

int64_t value(int owner, int writer, long i) { return (int64_t(owner) << 40) ^ (int64_t(writer) << 24) ^ (i * 7919); }

// Busy computation without MPI calls: the target's transport must answer on its own.
void compute_for(double seconds) {
    auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    volatile double x = 1;
    while (std::chrono::steady_clock::now() < end) x = x * 1.0000001 + 1e-9;
}

void active_target(long n) {
    std::vector<int64_t> mem(n * g_size, 0);
    MPI_Win win;
    MPI_Win_create(mem.data(), MPI_Aint(mem.size() * sizeof(int64_t)), sizeof(int64_t),
                   MPI_INFO_NULL, MPI_COMM_WORLD, &win);
    // Put: every rank writes its slice [rank*n, rank*n+n) of every other rank's window.
    std::vector<int64_t> src(n);
    MPI_Win_fence(0, win);
    for (int t = 0; t < g_size; ++t) {
        for (long i = 0; i < n; ++i) src[i] = value(t, g_rank, i);
        MPI_Put(src.data(), int(n), MPI_INT64_T, t, MPI_Aint(g_rank * n), int(n), MPI_INT64_T, win);
        MPI_Win_fence(0, win);   // src is reused: complete before refilling
    }
    for (int w = 0; w < g_size; ++w)
        for (long i = 0; i < n; ++i) expect_eq("fence put", w * n + i, mem[w * n + i], value(g_rank, w, i));

    // Get: read back the right neighbour's slice written by us.
    int right = (g_rank + 1) % g_size;
    std::vector<int64_t> got(n, -1);
    MPI_Get(got.data(), int(n), MPI_INT64_T, right, MPI_Aint(g_rank * n), int(n), MPI_INT64_T, win);
    MPI_Win_fence(0, win);
    for (long i = 0; i < n; ++i) expect_eq("fence get", i, got[i], value(right, g_rank, i));

    // Accumulate: every rank adds (rank+1) to every element of rank 0's first slice.
    MPI_Win_fence(0, win);
    if (g_rank == 0) for (long i = 0; i < n; ++i) mem[i] = i;
    MPI_Win_fence(0, win);
    std::vector<int64_t> inc(n, g_rank + 1);
    MPI_Accumulate(inc.data(), int(n), MPI_INT64_T, 0, 0, int(n), MPI_INT64_T, MPI_SUM, win);
    MPI_Win_fence(0, win);
    if (g_rank == 0) {
        const int64_t add = int64_t(g_size) * (g_size + 1) / 2;
        for (long i = 0; i < n; ++i) expect_eq("accumulate", i, mem[i], i + add);
    }
    MPI_Win_fence(0, win);
    MPI_Win_free(&win);
}

void passive_target(long n, int iters) {
    // Rank 0 is the target: it computes (no MPI calls) while the others work on its window.
    std::vector<int64_t> mem(n + 2, 0);   // [0..n) data, [n] fetch-add counter, [n+1] CAS lock
    MPI_Win win;
    MPI_Win_create(mem.data(), MPI_Aint(mem.size() * sizeof(int64_t)), sizeof(int64_t),
                   MPI_INFO_NULL, MPI_COMM_WORLD, &win);
    MPI_Barrier(MPI_COMM_WORLD);
    if (g_rank == 0) {
        compute_for(0.5);
    } else {
        MPI_Win_lock(MPI_LOCK_SHARED, 0, 0, win);
        const int64_t one = 1;
        int64_t old = 0;
        for (int it = 0; it < iters; ++it) {
            MPI_Fetch_and_op(&one, &old, MPI_INT64_T, 0, MPI_Aint(n), MPI_SUM, win);
            MPI_Win_flush(0, win);
        }
        // Spin lock at [n+1] with CAS, then a read-modify-write of data[0] under it.
        for (int it = 0; it < iters; ++it) {
            const int64_t unlocked = 0, mine = g_rank;
            int64_t prev = -1;
            do {
                MPI_Compare_and_swap(&mine, &unlocked, &prev, MPI_INT64_T, 0, MPI_Aint(n + 1), win);
                MPI_Win_flush(0, win);
            } while (prev != 0);
            int64_t v = 0;
            MPI_Get(&v, 1, MPI_INT64_T, 0, 0, 1, MPI_INT64_T, win);
            MPI_Win_flush(0, win);
            ++v;
            MPI_Put(&v, 1, MPI_INT64_T, 0, 0, 1, MPI_INT64_T, win);
            MPI_Win_flush(0, win);
            MPI_Compare_and_swap(&unlocked, &mine, &prev, MPI_INT64_T, 0, MPI_Aint(n + 1), win);
            MPI_Win_flush(0, win);
            expect_eq("cas unlock saw owner", it, prev, mine);
        }
        MPI_Win_unlock(0, win);

        // Exclusive lock: write a slice, flush, read it back while the target still computes.
        if (g_rank == 1) {
            std::vector<int64_t> src(n), back(n, -1);
            for (long i = 1; i < n; ++i) src[i] = value(0, 1, i);
            MPI_Win_lock(MPI_LOCK_EXCLUSIVE, 0, 0, win);
            MPI_Put(src.data() + 1, int(n - 1), MPI_INT64_T, 0, 1, int(n - 1), MPI_INT64_T, win);
            MPI_Win_flush(0, win);
            MPI_Get(back.data() + 1, int(n - 1), MPI_INT64_T, 0, 1, int(n - 1), MPI_INT64_T, win);
            MPI_Win_unlock(0, win);
            for (long i = 1; i < n; ++i) expect_eq("passive get", i, back[i], src[i]);
        }
    }
    MPI_Barrier(MPI_COMM_WORLD);
    if (g_rank == 0) {
        MPI_Win_lock(MPI_LOCK_EXCLUSIVE, 0, 0, win);   // synchronise the public and private copy
        const int64_t workers = g_size - 1;
        expect_eq("fetch_and_op counter", 0, mem[n], workers * iters);
        expect_eq("cas-protected counter", 0, mem[0], workers * iters);
        expect_eq("cas lock released", 0, mem[n + 1], 0);
        for (long i = 1; i < n; ++i) expect_eq("passive put", i, mem[i], value(0, 1, i));
        MPI_Win_unlock(0, win);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Win_free(&win);
}

}  // namespace

int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &g_size);
    const long n = argc > 1 ? std::atol(argv[1]) : 100000;   // elements per slice (800 KB)
    const int iters = argc > 2 ? std::atoi(argv[2]) : 200;
    if (g_size < 2 || n < 2) {
        if (g_rank == 0) std::fprintf(stderr, "mpi_rma needs >= 2 ranks and n >= 2\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    active_target(n);
    if (g_rank == 0) std::printf("# active target (fence put/get/accumulate): %ld errors\n", g_errors);
    long before = g_errors;
    passive_target(n, iters);
    if (g_rank == 0) std::printf("# passive target (fetch_and_op/cas/put/get): %ld errors\n", g_errors - before);
    long total = 0;
    MPI_Allreduce(&g_errors, &total, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    if (g_rank == 0) std::printf("# mpi_rma: %ld errors over %d ranks\n", total, g_size);
    MPI_Finalize();
    return total == 0 ? 0 : 1;
}
