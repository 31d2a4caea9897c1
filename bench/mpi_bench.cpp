// MPI measurements that mpi_pingpong (latency, one-way streaming) does not make, for bench/run.sh:
//
//   bibw       bidirectional bandwidth: ranks 0 and 1 stream a window of messages at each other at
//              the same time (np 2; sizes 1 B .. --max-size in steps of x4). MB/s of both directions.
//   msgrate    message rate of np/2 pairs (rank r sends to r + np/2): windows of 64 messages of
//              --msg-size bytes (default 8), one zero-byte ack per window. Million messages per
//              second, summed over the pairs.
//   atomic     MPI_Fetch_and_op (int64 SUM) and MPI_Compare_and_swap (int64), each followed by
//              MPI_Win_flush, rank 0 on rank 1's window; microseconds per operation. The final
//              counter value is checked.
//   allreduce  MPI_Allreduce of one double (8 B) over all ranks; microseconds per call (the slowest
//              rank's average).
//
//   mpi_bench [--tests bibw,msgrate,atomic,allreduce] [--max-size N] [--msg-size N] [--scale F]
//
// --scale multiplies every iteration count (quick runs use < 1). Prints one line per figure:
//   test=<name> np=<ranks> size=<bytes> value=<figure> unit=<MBps|Mmsgs|us>
// Exit code 1 if a check failed.
#include <mpi.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace {

struct Options {
    std::string tests = "bibw,msgrate,atomic,allreduce";
    size_t max_size = 4u << 20;
    size_t msg_size = 8;
    double scale = 1.0;
    bool has(const char* t) const { return ("," + tests + ",").find("," + std::string(t) + ",") != std::string::npos; }
    int n(int iters) const { return std::max(2, int(iters * scale)); }
};

int g_rank = 0, g_np = 0;
long g_errors = 0;

void report(const char* test, size_t size, double value, const char* unit) {
    if (g_rank != 0) return;
    std::printf("test=%s np=%d size=%zu value=%.6g unit=%s\n", test, g_np, size, value, unit);
    std::fflush(stdout);
}

void bibw(const Options& o) {
    if (g_np != 2) return;
    const int peer = 1 - g_rank;
    auto window_for = [](size_t size) { return size >= 1048576 ? 4 : size >= 65536 ? 16 : 32; };
    std::vector<char> sbuf(o.max_size * window_for(o.max_size) + 65536 * 32), rbuf(sbuf.size());
    std::vector<MPI_Request> req(2 * 32);
    for (size_t size = 1; size <= o.max_size; size *= 4) {
        const int window = window_for(size);
        const int iters = o.n(int(20 * std::min(1.0, 2097152.0 / double(size)) * (size <= 4096 ? 5 : 1)));
        double t = 0;
        for (int it = -1; it < iters; ++it) {
            if (it == 0) { MPI_Barrier(MPI_COMM_WORLD); t = MPI_Wtime(); }
            for (int w = 0; w < window; ++w) {
                MPI_Irecv(&rbuf[w * size], int(size), MPI_BYTE, peer, 4, MPI_COMM_WORLD, &req[w]);
                MPI_Isend(&sbuf[w * size], int(size), MPI_BYTE, peer, 4, MPI_COMM_WORLD, &req[window + w]);
            }
            MPI_Waitall(2 * window, req.data(), MPI_STATUSES_IGNORE);
        }
        t = MPI_Wtime() - t;
        report("bibw", size, 2.0 * double(size) * window * iters / t / 1e6, "MBps");
    }
}

