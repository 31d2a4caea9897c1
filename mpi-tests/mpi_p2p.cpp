// MPI point-to-point semantics over pml ucx, every byte checked. Any rank count >= 2 (pairs
// 0<->1 do the pair tests; all ranks take part in ANY_SOURCE). Exit code non-zero on any error.
//   sizes      blocking + nonblocking, 0 B .. 4 MiB across eager/rendezvous thresholds
//   anysrc     MPI_ANY_SOURCE / MPI_ANY_TAG, status fields checked
//   ordering   many same-tag messages of mixed sizes arrive in send order
//   unexpected sends complete long before the receives are posted
//   probe      MPI_Probe / MPI_Iprobe / MPI_Mprobe+MPI_Mrecv / MPI_Improbe, count from status
//   truncate   receive buffer too small: MPI_ERR_TRUNCATE, bytes beyond the buffer untouched
//   datatype   MPI_Type_vector / indexed / struct, gaps untouched
//   zero       zero-byte messages, status count 0
//   many       hundreds of outstanding Isend/Irecv at once
#include <mpi.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {
int g_rank = 0, g_size = 0;
long g_errors = 0;

#define CHECK(cond, ...)                                                        \
    do {                                                                        \
        if (!(cond)) {                                                          \
            if (g_errors++ < 10) {                                              \
                std::fprintf(stderr, "rank %d: %s:%d: ", g_rank, __func__, __LINE__); \
                std::fprintf(stderr, __VA_ARGS__);                              \
                std::fprintf(stderr, "\n");                                     \
            }                                                                   \
        }                                                                       \
    } while (0)

uint8_t pat(long seed, long i) { return uint8_t((seed * 131 + i * 7 + (i >> 8)) & 0xff); }
void fill(std::vector<uint8_t>& b, long seed) { for (size_t i = 0; i < b.size(); ++i) b[i] = pat(seed, long(i)); }
long first_bad(const uint8_t* b, size_t n, long seed) {
    for (size_t i = 0; i < n; ++i) if (b[i] != pat(seed, long(i))) return long(i);
    return -1;
}
const std::vector<long> kSizes = {0, 1, 7, 64, 1000, 4095, 4096, 4097, 8191, 8192, 8193, 16384,
                                  65535, 65536, 65537, 262144, 1048575, 1048576, 4194304};

void sizes() {
    if (g_rank > 1) return;
    int peer = 1 - g_rank;
    for (long n : kSizes) {
        for (int nb = 0; nb < 2; ++nb) {
            std::vector<uint8_t> s(n), r(n + 16, 0xEE);
            fill(s, n + g_rank + 10 * nb);
            MPI_Status st;
            if (nb) {
                MPI_Request rq[2];
                MPI_Irecv(r.data(), int(n), MPI_BYTE, peer, 5, MPI_COMM_WORLD, &rq[0]);
                MPI_Isend(s.data(), int(n), MPI_BYTE, peer, 5, MPI_COMM_WORLD, &rq[1]);
                MPI_Status sts[2];
                MPI_Waitall(2, rq, sts);
                st = sts[0];
            } else if (g_rank == 0) {
                MPI_Send(s.data(), int(n), MPI_BYTE, peer, 5, MPI_COMM_WORLD);
                MPI_Recv(r.data(), int(n), MPI_BYTE, peer, 5, MPI_COMM_WORLD, &st);
            } else {
                MPI_Recv(r.data(), int(n), MPI_BYTE, peer, 5, MPI_COMM_WORLD, &st);
                MPI_Send(s.data(), int(n), MPI_BYTE, peer, 5, MPI_COMM_WORLD);
            }
            int cnt = -1;
            MPI_Get_count(&st, MPI_BYTE, &cnt);
            CHECK(cnt == n, "size %ld nb %d: count %d", n, nb, cnt);
            long bad = first_bad(r.data(), n, n + peer + 10 * nb);
            CHECK(bad < 0, "size %ld nb %d: byte %ld wrong", n, nb, bad);
            for (int i = 0; i < 16; ++i) CHECK(r[n + i] == 0xEE, "size %ld: overrun", n);
        }
    }
}

