// Thread safety: several threads post on their own QPs of one device and all of them drive
// progress and drain completions concurrently, while the peer is driven by another thread.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <thread>

#include "sw/test_support.hpp"

using namespace roce;
using namespace roce::sw;
using namespace roce::sw::testing;

TEST(SwThreads, ConcurrentPostersAndProgress) {
    Host a, b;
    DeviceConfig c;
    c.sq_depth = 64;
    ASSERT_EQ(a.open(c), Status::ok);
    ASSERT_EQ(b.open(c), Status::ok);
    constexpr int nthreads = 4, ops = 300;
    constexpr size_t blk = 20000;
    std::vector<uint8_t> target(size_t(nthreads) * ops * blk / 10);
    MrKeys k;
    ASSERT_EQ(b.pd->reg_mr(target.data(), target.size(), access_all, k), Status::ok);
    uint32_t qps[nthreads];
    for (auto& q : qps) {
        ASSERT_EQ(a.dev->create_qp(q), Status::ok);
        ASSERT_EQ(a.dev->connect_qp(q, b.dev->address()), Status::ok);
    }
    std::atomic<bool> stop{false};
    std::atomic<size_t> recvd{0};
    std::thread tb([&] {
        while (!stop) {
            b.dev->progress();
            recvd += b.dev->poll_recv([](const RecvMessage&) {}, 64);
        }
    });
    std::atomic<int> done[nthreads] = {};
    std::atomic<int> bad{0};
    std::vector<std::thread> ts;
    for (int t = 0; t < nthreads; ++t) {
        ts.emplace_back([&, t] {
            std::vector<uint8_t> src(blk), dst(blk);
            int posted = 0;
            Completion cc[16];
            while (done[t] < ops * 2) {
                if (posted < ops * 2) {
                    const int i = posted / 2;
                    const uint64_t off = (uint64_t(t) * ops + uint64_t(i)) % (target.size() / blk) * blk;
                    Status s;
                    if (posted % 2 == 0) {
                        std::memset(src.data(), (t * 31 + i) & 0xff, blk);
                        s = a.dev->post_write(qps[t], uint64_t(t) << 32 | uint64_t(posted + 1), src.data(), blk,
                                              uint64_t(uintptr_t(target.data())) + off, k.rkey, true);
                    } else {
                        iovec iov{src.data(), 100};
                        s = a.dev->post_send(qps[t], uint64_t(t) << 32 | uint64_t(posted + 1), &iov, 1);
                    }
                    if (s == Status::ok)
                        ++posted;
                    else if (s != Status::no_resource)
                        ++bad;
                }
                a.dev->progress();
                const size_t n = a.dev->poll_completions(cc, 16);
                for (size_t j = 0; j < n; ++j) {
                    if (cc[j].status != Status::ok)
                        ++bad;
                    ++done[cc[j].wr_id >> 32];
                }
                (void)dst;
            }
        });
    }
    for (auto& t : ts)
        t.join();
    const auto t0 = std::chrono::steady_clock::now();
    while (recvd < size_t(nthreads) * ops && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(10))
        a.dev->progress();
    stop = true;
    tb.join();
    EXPECT_EQ(bad.load(), 0);
    EXPECT_EQ(recvd.load(), size_t(nthreads) * ops);
    for (auto& d : done)
        EXPECT_EQ(d.load(), ops * 2);
}
