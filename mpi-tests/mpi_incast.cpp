// N-to-1 incast: every rank but 0 sends `--count` messages of `--size` bytes to rank 0 at once;
// rank 0 receives them (several outstanding per sender) and checks every byte. Prints, on rank 0:
//
//   incast: senders=4 size=1048576 count=8 verified=32 mismatches=0 seconds=6.53
//   incast-sender rank=1 bytes=8388608 seconds=6.40 mbps=10.48
//   ...
//   incast: aggregate_mbps=41.1 jain=0.998 min_mbps=10.2 max_mbps=10.5
//   incast-steady: mbps=39.2 jain=0.999 seconds=4.8
//
// The steady window runs from when 10% of all data has arrived (every sender's congestion control
// had time to find its share) to when the first sender is done (all still sending): its goodput
// and Jain's index over the bytes each sender delivered inside it.
// A sender's rate is its bytes over the time from the common start (a barrier) to rank 0
// receiving its last message; Jain's index over those rates is 1 when all senders got equal
// shares. Exit 1 on any mismatch (the data pattern depends on sender, message and offset).
#include <mpi.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

uint8_t pattern(int rank, int msg, size_t off) {
    uint32_t x = uint32_t(rank) * 2654435761u ^ uint32_t(msg) * 40503u ^ uint32_t(off >> 2) * 2246822519u;
    x ^= x >> 15;
    return uint8_t(x + off);
}

void fill(std::vector<uint8_t>& b, int rank, int msg) {
    for (size_t i = 0; i < b.size(); ++i) b[i] = pattern(rank, msg, i);
}

size_t count_bad(const std::vector<uint8_t>& b, int rank, int msg) {
    size_t bad = 0;
    for (size_t i = 0; i < b.size(); ++i) bad += b[i] != pattern(rank, msg, i);
    return bad;
}

} // namespace

