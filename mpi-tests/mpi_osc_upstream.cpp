// One-sided operations that Open MPI 4.1.4's osc ucx gets wrong on every UCX transport (verified
// identical with UCX_TLS=tcp,self): kept apart from mpi_osc so our own failures stay visible.
//   fop_double  MPI_Fetch_and_op(MPI_DOUBLE, MPI_SUM): osc ucx issues a 64-bit *integer* atomic add
//               on the IEEE bit patterns (1.0 + 1.0 -> 0x7fe0000000000000 = 8.99e307).
//   fop_int16   MPI_Fetch_and_op(MPI_INT16_T, MPI_SUM): ucp rejects the 2-byte atomic
//               ("UCX ERROR invalid atomic operation datatype: 0x10") and the update is lost
//               while MPI reports success.
// A wrong value that is exactly the known upstream pattern is printed as
//   "upstream-known <id>: ..."; any other wrong value as "rank N: ..." (our failure).
// run_mpi_test.sh turns a run whose only errors are upstream-known ones into exit 77 (CTest
// "Skipped", labelled EXPECTED UPSTREAM FAILURE); when upstream is fixed the test simply passes.
#include <mpi.h>

#include <cstdint>
#include <cstdio>
#include <cstring>

int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
    int rank, np;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &np);
    long own = 0, upstream = 0;
    // fop_double
    {
        double mem[2] = {0, 0};
        MPI_Win w;
        MPI_Win_create(mem, sizeof mem, sizeof(double), MPI_INFO_NULL, MPI_COMM_WORLD, &w);
        MPI_Win_lock_all(0, w);
        double one = 1.0, old;
        MPI_Fetch_and_op(&one, &old, MPI_DOUBLE, 0, 0, MPI_SUM, w);
        MPI_Win_unlock_all(w);
        MPI_Barrier(MPI_COMM_WORLD);
        if (rank == 0) {
            MPI_Win_lock(MPI_LOCK_EXCLUSIVE, 0, 0, w);
            double got = mem[0];
            MPI_Win_unlock(0, w);
            uint64_t bits, onebits, want_bug = 0;
            std::memcpy(&bits, &got, 8);
            std::memcpy(&onebits, &one, 8);
            for (int i = 0; i < np; ++i) want_bug += onebits;   // integer sum of the bit patterns
            if (got != double(np)) {
                if (bits == want_bug) { ++upstream; std::printf("upstream-known fop_double: Fetch_and_op(MPI_DOUBLE,SUM) x%d of 1.0 = %g (bits 0x%llx = integer add of IEEE bits), expected %d\n", np, got, (unsigned long long)bits, np); }
                else { ++own; std::printf("rank 0: fop_double: got %g (bits 0x%llx), expected %d\n", got, (unsigned long long)bits, np); }
            } else std::printf("fop_double ok\n");
        }
        MPI_Win_free(&w);
    }
    // fop_int16
    {
        int16_t mem[4] = {0, 0, 0, 0};
        MPI_Win w;
        MPI_Win_create(mem, sizeof mem, sizeof(int16_t), MPI_INFO_NULL, MPI_COMM_WORLD, &w);
        MPI_Win_lock_all(0, w);
        int16_t one = 1, old;
        MPI_Fetch_and_op(&one, &old, MPI_INT16_T, 0, 0, MPI_SUM, w);
        MPI_Win_unlock_all(w);
        MPI_Barrier(MPI_COMM_WORLD);
        if (rank == 0) {
            MPI_Win_lock(MPI_LOCK_EXCLUSIVE, 0, 0, w);
            int got = mem[0];
            MPI_Win_unlock(0, w);
            if (got != np) {
                if (got == 0) { ++upstream; std::printf("upstream-known fop_int16: Fetch_and_op(MPI_INT16_T,SUM) lost (value %d, expected %d) with ucp 'invalid atomic operation datatype'\n", got, np); }
                else { ++own; std::printf("rank 0: fop_int16: got %d, expected %d\n", got, np); }
            } else std::printf("fop_int16 ok\n");
        }
        MPI_Win_free(&w);
    }
    std::fflush(stdout);
    MPI_Finalize();
    return (own || upstream) ? 1 : 0;
}
