// Fuzz target: the userspace device's receive path and RC state machines (responder, completer,
// CM, congestion hooks) fed packets "from the peer" of a QP connected by hand. The ICRC of every
// input is recomputed, so the bytes reach the state machines instead of dying at the ICRC check.
// Byte 0 of the input steers the packet towards the interesting paths (the rest is the packet):
//   bit 0  BTH DestQP := our QP          bit 1  PSN := the QP's expected PSN
//   bit 2  RETH/AtomicETH rkey := the registered region's, VA := near the region (may straddle it)
//   bit 3  the datagram arrives CE-marked  bit 4  sent from a stranger's port (must be dropped)
// Oracle: the 4 KiB guard areas around the registered region never change (no remote write lands
// outside a region), the device keeps running, and a QP that failed is replaced for later inputs.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "sw/device_impl.hpp"
#include "wire/icrc.hpp"

using namespace roce;
using namespace roce::sw;

namespace {

constexpr size_t region_len = 4096, guard_len = 4096;
constexpr uint8_t guard_byte = 0x5a;
constexpr uint32_t peer_qpn = 0x123;

struct Harness {
    std::shared_ptr<Pd> pd = Pd::create();
    std::unique_ptr<Device> dev;
    DeviceImpl* impl = nullptr;
    int peer_fd = -1;
    WireAddr peer{}, stranger{};
    uint32_t qpn = 0;
    std::vector<uint8_t> mem = std::vector<uint8_t>(guard_len + region_len + guard_len, guard_byte);
    MrKeys keys{};

    Harness() {
        DeviceConfig cfg;
        cfg.mtu = 1024;
        cfg.progress_thread = false;   // inputs are delivered by hand, one at a time
        if (Device::open(cfg, pd, dev) != Status::ok)
            die("cannot open the device");
        impl = static_cast<DeviceImpl*>(dev.get());
        // The peer: a bound socket, so what the device answers has somewhere to go.
        peer_fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK, 0);
        sockaddr_in sa{};
        sa.sin_family = AF_INET;
        sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        if (::bind(peer_fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) != 0)
            die("cannot bind the peer socket");
        socklen_t l = sizeof(sa);
        ::getsockname(peer_fd, reinterpret_cast<sockaddr*>(&sa), &l);
        peer.family = AF_INET;
        std::memcpy(peer.ip, &sa.sin_addr, 4);
        peer.port = ntohs(sa.sin_port);
        stranger = peer;
        stranger.port = uint16_t(peer.port ^ 0x5555);
        std::memset(mem.data() + guard_len, 0, region_len);
        if (pd->reg_mr(mem.data() + guard_len, region_len, access_all, keys) != Status::ok)
            die("cannot register the region");
        connect();
    }

    [[noreturn]] static void die(const char* what) {
        std::fprintf(stderr, "fuzz_responder: %s\n", what);
        std::abort();
    }

    void connect() {
        if (qpn != 0)
            dev->destroy_qp(qpn);
        if (dev->create_qp(qpn) != Status::ok)
            die("create_qp failed");
        ManualPeer m;
        m.addr = peer;
        m.qpn = peer_qpn;
        m.sq_psn = 0;
        m.rq_psn = 0;
        m.mtu = 1024;
        m.any_source_port = false;
        m.any_ipv4_id = false;
        if (dev->connect_qp_manual(qpn, m) != Status::ok)
            die("connect_qp_manual failed");
    }

    void drain() {
        uint8_t b[9000];
        while (::recv(peer_fd, b, sizeof(b), 0) > 0) {
        }
        Completion c[64];
        while (dev->poll_completions(c, 64) > 0) {
        }
        dev->poll_recv([](const RecvMessage&) {}, 1024);
    }

    void check_guards() const {
        for (size_t i = 0; i < guard_len; ++i)
            if (mem[i] != guard_byte || mem[guard_len + region_len + i] != guard_byte)
                die("a remote write landed outside the registered region");
    }
};

// Big-endian stores into the packet.
void put24(uint8_t* p, uint32_t v) { p[0] = uint8_t(v >> 16); p[1] = uint8_t(v >> 8); p[2] = uint8_t(v); }
void put32(uint8_t* p, uint32_t v) { p[0] = uint8_t(v >> 24); put24(p + 1, v); }
void put64(uint8_t* p, uint64_t v) { put32(p, uint32_t(v >> 32)); put32(p + 4, uint32_t(v)); }
uint64_t get64(const uint8_t* p) {
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v = v << 8 | p[i];
    return v;
}

bool has_reth(uint8_t op) { return op == 0x06 || op == 0x0a || op == 0x0b || op == 0x0c; }   // WRITE first/only(+imm), READ req
bool has_atomic(uint8_t op) { return op == 0x13 || op == 0x14; }

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    static Harness h;
    if (size < 1 || size > 1 + 1024 + 64)
        return 0;
    const uint8_t control = data[0];
    std::vector<uint8_t> pkt(data + 1, data + size);
    if (pkt.size() >= roce::wire::bth_size) {
        if (control & 1)
            put24(&pkt[5], h.qpn);
        if (control & 2) {
            std::lock_guard lk(h.impl->mu_);
            if (Qp* q = h.impl->find_qp(h.qpn))
                put24(&pkt[9], q->epsn);
        }
        const uint8_t op = pkt[0];
        if ((control & 4) && (has_reth(op) || has_atomic(op)) && pkt.size() >= roce::wire::bth_size + 16) {
            uint8_t* eth = &pkt[roce::wire::bth_size];
            const uint64_t base = reinterpret_cast<uintptr_t>(h.mem.data() + guard_len);
            put64(eth, base + get64(eth) % (region_len + 64) - 32);
            put32(eth + 8, h.keys.rkey);
        }
    }
    const WireAddr& src = (control & 16) ? h.stranger : h.peer;
    if (pkt.size() >= 4) {   // reseal: the ICRC of the packet as the device will see it
        roce::wire::IpContext ip;
        std::memcpy(ip.src_ip, src.ip, 4);
        std::memcpy(ip.dst_ip, h.dev->address().ip, 4);
        ip.src_port = src.port;
        ip.dst_port = h.dev->address().port;
        const uint32_t crc = roce::wire::icrc_compute(ip, pkt);
        uint8_t* c = pkt.data() + pkt.size() - 4;
        c[0] = uint8_t(crc);
        c[1] = uint8_t(crc >> 8);
        c[2] = uint8_t(crc >> 16);
        c[3] = uint8_t(crc >> 24);
    }
    {
        std::lock_guard lk(h.impl->mu_);
        h.impl->process_datagram(pkt.data(), pkt.size(), src, control & 8);
        h.impl->flush_acks();
        h.impl->tx_flush();
    }
    h.drain();
    h.check_guards();
    {   // fuzzed CM requests create passive QPs nobody will ever use: keep the table small
        std::lock_guard lk(h.impl->mu_);
        if (h.impl->qps_.size() > 64) {
            std::vector<uint32_t> extra;
            for (const auto& [q, qp] : h.impl->qps_)
                if (q != h.qpn) extra.push_back(q);
            for (uint32_t q : extra) h.dev->destroy_qp(q);
        }
    }
    if (h.dev->qp_state(h.qpn) != QpState::rts)
        h.connect();   // a fatal NAK or a protocol error ended the QP: later inputs get a fresh one
    return 0;
}
