// Quick loopback performance check (disabled by default; run with
// --gtest_also_run_disabled_tests --gtest_filter='*Perf*'). Each device is driven by its own
// thread, as two processes would be.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <poll.h>
#include <thread>
#include <arpa/inet.h>
#include <sys/socket.h>
#include <unistd.h>

#include "sw/test_support.hpp"

using namespace roce;
using namespace roce::sw;
using namespace roce::sw::testing;

namespace {
using clk = std::chrono::steady_clock;
double secs(clk::duration d) { return std::chrono::duration<double>(d).count(); }
// Busy-poll a little, then block on the event fd: on an oversubscribed machine pure spinning
// measures the scheduler, not the transport.
struct Waiter {
    int idle = 0;
    void operator()(Device& d, unsigned events) {
        if (events) {
            idle = 0;
            return;
        }
        static const int spin = getenv("ROCE_PERF_SPIN") ? 1 << 30 : 50;   // busy-poll only
        if (++idle < spin)
            return;
        pollfd pf{d.event_fd(), POLLIN, 0};
        poll(&pf, 1, 1);
    }
};
}

// Baseline in the same setting: raw UDP ping-pong of 8 B between two busy-polling threads.
double raw_udp_rtt_us(int iters) {
    auto mk = [](sockaddr_in& a) {
        int fd = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK, 0);
        a = {};
        a.sin_family = AF_INET;
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
        socklen_t l = sizeof(a);
        getsockname(fd, reinterpret_cast<sockaddr*>(&a), &l);
        return fd;
    };
    sockaddr_in aa, ba;
    int fa = mk(aa), fb = mk(ba);
    std::atomic<bool> stop{false};
    std::thread echo([&] {
        char b[64];
        sockaddr_in from;
        while (!stop) {
            socklen_t l = sizeof(from);
            const ssize_t r = recvfrom(fb, b, sizeof(b), 0, reinterpret_cast<sockaddr*>(&from), &l);
            if (r > 0)
                sendto(fb, b, size_t(r), 0, reinterpret_cast<sockaddr*>(&from), l);
        }
    });
    char b[64] = {};
    const auto t0 = clk::now();
    for (int i = 0; i < iters; ++i) {
        sendto(fa, b, 8, 0, reinterpret_cast<sockaddr*>(&ba), sizeof(ba));
        while (recv(fa, b, sizeof(b), 0) <= 0) {
        }
    }
    const double us = secs(clk::now() - t0) / iters * 1e6;
    stop = true;
    echo.join();
    close(fa);
    close(fb);
    return us;
}

