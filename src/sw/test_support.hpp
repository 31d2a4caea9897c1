// Helpers for tests of the device (src/tests/sw_*_test.cpp, also usable by uct/ tests): a "host"
// = Pd + Device that collects completions and received messages, and a loop that drives the
// progress of several hosts until a condition holds. No gtest dependency.
#pragma once

#include <chrono>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <vector>

#include <arpa/inet.h>
#include <sys/socket.h>
#include <unistd.h>

#include "sw/device.hpp"

namespace roce::sw::testing {

// A plain UDP socket on 127.0.0.1 and an ephemeral port (its address in `sa`) whose blocking
// receives give up after `timeout_s`: a peer that is not a device. -1 if it cannot be bound.
inline int loopback_udp_socket(sockaddr_in& sa, int timeout_s = 2) {
    const int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    sa = sockaddr_in{};
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t l = sizeof(sa);
    if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) != 0 ||
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &l) != 0) {
        if (fd >= 0) ::close(fd);
        return -1;
    }
    timeval tv{timeout_s, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    return fd;
}

struct Received {
    uint32_t qpn;
    std::vector<uint8_t> data;
    bool has_imm;
    uint32_t imm;
};

struct Host {
    std::shared_ptr<Pd> pd;
    std::unique_ptr<Device> dev;
    std::vector<Completion> comps;
    std::vector<Received> msgs;
    bool drive_progress = true;   // false: the owner "computes" (never calls progress/poll)
    bool take_messages = true;    // false: leave received messages queued in the device

    Status open(DeviceConfig cfg, std::shared_ptr<Pd> shared_pd = nullptr) {
        pd = shared_pd ? shared_pd : Pd::create();
        return Device::open(cfg, pd, dev);
    }
    void poll() {
        if (!drive_progress || !dev)
            return;
        dev->progress();
        Completion c[64];
        size_t n;
        while ((n = dev->poll_completions(c, 64)) > 0)
            comps.insert(comps.end(), c, c + n);
        if (!take_messages)
            return;
        dev->poll_recv([&](const RecvMessage& m) {
            msgs.push_back(Received{m.qpn, std::vector<uint8_t>(m.data, m.data + m.len), m.has_imm, m.imm});
        }, 1024);
    }
    // Completion with this wr_id, or nullptr.
    const Completion* find(uint64_t wr_id) const {
        for (const Completion& c : comps)
            if (c.wr_id == wr_id)
                return &c;
        return nullptr;
    }
};

// n pseudo-random bytes from `seed` (test payloads: a stale, shifted or mixed-up buffer differs).
inline std::vector<uint8_t> random_bytes(size_t n, uint32_t seed) {
    std::vector<uint8_t> v(n);
    std::mt19937 r(seed);
    for (size_t i = 0; i + 4 <= n; i += 4) {
        const uint32_t x = r();
        std::memcpy(&v[i], &x, 4);
    }
    for (size_t i = n & ~size_t(3); i < n; ++i)
        v[i] = uint8_t(r());
    return v;
}

// Drives all hosts until pred() holds or `timeout_s` passes; returns pred().
inline bool run_until(std::initializer_list<Host*> hosts, const std::function<bool()>& pred,
                      double timeout_s = 10.0) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
    for (;;) {
        for (Host* h : hosts)
            h->poll();
        if (pred())
            return true;
        if (std::chrono::steady_clock::now() > end)
            return false;
    }
}

// Two hosts with an active QP on `a` connected to a passive QP on `b`.
struct Pair {
    Host a, b;
    uint32_t qa = 0;   // a's active QP
    uint32_t qb = 0;   // b's passive QP (found through the CM table after connect)

    // Opens both devices and connects; false on any failure.
    bool open(const DeviceConfig& ca, const DeviceConfig& cb, double timeout_s = 5) {
        if (a.open(ca) != Status::ok || b.open(cb) != Status::ok)
            return false;
        if (a.dev->create_qp(qa) != Status::ok || a.dev->connect_qp(qa, b.dev->address()) != Status::ok)
            return false;
        if (!run_until({&a, &b}, [&] { return a.dev->qp_state(qa) == QpState::rts; }, timeout_s))
            return false;
        // Learn b's QP with a zero-length SEND.
        iovec iov{nullptr, 0};
        const size_t n = b.msgs.size();
        if (a.dev->post_send(qa, 0, &iov, 0) != Status::ok)
            return false;
        if (!run_until({&a, &b}, [&] { return b.msgs.size() > n; }, timeout_s))
            return false;
        qb = b.msgs.back().qpn;
        b.msgs.pop_back();
        return true;
    }
};

} // namespace roce::sw::testing
