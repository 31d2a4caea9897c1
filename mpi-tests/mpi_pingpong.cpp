// MPI ping-pong and streaming bandwidth with every byte checked.
//
// Rank 0 and rank 1 exchange messages of 1 B .. max size (powers of two plus odd sizes around
// the eager/rendezvous switch). Each message carries a pattern derived from (size, iteration,
// sender), so a stale, duplicated, reordered or corrupted buffer is caught, not just a short one.
// Prints one line per size:  size=<bytes> lat_us=<half round trip> bw_MBps=<streaming MB/s>
// Exit code is non-zero on any mismatch (the first one is reported with its offset).
#include <mpi.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

struct Options {
    size_t max_size = 8u << 20;
    int lat_iters = 200;       // per size, scaled down for large messages
    int bw_window = 16;        // messages in flight for the bandwidth phase
    int bw_iters = 20;         // windows per size
    bool check = true;
    size_t only_size = 0;      // run just this size (e.g. the loss test's 1000 x 1 MiB)
    double seconds = 0;        // repeat the whole sweep until this much time passed (soak runs)
};

// Resident set size of this process in KiB (/proc/self/status VmRSS), 0 if unreadable.
long rss_kib() {
    FILE* f = std::fopen("/proc/self/status", "r");
    if (f == nullptr) return 0;
    char line[256];
    long kib = 0;
    while (std::fgets(line, sizeof(line), f))
        if (std::sscanf(line, "VmRSS: %ld kB", &kib) == 1) break;
    std::fclose(f);
    return kib;
}

uint8_t pattern(size_t size, int iter, int sender, size_t i) {
    // Cheap but position-, iteration- and sender-dependent.
    uint32_t x = uint32_t(i * 2654435761u) ^ uint32_t(size * 40503u) ^ uint32_t(iter * 977) ^
                 uint32_t(sender * 0x5bd1e995u);
    return uint8_t(x ^ (x >> 13) ^ (x >> 24));
}

void fill(std::vector<uint8_t>& buf, size_t size, int iter, int sender) {
    for (size_t i = 0; i < size; ++i) buf[i] = pattern(size, iter, sender, i);
}

// Returns the first bad offset or SIZE_MAX.
size_t verify(const std::vector<uint8_t>& buf, size_t size, int iter, int sender) {
    for (size_t i = 0; i < size; ++i)
        if (buf[i] != pattern(size, iter, sender, i)) return i;
    return SIZE_MAX;
}

std::vector<size_t> sizes_up_to(size_t max) {
    std::vector<size_t> s;
    for (size_t n = 1; n <= max; n *= 2) s.push_back(n);
    // Odd sizes straddle UCX's short/bcopy/zcopy and eager/rendezvous thresholds and MTU edges.
    for (size_t n : {3ul, 63ul, 257ul, 4095ul, 4097ul, 8191ul, 65537ul, 1000001ul})
        if (n <= max) s.push_back(n);
    std::sort(s.begin(), s.end());
    return s;
}

Options parse(int argc, char** argv) {
    Options o;
    for (int i = 1; i < argc; ++i) {
        std::string a = argv[i];
        auto next = [&]() -> const char* {
            if (i + 1 >= argc) { std::fprintf(stderr, "missing value for %s\n", a.c_str()); std::exit(2); }
            return argv[++i];
        };
        if (a == "--max-size") o.max_size = std::strtoull(next(), nullptr, 0);
        else if (a == "--iters") o.lat_iters = std::atoi(next());
        else if (a == "--bw-iters") o.bw_iters = std::atoi(next());
        else if (a == "--window") o.bw_window = std::atoi(next());
        else if (a == "--no-check") o.check = false;
        else if (a == "--only-size") o.only_size = std::strtoull(next(), nullptr, 0);
        else if (a == "--seconds") o.seconds = std::atof(next());
        else { std::fprintf(stderr, "unknown option %s\n", a.c_str()); std::exit(2); }
    }
    return o;
}

}  // namespace