void anysrc() {
    // Every rank != 0 sends 3 messages with distinct tags; rank 0 receives them with wildcards.
    const int per = 3;
    if (g_rank == 0) {
        std::vector<int> seen(g_size * per, 0);
        for (int k = 0; k < (g_size - 1) * per; ++k) {
            std::vector<int64_t> buf(2000, -1);
            MPI_Status st;
            MPI_Recv(buf.data(), 2000, MPI_INT64_T, MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &st);
            int cnt;
            MPI_Get_count(&st, MPI_INT64_T, &cnt);
            int src = st.MPI_SOURCE, tag = st.MPI_TAG;
            CHECK(src >= 1 && src < g_size && tag >= 100 && tag < 100 + per, "src %d tag %d", src, tag);
            if (!(src >= 1 && src < g_size && tag >= 100 && tag < 100 + per)) continue;
            int want = 10 + 700 * (tag - 100);
            CHECK(cnt == want, "src %d tag %d count %d want %d", src, tag, cnt, want);
            for (int i = 0; i < cnt && i < 2000; ++i)
                if (buf[i] != src * 1000000 + tag * 1000 + i) { CHECK(false, "src %d tag %d elem %d", src, tag, i); break; }
            seen[src * per + tag - 100]++;
        }
        for (int s = 1; s < g_size; ++s)
            for (int t = 0; t < per; ++t) CHECK(seen[s * per + t] == 1, "src %d tag %d seen %d", s, t, seen[s * per + t]);
    } else {
        for (int t = 0; t < per; ++t) {
            int tag = 100 + t, cnt = 10 + 700 * t;
            std::vector<int64_t> buf(cnt);
            for (int i = 0; i < cnt; ++i) buf[i] = g_rank * 1000000 + tag * 1000 + i;
            MPI_Send(buf.data(), cnt, MPI_INT64_T, 0, tag, MPI_COMM_WORLD);
        }
    }
}

void ordering() {
    if (g_rank > 1) return;
    const int n = 200;
    // Mixed sizes so eager and rendezvous messages interleave; non-overtaking rule must hold.
    auto sz = [](int i) { return (i % 5 == 0) ? 70000 : (i % 3 == 0 ? 9000 : 8); };
    if (g_rank == 0) {
        std::vector<std::vector<int32_t>> bufs(n);
        std::vector<MPI_Request> rq(n);
        for (int i = 0; i < n; ++i) {
            bufs[i].assign(sz(i) / 4 + 1, i);
            MPI_Isend(bufs[i].data(), int(bufs[i].size()), MPI_INT32_T, 1, 7, MPI_COMM_WORLD, &rq[i]);
        }
        MPI_Waitall(n, rq.data(), MPI_STATUSES_IGNORE);
    } else {
        std::vector<int32_t> b(70000 / 4 + 1);
        for (int i = 0; i < n; ++i) {
            MPI_Status st;
            MPI_Recv(b.data(), int(b.size()), MPI_INT32_T, 0, MPI_ANY_TAG, MPI_COMM_WORLD, &st);
            int cnt;
            MPI_Get_count(&st, MPI_INT32_T, &cnt);
            CHECK(cnt == sz(i) / 4 + 1 && b[0] == i && b[cnt - 1] == i, "msg %d arrived as %d (count %d)", i, b[0], cnt);
        }
    }
}

