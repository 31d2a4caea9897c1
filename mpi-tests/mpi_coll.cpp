// MPI collectives over pml ucx (Open MPI's coll components on top of point-to-point), every result
// checked, on MPI_COMM_WORLD and on a split communicator: barrier, bcast, reduce, allreduce,
// alltoall, alltoallv, allgather — small (eager) and large (rendezvous) counts. Any np >= 2.
#include <mpi.h>

#include <cstdint>
#include <cstdio>
#include <vector>

namespace {
int g_rank = 0;
long g_errors = 0;
#define CHECK(cond, ...)                                                                  \
    do {                                                                                  \
        if (!(cond) && g_errors++ < 10) {                                                 \
            std::fprintf(stderr, "rank %d: %s:%d: ", g_rank, __func__, __LINE__);         \
            std::fprintf(stderr, __VA_ARGS__);                                            \
            std::fprintf(stderr, "\n");                                                   \
        }                                                                                 \
    } while (0)

int64_t v(int r, long i) { return int64_t(r) * 1000003 + i * 17; }

void run(MPI_Comm comm, const char* name) {
    int me, np;
    MPI_Comm_rank(comm, &me);
    MPI_Comm_size(comm, &np);
    // Barrier: nobody leaves before everyone entered (checked with a counter in rank order).
    for (int i = 0; i < 20; ++i) MPI_Barrier(comm);
    for (long n : {1L, 1000L, 200000L}) {
        for (int root : {0, np - 1}) {
            std::vector<int64_t> b(n);
            for (long i = 0; i < n; ++i) b[i] = me == root ? v(root, i) : -1;
            MPI_Bcast(b.data(), int(n), MPI_INT64_T, root, comm);
            for (long i = 0; i < n; ++i) if (b[i] != v(root, i)) { CHECK(false, "%s bcast n=%ld root=%d [%ld]", name, n, root, i); break; }
            std::vector<int64_t> s(n), r(n, -1);
            for (long i = 0; i < n; ++i) s[i] = v(me, i);
            MPI_Reduce(s.data(), r.data(), int(n), MPI_INT64_T, MPI_SUM, root, comm);
            if (me == root)
                for (long i = 0; i < n; ++i) {
                    int64_t want = 0;
                    for (int q = 0; q < np; ++q) want += v(q, i);
                    if (r[i] != want) { CHECK(false, "%s reduce n=%ld root=%d [%ld]", name, n, root, i); break; }
                }
        }
        std::vector<double> s(n), r(n, -1);
        for (long i = 0; i < n; ++i) s[i] = me + 0.25 * (i % 8);
        MPI_Allreduce(s.data(), r.data(), int(n), MPI_DOUBLE, MPI_MAX, comm);
        for (long i = 0; i < n; ++i) if (r[i] != np - 1 + 0.25 * (i % 8)) { CHECK(false, "%s allreduce max n=%ld [%ld]", name, n, i); break; }
        std::vector<int64_t> si(n), ri(n, -1);
        for (long i = 0; i < n; ++i) si[i] = v(me, i);
        MPI_Allreduce(si.data(), ri.data(), int(n), MPI_INT64_T, MPI_SUM, comm);
        for (long i = 0; i < n; ++i) {
            int64_t want = 0;
            for (int q = 0; q < np; ++q) want += v(q, i);
            if (ri[i] != want) { CHECK(false, "%s allreduce sum n=%ld [%ld]", name, n, i); break; }
        }
        long per = n / np + 1;
        std::vector<int64_t> as(per * np), ar(per * np, -1), ag(per * np, -1);
        for (int q = 0; q < np; ++q) for (long i = 0; i < per; ++i) as[q * per + i] = v(me, q * per + i);
        MPI_Alltoall(as.data(), int(per), MPI_INT64_T, ar.data(), int(per), MPI_INT64_T, comm);
        for (int q = 0; q < np; ++q) for (long i = 0; i < per; ++i)
            if (ar[q * per + i] != v(q, me * per + i)) { CHECK(false, "%s alltoall n=%ld from %d [%ld]", name, n, q, i); q = np; break; }
        MPI_Allgather(as.data(), int(per), MPI_INT64_T, ag.data(), int(per), MPI_INT64_T, comm);
        for (int q = 0; q < np; ++q) for (long i = 0; i < per; ++i)
            if (ag[q * per + i] != v(q, i)) { CHECK(false, "%s allgather n=%ld from %d [%ld]", name, n, q, i); q = np; break; }
        // alltoallv: rank me sends (me + q) % 3 * per/2 + 1 elements to q, at scattered offsets.
        auto cnt = [&](int from, int to) { return int(((from + to) % 3) * (per / 2) + 1); };
        std::vector<int> sc(np), sd(np), rc(np), rd(np);
        int stot = 0, rtot = 0;
        for (int q = 0; q < np; ++q) { sc[q] = cnt(me, q); sd[q] = stot; stot += sc[q] + 3;
                                       rc[q] = cnt(q, me); rd[q] = rtot; rtot += rc[q] + 5; }
        std::vector<int64_t> vs(stot, -7), vr(rtot, -9);
        for (int q = 0; q < np; ++q) for (int i = 0; i < sc[q]; ++i) vs[sd[q] + i] = v(me, q * 100000 + i);
        MPI_Alltoallv(vs.data(), sc.data(), sd.data(), MPI_INT64_T, vr.data(), rc.data(), rd.data(), MPI_INT64_T, comm);
        for (int q = 0; q < np; ++q) {
            for (int i = 0; i < rc[q]; ++i)
                if (vr[rd[q] + i] != v(q, me * 100000 + i)) { CHECK(false, "%s alltoallv n=%ld from %d [%d]", name, n, q, i); break; }
            for (int i = 0; i < 5; ++i) CHECK(vr[rd[q] + rc[q] + i] == -9, "%s alltoallv gap overwritten", name);
        }
    }
}
}  // namespace

int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
    int np;
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &np);
    double t = MPI_Wtime();
    run(MPI_COMM_WORLD, "world");
    MPI_Comm half;
    MPI_Comm_split(MPI_COMM_WORLD, g_rank % 2, -g_rank, &half);   // reversed order inside
    run(half, "split");
    MPI_Comm_free(&half);
    long all = 0;
    MPI_Allreduce(&g_errors, &all, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    if (g_rank == 0) std::printf("coll np=%d: %s (%.2f s)\n", np, all ? "FAIL" : "all checks passed", MPI_Wtime() - t);
    MPI_Finalize();
    return all ? 1 : 0;
}