int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
    int rank = 0, nranks = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    Options o = parse(argc, argv);
    if (nranks != 2) {
        if (rank == 0) std::fprintf(stderr, "mpi_pingpong needs exactly 2 ranks\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    const int peer = 1 - rank;
    std::vector<uint8_t> buf(o.max_size), rbuf(o.max_size);
    std::vector<std::vector<uint8_t>> win(o.bw_window, std::vector<uint8_t>(0));
    long errors = 0;

    if (rank == 0) std::printf("# mpi_pingpong: 2 ranks, max %zu B, check=%d\n", o.max_size, o.check);
    const std::vector<size_t> sizes =
        o.only_size ? std::vector<size_t>{o.only_size} : sizes_up_to(o.max_size);
    if (o.only_size > o.max_size) { buf.resize(o.only_size); rbuf.resize(o.only_size); }
    long transfers = 0;
    const double start = MPI_Wtime();
    // --seconds: the sweep repeats (sizes printed once) and every round ends with a line of both
    // ranks' RSS, so a soak run shows whether memory stays flat.
    for (int round = 0;; ++round) {
    for (size_t size : sizes) {
        int iters = std::max(5, int(o.lat_iters * std::min(1.0, 65536.0 / double(size))));
        // Latency: rank 0 sends pattern(iter, 0), rank 1 checks it and answers pattern(iter, 1).
        double t0 = 0;
        for (int it = -2; it < iters; ++it) {   // two warm-up rounds
            if (it == 0) { MPI_Barrier(MPI_COMM_WORLD); t0 = MPI_Wtime(); }
            const int iter = it + 2;
            if (rank == 0) {
                if (o.check) fill(buf, size, iter, 0);
                MPI_Send(buf.data(), int(size), MPI_BYTE, peer, 1, MPI_COMM_WORLD);
                MPI_Recv(rbuf.data(), int(size), MPI_BYTE, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                if (o.check) {
                    size_t bad = verify(rbuf, size, iter, 1);
                    if (bad != SIZE_MAX && errors++ == 0)
                        std::fprintf(stderr, "MISMATCH size %zu iter %d offset %zu (rank 0)\n", size, iter, bad);
                }
            } else {
                MPI_Recv(rbuf.data(), int(size), MPI_BYTE, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                if (o.check) {
                    size_t bad = verify(rbuf, size, iter, 0);
                    if (bad != SIZE_MAX && errors++ == 0)
                        std::fprintf(stderr, "MISMATCH size %zu iter %d offset %zu (rank 1)\n", size, iter, bad);
                    fill(buf, size, iter, 1);
                }
                MPI_Send(buf.data(), int(size), MPI_BYTE, peer, 1, MPI_COMM_WORLD);
            }
        }
        double lat_us = (MPI_Wtime() - t0) / iters / 2 * 1e6;

        // Bandwidth: rank 0 streams a window of messages, rank 1 checks each and acks the window.
        int bw_iters = std::max(2, int(o.bw_iters * std::min(1.0, 1048576.0 / double(size))));
        for (auto& w : win) w.resize(size);
        std::vector<MPI_Request> reqs(o.bw_window);
        double t1 = 0;
        for (int it = -1; it < bw_iters; ++it) {
            if (it == 0) { MPI_Barrier(MPI_COMM_WORLD); t1 = MPI_Wtime(); }
            for (int w = 0; w < o.bw_window; ++w) {
                const int iter = 1000 + (it + 1) * o.bw_window + w;
                if (rank == 0) {
                    if (o.check) fill(win[w], size, iter, 0);
                    MPI_Isend(win[w].data(), int(size), MPI_BYTE, peer, 2, MPI_COMM_WORLD, &reqs[w]);
                } else {
                    MPI_Irecv(win[w].data(), int(size), MPI_BYTE, peer, 2, MPI_COMM_WORLD, &reqs[w]);
                }
            }
            MPI_Waitall(o.bw_window, reqs.data(), MPI_STATUSES_IGNORE);
            if (rank == 1 && o.check) {
                for (int w = 0; w < o.bw_window; ++w) {
                    const int iter = 1000 + (it + 1) * o.bw_window + w;
                    size_t bad = verify(win[w], size, iter, 0);
                    if (bad != SIZE_MAX && errors++ == 0)
                        std::fprintf(stderr, "MISMATCH (bw) size %zu msg %d offset %zu\n", size, w, bad);
                }
            }
            char ack = 0;
            if (rank == 1) MPI_Send(&ack, 1, MPI_BYTE, peer, 3, MPI_COMM_WORLD);
            else MPI_Recv(&ack, 1, MPI_BYTE, peer, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        }
        transfers += 2L * (iters + 2) + long(o.bw_window) * (bw_iters + 1);
        double secs = MPI_Wtime() - t1;
        double mbps = double(size) * o.bw_window * bw_iters / secs / 1e6;
        if (rank == 0 && round == 0) {
            std::printf("size=%zu lat_us=%.2f bw_MBps=%.1f\n", size, lat_us, mbps);
            std::fflush(stdout);
        }
    }
    if (o.seconds <= 0) break;
    long rss[2] = {0, 0}, mine = rss_kib();
    MPI_Gather(&mine, 1, MPI_LONG, rss, 1, MPI_LONG, 0, MPI_COMM_WORLD);
    int more = 0;
    if (rank == 0) {
        const double t = MPI_Wtime() - start;
        std::printf("# round %d t=%.1f transfers=%ld rss_kib=%ld,%ld\n", round, t, transfers, rss[0], rss[1]);
        std::fflush(stdout);
        more = t < o.seconds;
    }
    MPI_Bcast(&more, 1, MPI_INT, 0, MPI_COMM_WORLD);
    if (!more) break;
    }

    long total = 0;
    MPI_Reduce(&errors, &total, 1, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0) std::printf("# mpi_pingpong: %ld transfers, %ld mismatches\n", transfers, total);
    MPI_Bcast(&total, 1, MPI_LONG, 0, MPI_COMM_WORLD);
    MPI_Finalize();
    return total == 0 ? 0 : 1;
}