void msgrate(const Options& o) {
    if (g_np % 2 != 0) return;
    const int window = 64, half = g_np / 2;
    const bool sender = g_rank < half;
    const int peer = sender ? g_rank + half : g_rank - half, iters = o.n(400);
    std::vector<char> buf(o.msg_size * window);
    std::vector<MPI_Request> req(window);
    double t = 0;
    for (int it = -5; it < iters; ++it) {
        if (it == 0) { MPI_Barrier(MPI_COMM_WORLD); t = MPI_Wtime(); }
        for (int w = 0; w < window; ++w) {
            if (sender) MPI_Isend(&buf[w * o.msg_size], int(o.msg_size), MPI_BYTE, peer, 5, MPI_COMM_WORLD, &req[w]);
            else MPI_Irecv(&buf[w * o.msg_size], int(o.msg_size), MPI_BYTE, peer, 5, MPI_COMM_WORLD, &req[w]);
        }
        MPI_Waitall(window, req.data(), MPI_STATUSES_IGNORE);
        char ack = 0;
        if (sender) MPI_Recv(&ack, 1, MPI_BYTE, peer, 6, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        else MPI_Send(&ack, 1, MPI_BYTE, peer, 6, MPI_COMM_WORLD);
    }
    double rate = sender ? double(window) * iters / (MPI_Wtime() - t) : 0, sum = 0;
    MPI_Reduce(&rate, &sum, 1, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
    report("msgrate", o.msg_size, sum / 1e6, "Mmsgs");
}

void atomic(const Options& o) {
    int64_t cell = 0;
    MPI_Win win;
    MPI_Win_create(&cell, sizeof(cell), sizeof(cell), MPI_INFO_NULL, MPI_COMM_WORLD, &win);
    const int iters = o.n(2000);
    int64_t expect = 0;   // the value rank 0 knows the counter holds
    for (const char* op : {"fetch_and_op", "compare_and_swap"}) {
        if (g_rank == 0) {
            int64_t one = 1, old = 0, got = 0;
            double t = 0;
            MPI_Win_lock(MPI_LOCK_SHARED, 1, 0, win);
            for (int i = -10; i < iters; ++i) {
                if (i == 0) t = MPI_Wtime();
                if (op[0] == 'f') {
                    MPI_Fetch_and_op(&one, &old, MPI_INT64_T, 1, 0, MPI_SUM, win);
                } else {   // compare with the value we know is there, swap in the next one
                    int64_t next = expect + 1;
                    MPI_Compare_and_swap(&next, &expect, &got, MPI_INT64_T, 1, 0, win);
                }
                MPI_Win_flush(1, win);
                if (op[0] == 'c') {
                    if (got != expect && g_errors++ == 0)
                        std::fprintf(stderr, "rank 0: compare_and_swap read %ld, expected %ld\n", long(got), long(expect));
                    expect = got + 1;
                }
            }
            t = MPI_Wtime() - t;
            // Both loops run iters + 10 times, adding 1 each: fetch_and_op's last old value, and the
            // value compare_and_swap last found, tell whether an update was lost.
            const int64_t want = op[0] == 'f' ? iters + 9 : 2 * (iters + 10) - 1;
            if (op[0] == 'f') expect = old + 1;
            if ((op[0] == 'f' ? old : got) != want && g_errors++ == 0)
                std::fprintf(stderr, "rank 0: %s: counter %ld, expected %ld\n", op,
                             long(op[0] == 'f' ? old : got), long(want));
            MPI_Win_unlock(1, win);
            report(op, sizeof(int64_t), t / iters * 1e6, "us");
        }
        MPI_Barrier(MPI_COMM_WORLD);
    }
    MPI_Win_free(&win);
}

void allreduce(const Options& o) {
    const int iters = o.n(g_np <= 4 ? 2000 : 500);
    double in = g_rank, out = 0, t = 0;
    for (int i = -20; i < iters; ++i) {
        if (i == 0) { MPI_Barrier(MPI_COMM_WORLD); t = MPI_Wtime(); }
        MPI_Allreduce(&in, &out, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    }
    t = (MPI_Wtime() - t) / iters * 1e6;
    if (out != double(g_np) * (g_np - 1) / 2 && g_errors++ == 0)
        std::fprintf(stderr, "rank %d: allreduce sum %g\n", g_rank, out);
    double slowest = 0;
    MPI_Reduce(&t, &slowest, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    report("allreduce", sizeof(double), slowest, "us");
}

}  // namespace

int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &g_np);
    Options o;
    for (int i = 1; i < argc; ++i) {
        std::string a = argv[i];
        if (i + 1 >= argc) { std::fprintf(stderr, "mpi_bench: %s needs a value\n", a.c_str()); MPI_Abort(MPI_COMM_WORLD, 2); }
        const char* v = argv[++i];
        if (a == "--tests") o.tests = v;
        else if (a == "--max-size") o.max_size = std::strtoull(v, nullptr, 0);
        else if (a == "--msg-size") o.msg_size = std::strtoull(v, nullptr, 0);
        else if (a == "--scale") o.scale = std::atof(v);
        else { std::fprintf(stderr, "mpi_bench: unknown option %s\n", a.c_str()); MPI_Abort(MPI_COMM_WORLD, 2); }
    }
    if (o.has("bibw")) bibw(o);
    if (o.has("msgrate")) msgrate(o);
    if (o.has("atomic") && g_np >= 2) atomic(o);
    if (o.has("allreduce")) allreduce(o);
    long total = 0;
    MPI_Allreduce(&g_errors, &total, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    MPI_Finalize();
    return total == 0 ? 0 : 1;
}