TEST(SwPerf, DISABLED_Loopback) {
    printf("raw UDP 8B round trip (same setting): %.2f us\n", raw_udp_rtt_us(5000));
    DeviceConfig c;
    c.max_recv_msg = 1 << 20;
    Pair p;
    ASSERT_TRUE(p.open(c, c));
    std::atomic<bool> stop{false};
    // b: echo every message back on its passive QP, serve RDMA
    std::thread tb([&] {
        Waiter w;
        while (!stop.load(std::memory_order_relaxed)) {
            w(*p.b.dev, p.b.dev->progress());
            p.b.dev->poll_recv([&](const RecvMessage& m) {
                iovec iov{const_cast<uint8_t*>(m.data), m.len < 64 ? m.len : 0};
                if (m.len < 64)
                    while (p.b.dev->post_send(m.qpn, 0, &iov, 1) == Status::no_resource)
                        p.b.dev->progress();
            }, 64);
            Completion cc[64];
            p.b.dev->poll_completions(cc, 64);
        }
    });
    // 8 B SEND round trip
    uint64_t x = 0;
    iovec iov{&x, 8};
    const int iters = 5000;
    size_t got = 0;
    auto t0 = clk::now();
    Waiter wa;
    for (int i = 0; i < iters; ++i) {
        ASSERT_EQ(p.a.dev->post_send(p.qa, 0, &iov, 1), Status::ok);
        const size_t want = got + 1;
        while (got < want) {
            const unsigned e = p.a.dev->progress();
            got += p.a.dev->poll_recv([](const RecvMessage&) {}, 64);
            wa(*p.a.dev, e);
        }
    }
    const double rtt_us = secs(clk::now() - t0) / iters * 1e6;
    // 1 MiB WRITE bandwidth, 8 outstanding
    std::vector<uint8_t> target(1 << 20), src(1 << 20, 1), dst(1 << 20);
    MrKeys k;
    ASSERT_EQ(p.b.pd->reg_mr(target.data(), target.size(), access_all, k), Status::ok);
    auto bw = [&](bool read, int n) {
        int posted = 0, done = 0;
        Completion cc[64];
        auto s = clk::now();
        while (done < n) {
            while (posted < n && posted - done < 8) {
                const Status st = read ? p.a.dev->post_read(p.qa, 1, dst.data(), dst.size(), uint64_t(uintptr_t(target.data())), k.rkey)
                                       : p.a.dev->post_write(p.qa, 1, src.data(), src.size(), uint64_t(uintptr_t(target.data())), k.rkey, false);
                if (st != Status::ok)
                    break;
                ++posted;
            }
            wa(*p.a.dev, p.a.dev->progress());
            const size_t m = p.a.dev->poll_completions(cc, 64);
            for (size_t i = 0; i < m; ++i)
                EXPECT_EQ(cc[i].status, Status::ok);
            done += int(m);
        }
        return double(n) * (1 << 20) / secs(clk::now() - s) / 1e9;
    };
    const double wbw = bw(false, 500);
    const double rbw = bw(true, 500);
    stop = true;
    tb.join();
    const auto sa = p.a.dev->stats(), sb = p.b.dev->stats();
    printf("8B SEND round trip: %.2f us\n1 MiB WRITE: %.2f GB/s\n1 MiB READ: %.2f GB/s\n", rtt_us, wbw, rbw);
    printf("a: tx %lu rx %lu retrans %lu timeouts %lu seq_err %lu | b: tx %lu rx %lu retrans %lu seq_err %lu dup %lu\n",
           (unsigned long)sa.tx_packets, (unsigned long)sa.rx_packets, (unsigned long)sa.retransmits,
           (unsigned long)sa.timeouts, (unsigned long)sa.seq_errors, (unsigned long)sb.tx_packets,
           (unsigned long)sb.rx_packets, (unsigned long)sb.retransmits, (unsigned long)sb.seq_errors,
           (unsigned long)sb.duplicates);
}

TEST(SwPerf, DISABLED_SingleThreadWrite) {
    Pair p;
    ASSERT_TRUE(p.open(DeviceConfig{}, DeviceConfig{}));
    std::vector<uint8_t> target(1 << 20), src(1 << 20, 1);
    MrKeys k;
    ASSERT_EQ(p.b.pd->reg_mr(target.data(), target.size(), access_all, k), Status::ok);
    const int n = 500;
    int posted = 0;
    auto s = clk::now();
    while (p.a.comps.size() < size_t(n)) {
        while (posted < n && posted - int(p.a.comps.size()) < 8 &&
               p.a.dev->post_write(p.qa, 1, src.data(), src.size(), uint64_t(uintptr_t(target.data())), k.rkey, false) == Status::ok)
            ++posted;
        p.a.poll();
        p.b.poll();
    }
    const double gbs = double(n) * (1 << 20) / secs(clk::now() - s) / 1e9;
    const auto sa = p.a.dev->stats(), sb = p.b.dev->stats();
    printf("single-thread 1 MiB WRITE: %.2f GB/s; a: tx %lu rx %lu retrans %lu timeouts %lu | b: rx %lu dup %lu seq %lu\n", gbs,
           (unsigned long)sa.tx_packets, (unsigned long)sa.rx_packets, (unsigned long)sa.retransmits,
           (unsigned long)sa.timeouts, (unsigned long)sb.rx_packets, (unsigned long)sb.duplicates, (unsigned long)sb.seq_errors);
}
