// roce_interop_rxe (interop_rxe.cpp has the overview): the two ends, the checks' bookkeeping and
// the operations (ops.cpp), one check each.
#pragma once

#include <sched.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "sw/test_support.hpp"
#include "verbs/interop/kernel_qp.hpp"

namespace roce::verbs::interop {

using roce::sw::testing::Host;

struct Options {
    std::string rxe, sw_ip, netns;
    uint16_t udp_port = 4791;
    int gid_index = -1;
    uint8_t ib_port = 1;
    bool gso = true, verbose = false;
};

// Layout of both ends' registered buffers (kernel: KernelDevice::buf(), userspace: Interop::smem):
// [0, region) target of WRITEs / receives / READ sources, [src_off, +region) SEND and WRITE sources.
constexpr size_t region = 320 * 1024;        // largest message + slack
constexpr size_t src_off = 384 * 1024;       // source region in each buffer
constexpr size_t atomic_off = 768 * 1024;    // 8-byte atomic targets / results
constexpr size_t buf_bytes = 1024 * 1024;

// Deterministic bytes of a seed.
void fill(uint8_t* p, size_t n, uint32_t seed);
// Runs fn inside the network namespace at `path` (the calling thread only; "" = here), then returns.
bool in_netns(const std::string& path, const std::function<bool()>& fn);
// hw_counters of an RDMA port (all of them; empty when sysfs has none).
std::map<std::string, long long> hw_counters(const std::string& dev, uint8_t port);
// UDP datagrams delivered to sockets (rxe's included) in this thread's network namespace; -1 if unknown.
long long udp_in_datagrams();

struct Link {   // one QP pair
    uint32_t sq = 0;   // userspace QPN
    KernelQp kq;
};

// The test: both ends, every QP pair (Link) between them, and the pass/fail tally.
class Interop {
public:
    Options opt;
    KernelDevice kd;
    Host sw;
    std::vector<uint8_t> smem = std::vector<uint8_t>(buf_bytes);
    MrKeys skeys;
    uint32_t mtu = 1024;
    std::vector<ibv_wc> wcs;
    uint64_t next_id = 1;
    int passed = 0, failed = 0;

    bool setup();
    bool connect(Link& l, Host& h, uint32_t sw_psn, uint32_t rxe_psn);
    void run();
    void icrc_control();
    void finish(const std::map<std::string, long long>& hw0);

private:
    bool drive(const std::function<bool()>& pred, double timeout_s = 10) {
        const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
        for (;;) {
            sw.poll();
            kd.poll(wcs);
            if (pred())
                return true;
            if (std::chrono::steady_clock::now() > end)
                return false;
            sched_yield();
        }
    }
    const ibv_wc* wc(uint64_t id) const {
        for (const ibv_wc& w : wcs)
            if (w.wr_id == id)
                return &w;
        return nullptr;
    }
    // Waits for the userspace completion `id`; its status (in_progress on timeout).
    Status sw_status(uint64_t id) {
        if (!drive([&] { return sw.find(id) != nullptr; }))
            return Status::in_progress;
        return sw.find(id)->status;
    }
    // Waits for rxe's completion `id`; its status (-1 on timeout).
    int rxe_status(uint64_t id) {
        if (!drive([&] { return wc(id) != nullptr; }))
            return -1;
        return int(wc(id)->status);
    }
    void check(const std::string& name, bool ok, const std::string& detail, double t0);
    static double now_ms() {
        return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
    }
    uint64_t sva(size_t off) { return uint64_t(uintptr_t(smem.data() + off)); }
    sw::DeviceConfig sw_config() const {
        sw::DeviceConfig cfg;
        cfg.ip = opt.sw_ip;
        cfg.ports = opt.udp_port;
        cfg.mtu = mtu;                        // the path MTU must be rxe's active MTU
        cfg.max_recv_msg = 1 << 20;
        cfg.retransmit_timeout_us = 20000;    // rxe under TCG answers in milliseconds
        cfg.gso = opt.gso;
        return cfg;
    }

    // the operations (one check each)
    void sw_send(Link& l, size_t n, const uint32_t* imm);
    void sw_write(Link& l, size_t n, uint32_t rkey, bool expect_ok);
    void sw_read(Link& l, size_t n, uint32_t rkey, bool expect_ok);
    void sw_atomics(Link& l);
    void rxe_send(Link& l, size_t n, const uint32_t* imm);
    void rxe_write(Link& l, size_t n, uint32_t rkey, bool expect_ok, const uint32_t* imm = nullptr);
    void rxe_read(Link& l, size_t n, uint32_t rkey, bool expect_ok);
    void rxe_atomics(Link& l);
};

} // namespace roce::verbs::interop