void unexpected() {
    if (g_rank > 1) return;
    // Rank 0 sends eager messages (complete locally) and a large one, then rank 1 posts receives
    // only after a barrier-like handshake guaranteeing the sends happened first.
    const std::vector<long> ns = {1, 100, 4000, 30000, 2000000};
    if (g_rank == 0) {
        std::vector<std::vector<uint8_t>> bufs;
        std::vector<MPI_Request> rq(ns.size());
        for (size_t k = 0; k < ns.size(); ++k) {
            bufs.emplace_back(ns[k]);
            fill(bufs.back(), 50 + long(k));
            MPI_Isend(bufs.back().data(), int(ns[k]), MPI_BYTE, 1, 300 + int(k), MPI_COMM_WORLD, &rq[k]);
        }
        int go = 1;
        MPI_Send(&go, 1, MPI_INT, 1, 299, MPI_COMM_WORLD);
        MPI_Waitall(int(rq.size()), rq.data(), MPI_STATUSES_IGNORE);
    } else {
        int go;
        MPI_Recv(&go, 1, MPI_INT, 0, 299, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        double t = MPI_Wtime();
        while (MPI_Wtime() - t < 0.2) {}
        // Receive in reverse tag order: all earlier ones are unexpected by then.
        for (int k = int(ns.size()) - 1; k >= 0; --k) {
            std::vector<uint8_t> b(ns[k]);
            MPI_Recv(b.data(), int(ns[k]), MPI_BYTE, 0, 300 + k, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            long bad = first_bad(b.data(), ns[k], 50 + k);
            CHECK(bad < 0, "unexpected msg %d size %ld byte %ld wrong", k, ns[k], bad);
        }
    }
}

void probe() {
    if (g_rank > 1) return;
    const std::vector<long> ns = {0, 33, 5000, 100000, 1500000};
    if (g_rank == 0) {
        for (int round = 0; round < 4; ++round)
            for (size_t k = 0; k < ns.size(); ++k) {
                std::vector<uint8_t> b(ns[k]);
                fill(b, long(k) * 10 + round);
                MPI_Send(b.data(), int(ns[k]), MPI_BYTE, 1, 400 + int(k), MPI_COMM_WORLD);
            }
    } else {
        for (int round = 0; round < 4; ++round)
            for (size_t k = 0; k < ns.size(); ++k) {
                MPI_Status st;
                MPI_Message msg = MPI_MESSAGE_NULL;
                if (round == 0) {
                    MPI_Probe(0, MPI_ANY_TAG, MPI_COMM_WORLD, &st);
                } else if (round == 1) {
                    int flag = 0;
                    while (!flag) MPI_Iprobe(MPI_ANY_SOURCE, 400 + int(k), MPI_COMM_WORLD, &flag, &st);
                } else if (round == 2) {
                    MPI_Mprobe(0, MPI_ANY_TAG, MPI_COMM_WORLD, &msg, &st);
                } else {
                    int flag = 0;
                    while (!flag) MPI_Improbe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &flag, &msg, &st);
                }
                int cnt;
                MPI_Get_count(&st, MPI_BYTE, &cnt);
                CHECK(st.MPI_TAG == 400 + int(k) && st.MPI_SOURCE == 0 && cnt == ns[k],
                      "round %d probe %zu: tag %d src %d count %d", round, k, st.MPI_TAG, st.MPI_SOURCE, cnt);
                std::vector<uint8_t> b(cnt);
                if (round >= 2)
                    MPI_Mrecv(b.data(), cnt, MPI_BYTE, &msg, &st);
                else
                    MPI_Recv(b.data(), cnt, MPI_BYTE, st.MPI_SOURCE, st.MPI_TAG, MPI_COMM_WORLD, &st);
                long bad = first_bad(b.data(), size_t(cnt), long(k) * 10 + round);
                CHECK(bad < 0, "round %d probe msg %zu byte %ld", round, k, bad);
            }
    }
}

void truncate() {
    if (g_rank > 1) return;
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    const std::vector<long> ns = {100, 20000, 1000000};
    for (size_t k = 0; k < ns.size(); ++k) {
        long n = ns[k], small = n / 2;
        if (g_rank == 0) {
            std::vector<uint8_t> b(n);
            fill(b, 77);
            MPI_Send(b.data(), int(n), MPI_BYTE, 1, 500, MPI_COMM_WORLD);
        } else {
            std::vector<uint8_t> b(n, 0xA5);
            MPI_Status st;
            MPI_Request rq;
            int rc;
            if (k % 2 == 0) {
                rc = MPI_Recv(b.data(), int(small), MPI_BYTE, 0, 500, MPI_COMM_WORLD, &st);
            } else {
                MPI_Irecv(b.data(), int(small), MPI_BYTE, 0, 500, MPI_COMM_WORLD, &rq);
                rc = MPI_Wait(&rq, &st);
            }
            int cls = -1;
            MPI_Error_class(rc, &cls);
            CHECK(cls == MPI_ERR_TRUNCATE, "size %ld into %ld: error class %d, expected MPI_ERR_TRUNCATE (%d)", n, small, cls, MPI_ERR_TRUNCATE);
            for (long i = small; i < n; ++i)
                if (b[i] != 0xA5) { CHECK(false, "size %ld: byte %ld beyond the receive buffer overwritten", n, i); break; }
        }
        // The pair must stay usable after a truncation.
        int x = g_rank == 0 ? 4242 : 0;
        if (g_rank == 0) MPI_Send(&x, 1, MPI_INT, 1, 501, MPI_COMM_WORLD);
        else { MPI_Recv(&x, 1, MPI_INT, 0, 501, MPI_COMM_WORLD, MPI_STATUS_IGNORE); CHECK(x == 4242, "after truncation got %d", x); }
    }
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
}

void datatypes() {
    if (g_rank > 1) return;
    for (int count : {3, 5000}) {  // small (eager) and large (rendezvous) non-contiguous messages
        // vector: count blocks of 2 doubles, stride 5
        MPI_Datatype vec, idx, st;
        MPI_Type_vector(count, 2, 5, MPI_DOUBLE, &vec);
        MPI_Type_commit(&vec);
        int bl[3] = {1, 3, 2}, dp[3] = {0, 4, 11};
        MPI_Type_indexed(3, bl, dp, MPI_INT, &idx);
        MPI_Type_commit(&idx);
        struct S { char c; double d; int i[3]; };
        int sbl[3] = {1, 1, 3};
        MPI_Aint sdp[3] = {offsetof(S, c), offsetof(S, d), offsetof(S, i)};
        MPI_Datatype sty[3] = {MPI_CHAR, MPI_DOUBLE, MPI_INT}, s0;
        MPI_Type_create_struct(3, sbl, sdp, sty, &s0);
        MPI_Type_create_resized(s0, 0, sizeof(S), &st);
        MPI_Type_commit(&st);
        std::vector<double> v(size_t(count) * 5, -1.0);
        std::vector<int> ix(13 * count, -1);
        std::vector<S> ss(count);
        if (g_rank == 0) {
            for (size_t i = 0; i < v.size(); ++i) v[i] = double(i) * 0.5;
            for (size_t i = 0; i < ix.size(); ++i) ix[i] = int(i) * 3;
            for (int i = 0; i < count; ++i) { ss[i].c = char('a' + i % 26); ss[i].d = i * 1.25; ss[i].i[0] = i; ss[i].i[1] = -i; ss[i].i[2] = i * i; }
            MPI_Send(v.data(), 1, vec, 1, 600, MPI_COMM_WORLD);
            MPI_Send(ix.data(), count, idx, 1, 601, MPI_COMM_WORLD);
            MPI_Send(ss.data(), count, st, 1, 602, MPI_COMM_WORLD);
        } else {
            std::memset(ss.data(), 0x5A, ss.size() * sizeof(S));
            MPI_Recv(v.data(), 1, vec, 0, 600, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            MPI_Recv(ix.data(), count, idx, 0, 601, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            MPI_Recv(ss.data(), count, st, 0, 602, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            for (size_t i = 0; i < v.size(); ++i) {
                bool in = (i % 5) < 2 && i / 5 < size_t(count);
                double want = in ? double(i) * 0.5 : -1.0;
                if (v[i] != want) { CHECK(false, "vector count %d elem %zu = %g want %g", count, i, v[i], want); break; }
            }
            // indexed extent is 13 ints (last displacement 11 + blocklen 2).
            for (size_t i = 0; i < ix.size(); ++i) {
                int o = int(i % 13);
                bool in = o == 0 || (o >= 4 && o < 7) || (o >= 11 && o < 13);
                int want = in ? int(i) * 3 : -1;
                if (ix[i] != want) { CHECK(false, "indexed count %d elem %zu = %d want %d", count, i, ix[i], want); break; }
            }
            for (int i = 0; i < count; ++i) {
                bool ok = ss[i].c == char('a' + i % 26) && ss[i].d == i * 1.25 && ss[i].i[0] == i && ss[i].i[1] == -i && ss[i].i[2] == i * i;
                if (!ok) { CHECK(false, "struct count %d elem %d wrong", count, i); break; }
            }
        }
        MPI_Type_free(&vec);
        MPI_Type_free(&idx);
        MPI_Type_free(&st);
        MPI_Type_free(&s0);
    }
}

void zero() {
    if (g_rank > 1) return;
    int peer = 1 - g_rank;
    for (int i = 0; i < 50; ++i) {
        MPI_Request rq[2];
        MPI_Status sts[2];
        MPI_Irecv(nullptr, 0, MPI_BYTE, peer, 700 + i % 3, MPI_COMM_WORLD, &rq[0]);
        MPI_Isend(nullptr, 0, MPI_BYTE, peer, 700 + i % 3, MPI_COMM_WORLD, &rq[1]);
        MPI_Waitall(2, rq, sts);
        int cnt = -1;
        MPI_Get_count(&sts[0], MPI_BYTE, &cnt);
        CHECK(cnt == 0 && sts[0].MPI_SOURCE == peer && sts[0].MPI_TAG == 700 + i % 3, "zero-byte msg %d: count %d src %d tag %d", i, cnt, sts[0].MPI_SOURCE, sts[0].MPI_TAG);
    }
}

void many() {
    if (g_rank > 1) return;
    int peer = 1 - g_rank;
    const int n = 512;
    std::vector<std::vector<int32_t>> sb(n), rb(n);
    std::vector<MPI_Request> rq(2 * n);
    for (int i = 0; i < n; ++i) {
        int len = (i % 16 == 0) ? 20000 : 1 + i % 37;   // a few rendezvous among eager ones
        sb[i].assign(len, g_rank * 100000 + i);
        rb[i].assign(len, -1);
    }
    // Receives posted in reverse order with distinct tags; sends in forward order.
    for (int i = n - 1; i >= 0; --i)
        MPI_Irecv(rb[i].data(), int(rb[i].size()), MPI_INT32_T, peer, 1000 + i, MPI_COMM_WORLD, &rq[i]);
    for (int i = 0; i < n; ++i)
        MPI_Isend(sb[i].data(), int(sb[i].size()), MPI_INT32_T, peer, 1000 + i, MPI_COMM_WORLD, &rq[n + i]);
    MPI_Waitall(2 * n, rq.data(), MPI_STATUSES_IGNORE);
    for (int i = 0; i < n; ++i)
        for (size_t j = 0; j < rb[i].size(); ++j)
            if (rb[i][j] != peer * 100000 + i) { CHECK(false, "many: req %d elem %zu = %d", i, j, rb[i][j]); break; }
}
}  // namespace

int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &g_size);
    if (g_size < 2) { std::fprintf(stderr, "needs >= 2 ranks\n"); MPI_Abort(MPI_COMM_WORLD, 2); }
    struct { const char* name; void (*fn)(); } parts[] = {
        {"sizes", sizes}, {"anysrc", anysrc}, {"ordering", ordering}, {"unexpected", unexpected},
        {"probe", probe}, {"truncate", truncate}, {"datatype", datatypes}, {"zero", zero}, {"many", many}};
    const char* only = argc > 1 ? argv[1] : nullptr;
    long total = 0;
    for (auto& p : parts) {
        if (only && std::strcmp(only, p.name) != 0) continue;
        long before = g_errors;
        double t = MPI_Wtime();
        p.fn();
        MPI_Barrier(MPI_COMM_WORLD);
        long e = g_errors - before, all = 0;
        MPI_Allreduce(&e, &all, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
        total += all;
        if (g_rank == 0) std::printf("p2p %-10s %s (%.2f s)\n", p.name, all ? "FAIL" : "ok", MPI_Wtime() - t);
    }
    if (g_rank == 0) std::printf(total ? "p2p: %ld errors\n" : "p2p: all checks passed\n", total);
    MPI_Finalize();
    return total ? 1 : 0;
}