int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
    int rank = 0, np = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &np);
    size_t size = 1 << 20;
    int count = 8, window = 2;
    for (int i = 1; i + 1 < argc; i += 2) {
        const std::string a = argv[i];
        if (a == "--size") size = std::strtoull(argv[i + 1], nullptr, 0);
        else if (a == "--count") count = std::atoi(argv[i + 1]);
        else if (a == "--window") window = std::atoi(argv[i + 1]);
    }
    if (np < 2 || count < 1 || window < 1 || size == 0) {
        if (rank == 0) std::fprintf(stderr, "usage: mpirun -np N mpi_incast [--size B] [--count N] [--window W]\n");
        MPI_Finalize();
        return 2;
    }
    // Warm-up: one small message each way, so connection setup is not part of the timing.
    {
        int x = rank;
        if (rank == 0) {
            for (int s = 1; s < np; ++s) MPI_Recv(&x, 1, MPI_INT, s, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        } else {
            MPI_Send(&x, 1, MPI_INT, 0, 7, MPI_COMM_WORLD);
        }
    }
    MPI_Barrier(MPI_COMM_WORLD);
    const double t0 = MPI_Wtime();
    int rc = 0;
    if (rank != 0) {
        std::vector<std::vector<uint8_t>> bufs(static_cast<size_t>(window), std::vector<uint8_t>(size));
        std::vector<MPI_Request> reqs(static_cast<size_t>(window), MPI_REQUEST_NULL);
        for (int m = 0; m < count; ++m) {
            const size_t k = size_t(m % window);
            MPI_Wait(&reqs[k], MPI_STATUS_IGNORE);
            fill(bufs[k], rank, m);
            MPI_Isend(bufs[k].data(), int(size), MPI_BYTE, 0, m, MPI_COMM_WORLD, &reqs[k]);
        }
        MPI_Waitall(window, reqs.data(), MPI_STATUSES_IGNORE);
    } else {
        const int senders = np - 1;
        // Per sender: `window` receives outstanding, messages in order (tag = message number).
        struct Slot { std::vector<uint8_t> buf; int msg = -1; };
        std::vector<std::vector<Slot>> slots(static_cast<size_t>(np));
        std::vector<MPI_Request> reqs;
        std::vector<std::pair<int, int>> who;   // request index -> (sender, slot)
        std::vector<int> next(static_cast<size_t>(np), 0), done(static_cast<size_t>(np), 0);
        std::vector<double> finish(static_cast<size_t>(np), 0);
        std::vector<double> got_bytes(static_cast<size_t>(np), 0), at_a(static_cast<size_t>(np), 0),
                at_b(static_cast<size_t>(np), 0);
        const double total_bytes = double(size) * count * (np - 1);
        double received = 0, t_a = -1, t_b = -1;
        for (int s = 1; s < np; ++s) {
            slots[size_t(s)].resize(size_t(window));
            for (int k = 0; k < window; ++k) {
                Slot& sl = slots[size_t(s)][size_t(k)];
                sl.buf.assign(size, 0);
                reqs.push_back(MPI_REQUEST_NULL);
                who.emplace_back(s, k);
                if (next[size_t(s)] < count) {
                    sl.msg = next[size_t(s)]++;
                    MPI_Irecv(sl.buf.data(), int(size), MPI_BYTE, s, sl.msg, MPI_COMM_WORLD, &reqs.back());
                }
            }
        }
        size_t mismatches = 0, verified = 0;
        int remaining = senders * count;
        while (remaining > 0) {
            int idx = MPI_UNDEFINED;
            MPI_Status st;
            MPI_Waitany(int(reqs.size()), reqs.data(), &idx, &st);
            if (idx == MPI_UNDEFINED) break;
            const auto [s, k] = who[size_t(idx)];
            Slot& sl = slots[size_t(s)][size_t(k)];
            int got = 0;
            MPI_Get_count(&st, MPI_BYTE, &got);
            mismatches += size_t(got) != size ? size : count_bad(sl.buf, s, sl.msg);
            ++verified;
            --remaining;
            got_bytes[size_t(s)] += got;
            received += got;
            if (t_a < 0 && received >= 0.1 * total_bytes) {
                t_a = MPI_Wtime() - t0;
                at_a = got_bytes;
            }
            if (++done[size_t(s)] == count) {
                finish[size_t(s)] = MPI_Wtime() - t0;
                if (t_b < 0) {
                    t_b = finish[size_t(s)];
                    at_b = got_bytes;
                }
            }
            if (next[size_t(s)] < count) {
                std::memset(sl.buf.data(), 0, size);
                sl.msg = next[size_t(s)]++;
                MPI_Irecv(sl.buf.data(), int(size), MPI_BYTE, s, sl.msg, MPI_COMM_WORLD, &reqs[size_t(idx)]);
            }
        }
        const double total_s = MPI_Wtime() - t0;
        std::printf("incast: senders=%d size=%zu count=%d verified=%zu mismatches=%zu seconds=%.3f\n", senders,
                    size, count, verified, mismatches, total_s);
        double sum = 0, sum2 = 0, lo = 1e300, hi = 0;
        for (int s = 1; s < np; ++s) {
            const double bytes = double(size) * count;
            const double mbps = finish[size_t(s)] > 0 ? bytes * 8 / finish[size_t(s)] / 1e6 : 0;
            std::printf("incast-sender rank=%d bytes=%.0f seconds=%.3f mbps=%.2f\n", s, bytes, finish[size_t(s)], mbps);
            sum += mbps;
            sum2 += mbps * mbps;
            lo = std::min(lo, mbps);
            hi = std::max(hi, mbps);
        }
        const double jain = sum2 > 0 ? sum * sum / (senders * sum2) : 0;
        std::printf("incast: aggregate_mbps=%.2f jain=%.4f min_mbps=%.2f max_mbps=%.2f\n",
                    double(size) * count * senders * 8 / total_s / 1e6, jain, lo, hi);
        if (t_a >= 0 && t_b > t_a) {
            double bytes = 0, s1 = 0, s2 = 0;
            for (int s = 1; s < np; ++s) {
                const double b = at_b[size_t(s)] - at_a[size_t(s)];
                bytes += b;
                s1 += b;
                s2 += b * b;
            }
            std::printf("incast-steady: mbps=%.2f jain=%.4f seconds=%.3f\n", bytes * 8 / (t_b - t_a) / 1e6,
                        s2 > 0 ? s1 * s1 / (senders * s2) : 0, t_b - t_a);
        } else {
            std::printf("incast-steady: none (the first sender finished before 10%% of the data arrived)\n");
        }
        std::fflush(stdout);
        rc = mismatches == 0 && verified == size_t(senders * count) ? 0 : 1;
    }
    MPI_Bcast(&rc, 1, MPI_INT, 0, MPI_COMM_WORLD);
    MPI_Finalize();
    return rc;
}
