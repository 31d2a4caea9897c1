// connect_qp_manual (sw/device.hpp, ManualPeer): two devices on 127.0.0.1 connected by hand,
// as a verbs application connects a QP to a kernel rxe QP, exchange SEND / WRITE / READ both ways
// with PSNs across the 2^24 wrap; a wrong rkey is a remote access error; bad parameters are
// refused; destroying a manual QP sends the peer no CM message; and what rxe's packets look like
// (any UDP source port of the peer's IP, a changing IPv4 ID under the ICRC) is accepted on a
// manual QP only when its ManualPeer says so. A long READ (as rxe asks for one) is answered a slice
// per progress round, and what follows it waits behind it.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <algorithm>
#include <cstring>
#include <random>

#include "sw/device_impl.hpp"
#include "sw/test_support.hpp"
#include "wire/packet.hpp"

using namespace roce;
using namespace roce::sw;
using namespace roce::sw::testing;

namespace {

DeviceConfig cfg1024() {
    DeviceConfig c;
    c.mtu = 1024;
    c.max_recv_msg = 1 << 20;
    return c;
}

// Two devices, QP qa on a and qb on b connected by hand to each other.
struct ManualPair {
    Host a, b;
    uint32_t qa = 0, qb = 0;
    static constexpr uint32_t psn_a = 0xfffff0;   // a's sends wrap the 24-bit PSN space
    static constexpr uint32_t psn_b = 0x123456;

    void open(ManualPeer tmpl = {}, const DeviceConfig& cfg_b = cfg1024()) {
        ASSERT_EQ(a.open(cfg1024()), Status::ok);
        ASSERT_EQ(b.open(cfg_b), Status::ok);
        ASSERT_EQ(a.dev->create_qp(qa), Status::ok);
        ASSERT_EQ(b.dev->create_qp(qb), Status::ok);
        ManualPeer to_b = tmpl, to_a = tmpl;
        to_b.addr = b.dev->address();
        to_b.qpn = qb;
        to_b.sq_psn = psn_a;
        to_b.rq_psn = psn_b;
        to_a.addr = a.dev->address();
        to_a.qpn = qa;
        to_a.sq_psn = psn_b;
        to_a.rq_psn = psn_a;
        ASSERT_EQ(a.dev->connect_qp_manual(qa, to_b), Status::ok);
        ASSERT_EQ(b.dev->connect_qp_manual(qb, to_a), Status::ok);
        EXPECT_EQ(a.dev->qp_state(qa), QpState::rts);
        EXPECT_EQ(b.dev->qp_state(qb), QpState::rts);
    }
    Status wait(Host& h, uint64_t id, double t = 10) {
        if (!run_until({&a, &b}, [&] { return h.find(id) != nullptr; }, t))
            return Status::in_progress;
        return h.find(id)->status;
    }
};

// What a's requests reach on b: a 256-byte region to READ, a counter for atomics.
struct Targets {
    std::vector<uint8_t> mem = std::vector<uint8_t>(256, 0x5a);
    alignas(8) uint64_t counter = 0;
    MrKeys k{}, kc{};
    void reg(Host& h) {
        ASSERT_EQ(h.pd->reg_mr(mem.data(), mem.size(), access_all, k), Status::ok);
        ASSERT_EQ(h.pd->reg_mr(&counter, sizeof(counter), access_all, kc), Status::ok);
    }
};

// Requests as a's requester sends them, to inject into b's QP `qpn`.
wire::Packet read_request(uint32_t qpn, uint32_t psn, const void* va, uint32_t rkey, uint32_t len = 64) {
    wire::Packet pkt;
    pkt.bth.opcode = uint8_t(wire::Opcode::rc_read_request);
    pkt.bth.dest_qp = qpn;
    pkt.bth.psn = psn;
    pkt.reth.va = uint64_t(uintptr_t(va));
    pkt.reth.rkey = rkey;
    pkt.reth.dma_len = len;
    return pkt;
}

wire::Packet fetch_add(uint32_t qpn, uint32_t psn, const uint64_t* va, uint32_t rkey, uint64_t add = 1) {
    wire::Packet pkt;
    pkt.bth.opcode = uint8_t(wire::Opcode::rc_fetch_add);
    pkt.bth.dest_qp = qpn;
    pkt.bth.psn = psn;
    pkt.atomic.va = uint64_t(uintptr_t(va));
    pkt.atomic.rkey = rkey;
    pkt.atomic.swap_add = add;
    return pkt;
}

} // namespace

TEST(SwManual, SendWriteReadBothWays) {
    ManualPair p;
    ASSERT_NO_FATAL_FAILURE(p.open());
    const size_t max = 256 * 1024 + 5;
    std::vector<uint8_t> mem_a(max), mem_b(max);
    MrKeys ka, kb;
    ASSERT_EQ(p.a.pd->reg_mr(mem_a.data(), max, access_all, ka), Status::ok);
    ASSERT_EQ(p.b.pd->reg_mr(mem_b.data(), max, access_all, kb), Status::ok);
    struct Side {
        Host& h;
        uint32_t qp;
        Host& peer;
        uint32_t peer_qp;
        std::vector<uint8_t>& peer_mem;
        MrKeys peer_keys;
    };
    Side sides[2] = {{p.a, p.qa, p.b, p.qb, mem_b, kb}, {p.b, p.qb, p.a, p.qa, mem_a, ka}};
    uint64_t id = 1;
    for (Side& s : sides) {
        for (size_t sz : {size_t(1), size_t(1023), size_t(1024), size_t(1025), size_t(5000), size_t(65536)}) {
            auto src = random_bytes(sz, uint32_t(sz + id));
            iovec iov{src.data(), sz};
            ASSERT_EQ(s.h.dev->post_send(s.qp, id, &iov, 1), Status::ok);
            ASSERT_EQ(p.wait(s.h, id), Status::ok) << "send " << sz;
            ASSERT_FALSE(s.peer.msgs.empty());
            EXPECT_EQ(s.peer.msgs.back().qpn, s.peer_qp);
            EXPECT_EQ(s.peer.msgs.back().data, src) << "send " << sz;
            s.peer.msgs.clear();
            ++id;
        }
        const uint64_t va = uint64_t(uintptr_t(s.peer_mem.data()));
        for (size_t sz : {size_t(1), size_t(1024), size_t(1025), size_t(3000), max}) {
            auto src = random_bytes(sz, uint32_t(sz * 7 + id));
            ASSERT_EQ(s.h.dev->post_write(s.qp, id, src.data(), sz, va, s.peer_keys.rkey, true), Status::ok);
            ASSERT_EQ(p.wait(s.h, id), Status::ok) << "write " << sz;
            EXPECT_EQ(std::memcmp(s.peer_mem.data(), src.data(), sz), 0) << "write " << sz;
            ++id;
            std::vector<uint8_t> back(sz, 0);
            ASSERT_EQ(s.h.dev->post_read(s.qp, id, back.data(), sz, va, s.peer_keys.rkey), Status::ok);
            ASSERT_EQ(p.wait(s.h, id), Status::ok) << "read " << sz;
            EXPECT_EQ(back, src) << "read " << sz;
            ++id;
        }
    }
    // A wrong rkey: remote access error, nothing written.
    std::vector<uint8_t> src(100, 0x5a);
    ASSERT_EQ(p.a.dev->post_write(p.qa, 999, src.data(), src.size(), uint64_t(uintptr_t(mem_b.data())),
                                  kb.rkey ^ 0x5555, true), Status::ok);
    EXPECT_EQ(p.wait(p.a, 999), Status::remote_access);
    EXPECT_NE(mem_b[0], 0x5a);
    for (Host* h : {&p.a, &p.b}) {
        const DeviceStats st = h->dev->stats();
        EXPECT_GT(st.rx_packets, 0u);
        EXPECT_EQ(st.icrc_errors, 0u);
        EXPECT_EQ(st.dropped_unknown_qp, 0u);
        EXPECT_EQ(st.malformed, 0u);
    }
}

TEST(SwManual, RefusesBadParameters) {
    Host a;
    ASSERT_EQ(a.open(cfg1024()), Status::ok);
    uint32_t q = 0;
    ASSERT_EQ(a.dev->create_qp(q), Status::ok);
    ManualPeer good;
    good.addr = a.dev->address();
    good.addr.port = 4791;
    good.qpn = 0x42;
    auto with = [&](auto change) {
        ManualPeer m = good;
        change(m);
        return a.dev->connect_qp_manual(q, m);
    };
    EXPECT_EQ(with([](ManualPeer& m) { m.qpn = 1; }), Status::invalid_param);        // QP1 is the CM's
    EXPECT_EQ(with([](ManualPeer& m) { m.qpn = 1u << 24; }), Status::invalid_param);
    EXPECT_EQ(with([](ManualPeer& m) { m.sq_psn = 1u << 24; }), Status::invalid_param);
    EXPECT_EQ(with([](ManualPeer& m) { m.rq_psn = 1u << 24; }), Status::invalid_param);
    EXPECT_EQ(with([](ManualPeer& m) { m.mtu = 1500; }), Status::invalid_param);
    EXPECT_EQ(with([](ManualPeer& m) { m.addr.port = 0; }), Status::invalid_param);
    EXPECT_EQ(with([](ManualPeer& m) { m.addr.family = AF_INET6; }), Status::unreachable);
    EXPECT_EQ(a.dev->connect_qp_manual(q + 1, good), Status::invalid_param);   // unknown QP
    EXPECT_EQ(a.dev->qp_state(q), QpState::reset);
    EXPECT_EQ(a.dev->connect_qp_manual(q, good), Status::ok);
    EXPECT_EQ(a.dev->connect_qp_manual(q, good), Status::invalid_param);   // not in reset
    EXPECT_EQ(a.dev->connect_qp(q, good.addr), Status::invalid_param);
}

TEST(SwManual, DestroyTellsThePeerNothing) {
    ManualPair p;
    ASSERT_NO_FATAL_FAILURE(p.open());
    const DeviceStats b0 = p.b.dev->stats();
    ASSERT_EQ(p.a.dev->destroy_qp(p.qa), Status::ok);
    run_until({&p.a, &p.b}, [] { return false; }, 0.05);
    EXPECT_EQ(p.b.dev->qp_state(p.qb), QpState::rts);   // no DREQ reached (or applied to) it
    EXPECT_EQ(p.b.dev->stats().rx_packets, b0.rx_packets);
}

namespace {

// Injects `pkt` (to `h`'s QP pkt.bth.dest_qp) as if it came from src with IPv4 ID `ipv4_id` (a UDP
// socket cannot make the kernel send a chosen ID, so the packet enters the receive path directly),
// then sends what the device queued in answer.
void inject(Host& h, const wire::Packet& pkt, const std::vector<uint8_t>& payload, const WireAddr& src,
            uint16_t ipv4_id = 0) {
    auto* impl = dynamic_cast<DeviceImpl*>(h.dev.get());
    ASSERT_NE(impl, nullptr);
    wire::IpContext ip;
    fill_ip_context(src, h.dev->address(), ip);
    ip.ipv4_id = ipv4_id;
    std::vector<uint8_t> out(4096);
    const size_t n = wire::build(pkt, payload, ip, out);
    ASSERT_GT(n, 0u);
    std::lock_guard lk(impl->mu_);
    impl->process_datagram(out.data(), n, src);
    impl->tx_flush();
}

// One RDMA WRITE ONLY of `payload` into `h`'s QP `qpn`.
void inject_write(Host& h, uint32_t qpn, uint32_t psn, const WireAddr& src, uint16_t ipv4_id,
                  uint64_t va, uint32_t rkey, const std::vector<uint8_t>& payload) {
    wire::Packet pkt;
    pkt.bth.opcode = uint8_t(wire::Opcode::rc_write_only);
    pkt.bth.dest_qp = qpn;
    pkt.bth.psn = psn;
    pkt.bth.ack_req = true;
    pkt.reth.va = va;
    pkt.reth.rkey = rkey;
    pkt.reth.dma_len = uint32_t(payload.size());
    inject(h, pkt, payload, src, ipv4_id);
}

} // namespace

TEST(SwManual, RxeLikePacketsNeedTheirFlags) {
    // An rxe peer sends from 0xC000 | hash (not the port we send to) and numbers its IPv4 IDs.
    for (int variant = 0; variant < 3; ++variant) {
        ManualPeer tmpl;
        tmpl.any_source_port = variant != 1;
        tmpl.any_ipv4_id = variant != 2;
        ManualPair p;
        ASSERT_NO_FATAL_FAILURE(p.open(tmpl));
        std::vector<uint8_t> mem(256, 0);
        MrKeys k;
        ASSERT_EQ(p.b.pd->reg_mr(mem.data(), mem.size(), access_all, k), Status::ok);
        WireAddr from = p.a.dev->address();
        from.port = 0xc123;
        const auto data = random_bytes(200, 77);
        const DeviceStats s0 = p.b.dev->stats();
        const uint16_t id = variant == 1 ? 0 : 0x4321;   // variant 1 checks the port alone
        ASSERT_NO_FATAL_FAILURE(inject_write(p.b, p.qb, ManualPair::psn_a, from, id,
                                             uint64_t(uintptr_t(mem.data())), k.rkey, data));
        const DeviceStats s1 = p.b.dev->stats();
        const bool landed = std::memcmp(mem.data(), data.data(), data.size()) == 0;
        switch (variant) {
        case 0:   // both flags (the default): executed
            EXPECT_TRUE(landed);
            EXPECT_EQ(s1.rx_nonzero_ipv4_id, s0.rx_nonzero_ipv4_id + 1);
            EXPECT_EQ(s1.icrc_errors, s0.icrc_errors);
            break;
        case 1:   // source port must match: not our peer
            EXPECT_FALSE(landed);
            EXPECT_EQ(s1.dropped_unknown_qp, s0.dropped_unknown_qp + 1);
            break;
        case 2:   // IPv4 ID must be ours (below 64): the ICRC check fails
            EXPECT_FALSE(landed);
            EXPECT_EQ(s1.icrc_errors, s0.icrc_errors + 1);
            break;
        }
    }
}

TEST(SwManual, AnyIpv4IdOnlyForTheManualPeer) {
    // A numbered IPv4 ID is accepted for a manual QP's peer only, not for a stranger's packet
    // to the same QP (that one fails the ICRC check, as before).
    ManualPair p;
    ASSERT_NO_FATAL_FAILURE(p.open());
    std::vector<uint8_t> mem(64, 0);
    MrKeys k;
    ASSERT_EQ(p.b.pd->reg_mr(mem.data(), mem.size(), access_all, k), Status::ok);
    WireAddr stranger = p.a.dev->address();
    stranger.ip[3] = 2;   // 127.0.0.2
    const auto data = random_bytes(64, 5);
    const DeviceStats s0 = p.b.dev->stats();
    ASSERT_NO_FATAL_FAILURE(inject_write(p.b, p.qb, ManualPair::psn_a, stranger, 0x9999,
                                         uint64_t(uintptr_t(mem.data())), k.rkey, data));
    EXPECT_EQ(p.b.dev->stats().icrc_errors, s0.icrc_errors + 1);
    EXPECT_NE(std::memcmp(mem.data(), data.data(), data.size()), 0);
}

TEST(SwManual, DuplicateReadOlderThanTheReplayCacheIsAnswered) {
    // 70 one-packet READ requests (the replay cache remembers 64), then the first one again, as a
    // requester re-issues after heavy loss: READ is idempotent, the responder must answer it from
    // the request itself (ignoring it left the requester without data until the QP failed).
    ManualPair p;
    ASSERT_NO_FATAL_FAILURE(p.open());
    std::vector<uint8_t> mem(512, 0x5a);
    MrKeys k;
    ASSERT_EQ(p.b.pd->reg_mr(mem.data(), mem.size(), access_all, k), Status::ok);
    const WireAddr src = p.a.dev->address();
    auto inject_read = [&](uint32_t psn, uint64_t va, uint32_t rkey) {
        wire::Packet pkt = read_request(p.qb, psn, reinterpret_cast<const void*>(uintptr_t(va)), rkey);
        pkt.bth.ack_req = true;
        inject(p.b, pkt, {}, src);
    };
    const uint64_t va = uint64_t(uintptr_t(mem.data()));
    for (uint32_t i = 0; i < 70; ++i)
        ASSERT_NO_FATAL_FAILURE(inject_read(wire::psn_add(ManualPair::psn_a, i), va, k.rkey));
    const DeviceStats before = p.b.dev->stats();
    EXPECT_EQ(before.tx_packets, 70u);
    ASSERT_NO_FATAL_FAILURE(inject_read(ManualPair::psn_a, va, k.rkey));
    DeviceStats after = p.b.dev->stats();
    EXPECT_EQ(after.duplicates, before.duplicates + 1);
    EXPECT_EQ(after.tx_packets, before.tx_packets + 1);   // the READ response, again
    // A duplicate with a wrong rkey is still refused: a NAK (remote access), no data.
    ASSERT_NO_FATAL_FAILURE(inject_read(wire::psn_add(ManualPair::psn_a, 1), va, k.rkey ^ 0x1000));
    EXPECT_EQ(p.b.dev->stats().tx_packets, after.tx_packets + 1);
    EXPECT_EQ(p.b.dev->stats().naks_sent_access, after.naks_sent_access + 1);
}

TEST(SwManual, WriteWithImmediateWaitsForAReceiveEntry) {
    // A WRITE with immediate consumes a receive entry, as a SEND does: while the owner has not
    // taken RX_QUEUE_LEN messages the responder answers RNR NAK (before, it queued them without
    // bound; a length-0 WRITE ONLY with immediate needs no rkey). The refused packet is not
    // executed: a WRITE LAST with immediate places nothing until it is accepted.
    DeviceConfig cb = cfg1024();
    cb.recv_queue_len = 1;
    cb.progress_thread = false;
    ManualPair p;
    ASSERT_NO_FATAL_FAILURE(p.open({}, cb));
    p.b.take_messages = false;
    const WireAddr src = p.a.dev->address();
    uint32_t psn = ManualPair::psn_a;
    auto inject_imm = [&](wire::Opcode op, uint32_t imm, const std::vector<uint8_t>& payload,
                          uint64_t va = 0, uint32_t rkey = 0, uint32_t dma_len = 0) {
        wire::Packet pkt;
        pkt.bth.opcode = uint8_t(op);
        pkt.bth.dest_qp = p.qb;
        pkt.bth.psn = psn;
        pkt.reth.va = va;
        pkt.reth.rkey = rkey;
        pkt.reth.dma_len = dma_len;
        pkt.imm = imm;
        inject(p.b, pkt, payload, src);
    };
    auto owner_takes = [&](size_t total) {
        p.b.take_messages = true;
        p.b.poll();
        p.b.take_messages = false;
        ASSERT_EQ(p.b.msgs.size(), total);
    };
    ASSERT_NO_FATAL_FAILURE(inject_imm(wire::Opcode::rc_write_only_imm, 100, {}));
    psn = wire::psn_add(psn, 1);
    EXPECT_EQ(p.b.dev->stats().rnr_naks, 0u);
    ASSERT_NO_FATAL_FAILURE(inject_imm(wire::Opcode::rc_write_only_imm, 101, {}));
    EXPECT_EQ(p.b.dev->stats().rnr_naks, 1u) << "the second message finds no receive entry";
    ASSERT_NO_FATAL_FAILURE(owner_takes(1));
    ASSERT_NO_FATAL_FAILURE(inject_imm(wire::Opcode::rc_write_only_imm, 101, {}));   // again
    psn = wire::psn_add(psn, 1);
    EXPECT_EQ(p.b.dev->stats().rnr_naks, 1u);
    // A two-packet WRITE whose last packet carries the immediate: the first is placed, the last
    // is refused and places nothing.
    std::vector<uint8_t> mem(2048, 0);
    MrKeys k;
    ASSERT_EQ(p.b.pd->reg_mr(mem.data(), mem.size(), access_all, k), Status::ok);
    const auto data = random_bytes(2048, 9);
    const std::vector<uint8_t> first(data.begin(), data.begin() + 1024), last(data.begin() + 1024, data.end());
    ASSERT_NO_FATAL_FAILURE(inject_imm(wire::Opcode::rc_write_first, 0, first,
                                       uint64_t(uintptr_t(mem.data())), k.rkey, 2048));
    psn = wire::psn_add(psn, 1);
    ASSERT_NO_FATAL_FAILURE(inject_imm(wire::Opcode::rc_write_last_imm, 102, last));
    EXPECT_EQ(p.b.dev->stats().rnr_naks, 2u);
    EXPECT_EQ(std::memcmp(mem.data(), first.data(), 1024), 0);
    EXPECT_TRUE(std::all_of(mem.begin() + 1024, mem.end(), [](uint8_t v) { return v == 0; }));
    ASSERT_NO_FATAL_FAILURE(owner_takes(2));
    ASSERT_NO_FATAL_FAILURE(inject_imm(wire::Opcode::rc_write_last_imm, 102, last));   // again
    ASSERT_NO_FATAL_FAILURE(owner_takes(3));
    for (uint32_t i = 0; i < 3; ++i) {
        EXPECT_TRUE(p.b.msgs[i].has_imm);
        EXPECT_EQ(p.b.msgs[i].imm, 100 + i);
    }
    EXPECT_EQ(std::memcmp(mem.data(), data.data(), data.size()), 0);
    EXPECT_EQ(p.b.dev->stats().rnr_naks, 2u);
}

namespace {

// a's QP connected by hand to b's, where b never runs: its answers (ACK, NAK) are injected into a.
struct InjectedAnswers {
    Host a, b;
    uint32_t qa = 0, qb = 0;
    static constexpr uint32_t p0 = ManualPair::psn_a;   // a's first PSN

    void open(DeviceConfig ca) {
        ca.progress_thread = false;
        ca.retransmit_timeout_us = 1'000'000;   // no retransmission but those the answers cause
        ASSERT_EQ(a.open(ca), Status::ok);
        ASSERT_EQ(b.open(cfg1024()), Status::ok);
        ASSERT_EQ(a.dev->create_qp(qa), Status::ok);
        ASSERT_EQ(b.dev->create_qp(qb), Status::ok);
        ManualPeer to_b;
        to_b.addr = b.dev->address();
        to_b.qpn = qb;
        to_b.sq_psn = ManualPair::psn_a;
        to_b.rq_psn = ManualPair::psn_b;
        ASSERT_EQ(a.dev->connect_qp_manual(qa, to_b), Status::ok);
    }
    // A 4-packet WRITE (wr_id `id`), sent once a has put `tx_after` packets on the wire.
    void write4(uint64_t id, uint64_t tx_after) {
        static const std::vector<uint8_t> src = random_bytes(4096, 3);
        ASSERT_EQ(a.dev->post_write(qa, id, src.data(), src.size(), 0x1000, 0x1234, true), Status::ok);
        ASSERT_TRUE(run_until({&a}, [&] { return a.dev->stats().tx_packets >= tx_after; }, 5));
    }
    void answer(uint8_t syndrome, uint32_t psn) {
        wire::Packet pkt;
        pkt.bth.opcode = uint8_t(wire::Opcode::rc_ack);
        pkt.bth.dest_qp = qa;
        pkt.bth.psn = psn;
        pkt.aeth.syndrome = syndrome;
        inject(a, pkt, {}, b.dev->address());
    }
    void completes_ok(uint64_t id) {
        ASSERT_TRUE(run_until({&a}, [&] { return a.find(id) != nullptr; }, 5));
        EXPECT_EQ(a.find(id)->status, Status::ok);
    }
};

} // namespace

TEST(SwManual, LateSequenceNakDoesNotRewind) {
    // A NAK (sequence error) that arrives after the PSN it names was acknowledged - the
    // responder asked for it while it was on its way - must not send acknowledged packets again
    // nor cut the window; a fatal one must not fail the QP.
    InjectedAnswers t;
    ASSERT_NO_FATAL_FAILURE(t.open(cfg1024()));
    ASSERT_NO_FATAL_FAILURE(t.write4(7, 4));
    const uint32_t p0 = t.p0;
    ASSERT_NO_FATAL_FAILURE(t.answer(wire::aeth_ack_syndrome, wire::psn_add(p0, 1)));   // 2 of 4
    const DeviceStats before = t.a.dev->stats();
    ASSERT_NO_FATAL_FAILURE(t.answer(wire::aeth_nak_syndrome(wire::nak_psn_seq_error), wire::psn_add(p0, 1)));
    t.a.poll();
    const DeviceStats after = t.a.dev->stats();
    EXPECT_EQ(after.retransmits, before.retransmits) << "acknowledged packets sent again";
    EXPECT_EQ(after.tx_packets, before.tx_packets);
    ASSERT_NO_FATAL_FAILURE(t.answer(wire::aeth_ack_syndrome, wire::psn_add(p0, 3)));
    ASSERT_NO_FATAL_FAILURE(t.completes_ok(7));
    // A fatal NAK for an acknowledged PSN is as late: the responder answered a stale duplicate
    // (a delayed READ request after its region went; measured in faults.matrix with 3 ms
    // delays): the completed work and the QP stand.
    ASSERT_NO_FATAL_FAILURE(t.answer(wire::aeth_nak_syndrome(wire::nak_remote_access), wire::psn_add(p0, 2)));
    EXPECT_EQ(t.a.dev->qp_state(t.qa), QpState::rts);
    // A NAK for the first unacknowledged PSN still rewinds (not a late one).
    ASSERT_NO_FATAL_FAILURE(t.write4(8, after.tx_packets + 4));
    const DeviceStats s2 = t.a.dev->stats();
    ASSERT_NO_FATAL_FAILURE(t.answer(wire::aeth_nak_syndrome(wire::nak_psn_seq_error), wire::psn_add(p0, 5)));
    t.a.poll();
    EXPECT_EQ(t.a.dev->stats().retransmits, s2.retransmits + 3) << "packets 5..7 of the second WRITE again";
}

TEST(SwManual, LateRnrNakIsIgnored) {
    // An RNR NAK for a PSN acknowledged since (duplicated or reordered on the way) must neither
    // pause and rewind the requester nor use up its RNR retries: with rnr_retry = 0 one such
    // NAK would fail a healthy QP.
    DeviceConfig ca = cfg1024();
    ca.rnr_retry = 0;
    InjectedAnswers t;
    ASSERT_NO_FATAL_FAILURE(t.open(ca));
    ASSERT_NO_FATAL_FAILURE(t.write4(7, 4));
    ASSERT_NO_FATAL_FAILURE(t.answer(wire::aeth_ack_syndrome, wire::psn_add(t.p0, 3)));
    ASSERT_NO_FATAL_FAILURE(t.completes_ok(7));
    ASSERT_NO_FATAL_FAILURE(t.write4(8, 8));
    const DeviceStats before = t.a.dev->stats();
    ASSERT_NO_FATAL_FAILURE(t.answer(wire::aeth_rnr_syndrome(1), wire::psn_add(t.p0, 2)));
    t.a.poll();
    EXPECT_EQ(t.a.dev->qp_state(t.qa), QpState::rts) << "a late RNR NAK failed the QP";
    EXPECT_EQ(t.a.dev->stats().retransmits, before.retransmits) << "acknowledged packets sent again";
    // The second WRITE still completes on its ACK, with no pause behind it.
    ASSERT_NO_FATAL_FAILURE(t.answer(wire::aeth_ack_syndrome, wire::psn_add(t.p0, 7)));
    ASSERT_NO_FATAL_FAILURE(t.completes_ok(8));
}

TEST(SwManual, WorkRequestTooLongForTheNegotiatedMtuFails) {
    // A WRITE posted while connecting is sized by the local MTU (4096: 393,216 packets for
    // 1.5 GiB); the peer's REP brings 256 (6.3 M packets, past the 2^22 a WR may take: its last
    // PSN would wrap and the first ACK complete it). The WR fails, the QP with it, and no
    // byte of the (never touched) source is sent.
    DeviceConfig ca, cb;
    ca.mtu = 4096;
    cb.mtu = 256;
    ca.progress_thread = cb.progress_thread = false;
    Host a, b;
    ASSERT_EQ(a.open(ca), Status::ok);
    ASSERT_EQ(b.open(cb), Status::ok);
    uint32_t q = 0;
    ASSERT_EQ(a.dev->create_qp(q), Status::ok);
    ASSERT_EQ(a.dev->connect_qp(q, b.dev->address()), Status::ok);
    static const uint8_t never_read = 0;
    ASSERT_EQ(a.dev->post_write(q, 1, &never_read, size_t(3) << 29, 0x1000, 0x1234, false), Status::ok);
    ASSERT_TRUE(run_until({&a, &b}, [&] { return a.find(1) != nullptr; }, 10));
    EXPECT_EQ(a.find(1)->status, Status::invalid_param);
    EXPECT_EQ(a.dev->qp_state(q), QpState::error);
    EXPECT_LT(a.dev->stats().tx_bytes, 4096u) << "only CM messages";
}

TEST(SwManual, ReadsDoNotPushAnAtomicOutOfTheReplayCache) {
    // Our requester sends a large READ as many requests (one per chunk): 70 READ requests after
    // an atomic whose ACK was lost must not cost the atomic its remembered result - its retry
    // is answered with the original value, not NAKed (which fails the QP), and not executed.
    ManualPair p;
    ASSERT_NO_FATAL_FAILURE(p.open());
    const WireAddr src = p.a.dev->address();
    Targets t;
    t.counter = 41;
    ASSERT_NO_FATAL_FAILURE(t.reg(p.b));
    const wire::Packet at = fetch_add(p.qb, ManualPair::psn_a, &t.counter, t.kc.rkey);
    ASSERT_NO_FATAL_FAILURE(inject(p.b, at, {}, src));
    EXPECT_EQ(t.counter, 42u);
    for (uint32_t i = 1; i <= 70; ++i)
        ASSERT_NO_FATAL_FAILURE(inject(p.b, read_request(p.qb, wire::psn_add(ManualPair::psn_a, i), t.mem.data(), t.k.rkey),
                                       {}, src));
    const DeviceStats s0 = p.b.dev->stats();
    ASSERT_NO_FATAL_FAILURE(inject(p.b, at, {}, src));   // the atomic again
    const DeviceStats s1 = p.b.dev->stats();
    EXPECT_EQ(t.counter, 42u) << "executed twice";
    EXPECT_EQ(s1.naks_sent_invalid, s0.naks_sent_invalid) << "NAKed: the requester would fail the QP";
    EXPECT_EQ(s1.tx_packets, s0.tx_packets + 1) << "answered (its original value)";
}

TEST(SwManual, UnanswerableDuplicatesGetANak) {
    // A duplicate the responder cannot answer - a READ whose region is gone since, an atomic
    // older than the replay cache (64 atomics) - is NAKed at its PSN, so the requester
    // fails the work request instead of retrying for as long as other traffic keeps the QP
    // alive. A duplicate atomic the cache holds is answered with its original value, once
    // executed.
    ManualPair p;
    ASSERT_NO_FATAL_FAILURE(p.open());
    const WireAddr src = p.a.dev->address();
    Targets t;
    ASSERT_NO_FATAL_FAILURE(t.reg(p.b));
    const wire::Packet rd = read_request(p.qb, ManualPair::psn_a, t.mem.data(), t.k.rkey);
    ASSERT_NO_FATAL_FAILURE(inject(p.b, rd, {}, src));
    auto add_one = [&](uint32_t psn) { inject(p.b, fetch_add(p.qb, psn, &t.counter, t.kc.rkey), {}, src); };
    for (uint32_t i = 1; i <= 65; ++i)
        ASSERT_NO_FATAL_FAILURE(add_one(wire::psn_add(ManualPair::psn_a, i)));
    EXPECT_EQ(t.counter, 65u);
    const DeviceStats s0 = p.b.dev->stats();
    // The newest atomic again: its original value (64) again, not executed.
    ASSERT_NO_FATAL_FAILURE(add_one(wire::psn_add(ManualPair::psn_a, 65)));
    DeviceStats s1 = p.b.dev->stats();
    EXPECT_EQ(t.counter, 65u);
    EXPECT_EQ(s1.tx_packets, s0.tx_packets + 1);
    EXPECT_EQ(s1.naks_sent_invalid, s0.naks_sent_invalid);
    // The first atomic, pushed out of the cache by 64 later ones: NAK, not executed.
    ASSERT_NO_FATAL_FAILURE(add_one(wire::psn_add(ManualPair::psn_a, 1)));
    DeviceStats s2 = p.b.dev->stats();
    EXPECT_EQ(t.counter, 65u);
    EXPECT_EQ(s2.naks_sent_invalid, s1.naks_sent_invalid + 1);
    // The READ again after its region was deregistered: NAK remote access, nothing read.
    ASSERT_EQ(p.b.pd->dereg_mr(t.k.lkey), Status::ok);
    ASSERT_NO_FATAL_FAILURE(inject(p.b, rd, {}, src));
    const DeviceStats s3 = p.b.dev->stats();
    EXPECT_EQ(s3.naks_sent_access, s2.naks_sent_access + 1);
    EXPECT_EQ(s3.tx_packets, s2.tx_packets + 1) << "the NAK only";
}

namespace {

// A QP of `b` connected by hand to a plain UDP socket that plays the requester (a 32 MiB
// receive buffer: it takes a whole 4 MiB READ's responses). skip: why it cannot run here.
struct RawRequester {
    std::vector<uint8_t> mem;   // the READs' source, registered with b (rkey k.rkey): outlives b
    MrKeys k;
    Host b;
    int fd = -1;
    WireAddr peer{};
    uint32_t qb = 0;
    std::string skip;

    ~RawRequester() {
        if (fd >= 0)
            ::close(fd);
    }
    // takeover_ms: b's progress thread serves the device once the test has not called
    // progress for that long (it sends slices then); 0: no progress thread (whole READs at once).
    void open(uint32_t rq_psn, uint32_t takeover_ms) {
        DeviceConfig cfg = cfg1024();
        cfg.progress_thread = takeover_ms != 0;
        cfg.idle_takeover_us = takeover_ms * 1000;
        ASSERT_EQ(b.open(cfg), Status::ok);
        b.dev->progress();   // the owner is here now
        sockaddr_in sa;
        fd = loopback_udp_socket(sa);
        ASSERT_GE(fd, 0);
        const int want_buf = 32 << 20;
        if (setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &want_buf, sizeof(want_buf)) != 0)
            setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &want_buf, sizeof(want_buf));
        int got_buf = 0;
        socklen_t gl = sizeof(got_buf);
        getsockopt(fd, SOL_SOCKET, SO_RCVBUF, &got_buf, &gl);
        if (got_buf < (8 << 20))
            skip = "needs an 8 MiB socket buffer (root, or net.core.rmem_max)";
        peer.family = AF_INET;
        std::memcpy(peer.ip, &sa.sin_addr, 4);
        peer.port = ntohs(sa.sin_port);
        ASSERT_EQ(b.dev->create_qp(qb), Status::ok);
        ManualPeer mp;
        mp.addr = peer;
        mp.qpn = 0x4242;
        mp.sq_psn = 0x100;
        mp.rq_psn = rq_psn;
        ASSERT_EQ(b.dev->connect_qp_manual(qb, mp), Status::ok);
    }
    // `len` random bytes (seed) as b's memory region.
    void region(size_t len, uint32_t seed) {
        mem = random_bytes(len, seed);
        ASSERT_EQ(b.pd->reg_mr(mem.data(), len, access_all, k), Status::ok);
    }
    // What b sends until `want` packets came and then nothing for a few rounds (or 20 s
    // passed), ICRC checked; READ response payloads compared with mem (READ at first_psn).
    // drive: call b's progress; else its progress thread must send them.
    void collect(std::vector<wire::Packet>& seen, size_t want, bool drive, uint32_t first_psn,
                 const std::vector<uint8_t>& mem, uint32_t mtu) {
        wire::IpContext from_dev;
        fill_ip_context(b.dev->address(), peer, from_dev);
        from_dev.ipv4_id_known = false;
        std::vector<uint8_t> buf(70000);
        const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(20);
        for (int settle = 0; seen.size() <= want && settle < 5 && std::chrono::steady_clock::now() < end;) {
            if (drive)
                b.dev->progress();
            else
                usleep(1000);
            ssize_t r;
            while ((r = recv(fd, buf.data(), buf.size(), MSG_DONTWAIT)) > 0) {
                wire::Packet pkt;
                ASSERT_EQ(wire::parse(std::span<const uint8_t>(buf.data(), size_t(r)), from_dev, true, pkt),
                          wire::ParseError::none);
                const auto op = wire::Opcode(pkt.bth.opcode);
                if (op != wire::Opcode::rc_ack && op != wire::Opcode::rc_atomic_ack) {
                    const uint32_t i = uint32_t(wire::psn_diff(pkt.bth.psn, first_psn));
                    ASSERT_LT(size_t(i) * mtu, mem.size());
                    ASSERT_EQ(pkt.payload.size(), mtu);
                    ASSERT_EQ(std::memcmp(pkt.payload.data(), mem.data() + size_t(i) * mtu, mtu), 0)
                            << "packet " << i;
                }
                seen.push_back(pkt);
                seen.back().payload = {};
            }
            if (seen.size() >= want) {
                ++settle;   // and nothing more comes
                usleep(5000);
            }
        }
    }
};

} // namespace

TEST(SwManual, LongReadIsAnsweredInSlicesAndWhatFollowsWaits) {
    // A kernel rxe requester asks for a whole READ (up to 2 GiB) in one request. Its responses
    // go a slice (DeviceImpl::resp_slice_bytes) per progress round: built in one go they held
    // the device lock for the whole READ and burst it into the peer's socket. What the
    // responder answers after it waits behind it, in PSN order. A re-issued tail of the READ
    // (responses lost) sends that READ again from there, not everything twice.
    RawRequester rr;
    const uint32_t p0 = ManualPair::psn_a;   // the READ's PSNs wrap the 24-bit space
    ASSERT_NO_FATAL_FAILURE(rr.open(p0, 60'000));   // only this test's progress calls send
    if (!rr.skip.empty())
        GTEST_SKIP() << rr.skip;
    Host& b = rr.b;
    const uint32_t qb = rr.qb;
    const WireAddr peer = rr.peer;
    constexpr uint32_t mtu = 1024, npkts = 4096, len = npkts * mtu;
    ASSERT_NO_FATAL_FAILURE(rr.region(len, 11));
    const std::vector<uint8_t>& mem = rr.mem;
    const MrKeys& k = rr.k;
    Targets t;
    t.counter = 41;
    ASSERT_NO_FATAL_FAILURE(t.reg(b));
    ASSERT_NO_FATAL_FAILURE(inject(b, read_request(qb, p0, mem.data(), k.rkey, len), {}, peer));
    const uint64_t first_slice = b.dev->stats().tx_packets;
    EXPECT_EQ(first_slice, DeviceImpl::resp_slice_bytes / mtu) << "one slice at once, not the READ";
    ASSERT_NO_FATAL_FAILURE(inject(b, fetch_add(qb, wire::psn_add(p0, npkts), &t.counter, t.kc.rkey), {}, peer));
    EXPECT_EQ(t.counter, 42u) << "executed on arrival";
    wire::Packet send;
    send.bth.opcode = uint8_t(wire::Opcode::rc_send_only);
    send.bth.dest_qp = qb;
    send.bth.psn = wire::psn_add(p0, npkts + 1);
    send.bth.ack_req = true;
    ASSERT_NO_FATAL_FAILURE(inject(b, send, {1, 2, 3}, peer));
    // The requester lost responses from packet 100 on and asks for the rest again.
    constexpr uint32_t lost = 100;
    ASSERT_NO_FATAL_FAILURE(inject(b, read_request(qb, wire::psn_add(p0, lost), mem.data() + lost * mtu, k.rkey,
                                                   len - lost * mtu), {}, peer));
    EXPECT_EQ(b.dev->stats().tx_packets, first_slice) << "the rest waits for progress";

    // Expected on the wire: packets 0..255, then 100..4095 (MIDDLE from 100), the atomic's
    // response (original value 41), the SEND's ACK.
    const size_t want = first_slice + (npkts - lost) + 2;
    std::vector<wire::Packet> seen;
    ASSERT_NO_FATAL_FAILURE(rr.collect(seen, want, true, p0, mem, mtu));
    ASSERT_EQ(seen.size(), want);
    using wire::Opcode;
    auto expect_read = [&](size_t at, uint32_t i, Opcode op) {
        EXPECT_EQ(seen[at].bth.psn, wire::psn_add(p0, i)) << "at " << at;
        EXPECT_EQ(seen[at].bth.opcode, uint8_t(op)) << "at " << at;
    };
    expect_read(0, 0, Opcode::rc_read_response_first);
    for (uint32_t i = 1; i < first_slice; ++i)
        expect_read(i, i, Opcode::rc_read_response_middle);
    for (uint32_t i = lost; i + 1 < npkts; ++i)
        expect_read(first_slice + i - lost, i, Opcode::rc_read_response_middle);
    expect_read(want - 3, npkts - 1, Opcode::rc_read_response_last);
    EXPECT_EQ(seen[want - 2].bth.opcode, uint8_t(Opcode::rc_atomic_ack));
    EXPECT_EQ(seen[want - 2].bth.psn, wire::psn_add(p0, npkts));
    EXPECT_EQ(seen[want - 2].atomic_ack.orig, 41u);
    EXPECT_EQ(seen[want - 1].bth.opcode, uint8_t(Opcode::rc_ack));
    EXPECT_EQ(seen[want - 1].bth.psn, wire::psn_add(p0, npkts + 1));
    EXPECT_EQ(wire::aeth_kind(seen[want - 1].aeth.syndrome), wire::AethKind::ack);
}

TEST(SwManual, LongReadGoesOnWhileTheOwnerComputes) {
    // Passive target: the owner never calls progress after the READ arrived; the progress
    // thread (taking over after 200 ms) sends the slices after the first.
    RawRequester rr;
    ASSERT_NO_FATAL_FAILURE(rr.open(0x10, 200));
    if (!rr.skip.empty())
        GTEST_SKIP() << rr.skip;
    constexpr uint32_t mtu = 1024, npkts = 4096;
    ASSERT_NO_FATAL_FAILURE(rr.region(size_t(npkts) * mtu, 12));
    ASSERT_NO_FATAL_FAILURE(inject(rr.b, read_request(rr.qb, 0x10, rr.mem.data(), rr.k.rkey, npkts * mtu), {},
                                   rr.peer));
    EXPECT_EQ(rr.b.dev->stats().tx_packets, DeviceImpl::resp_slice_bytes / mtu) << "the first slice";
    std::vector<wire::Packet> seen;
    ASSERT_NO_FATAL_FAILURE(rr.collect(seen, npkts, false, 0x10, rr.mem, mtu));
    ASSERT_EQ(seen.size(), size_t(npkts));
    for (uint32_t i = 0; i < npkts; ++i)
        ASSERT_EQ(seen[i].bth.psn, 0x10 + i);
}

TEST(SwManual, ReissuedEarlierReadGoesBeforeTheSlicedOne) {
    // READ A (one packet), then READ B (4 MiB, sliced). The requester lost A's response and
    // goes back to A (go-back-N: it asks for B again after it). A is answered at once, ahead
    // of B's slices: queued behind B, A's answer came only after all of B, whose responses the
    // requester takes as a sign of loss - it went back again, and B restarted, for ever. B's
    // re-issue rewinds B to its start. A stale copy of A (delayed on the way, no go-back) is
    // answered ahead too and costs B nothing. Without the progress thread (nobody would send
    // slices while the owner sleeps) a long READ goes at once.
    RawRequester rr;
    const uint32_t p0 = 0x200;
    ASSERT_NO_FATAL_FAILURE(rr.open(p0, 60'000));
    if (!rr.skip.empty())
        GTEST_SKIP() << rr.skip;
    Host& b = rr.b;
    constexpr uint32_t mtu = 1024, npkts = 4096, len = npkts * mtu;
    ASSERT_NO_FATAL_FAILURE(rr.region(len, 13));
    const std::vector<uint8_t>& mem = rr.mem;
    const MrKeys& k = rr.k;
    const wire::Packet a = read_request(rr.qb, p0, mem.data(), k.rkey, mtu);
    const wire::Packet rb = read_request(rr.qb, p0 + 1, mem.data(), k.rkey, len);
    ASSERT_NO_FATAL_FAILURE(inject(b, a, {}, rr.peer));
    ASSERT_NO_FATAL_FAILURE(inject(b, rb, {}, rr.peer));
    const uint64_t slice = DeviceImpl::resp_slice_bytes / mtu;
    ASSERT_EQ(b.dev->stats().tx_packets, 1 + slice);
    ASSERT_NO_FATAL_FAILURE(inject(b, a, {}, rr.peer));
    EXPECT_EQ(b.dev->stats().tx_packets, 1 + slice + 1) << "A again, at once";
    ASSERT_NO_FATAL_FAILURE(inject(b, rb, {}, rr.peer));
    EXPECT_EQ(b.dev->stats().tx_packets, 1 + slice + 1) << "B rewound, not sent twice";
    ASSERT_NO_FATAL_FAILURE(inject(b, a, {}, rr.peer));   // stale
    EXPECT_EQ(b.dev->stats().tx_packets, 1 + slice + 2);
    std::vector<wire::Packet> seen;
    const size_t want = 1 + slice + 2 + npkts;
    // (READ A's payload is mem's first packet, B's packet i is mem's packet i: PSN p0 + 1 + i.
    // collect() checks payloads by PSN from p0, so B's are checked against packet i + 1.)
    std::vector<uint8_t> by_psn(mem.begin(), mem.begin() + mtu);
    by_psn.insert(by_psn.end(), mem.begin(), mem.end());
    ASSERT_NO_FATAL_FAILURE(rr.collect(seen, want, true, p0, by_psn, mtu));
    ASSERT_EQ(seen.size(), want);
    using wire::Opcode;
    EXPECT_EQ(seen[0].bth.psn, p0);
    for (size_t at : {1 + slice, 2 + slice}) {
        EXPECT_EQ(seen[at].bth.psn, p0);
        EXPECT_EQ(seen[at].bth.opcode, uint8_t(Opcode::rc_read_response_only));
    }
    for (uint32_t i = 0; i < npkts; ++i)
        ASSERT_EQ(seen[3 + slice + i].bth.psn, p0 + 1 + i) << i;
    EXPECT_EQ(seen[3 + slice].bth.opcode, uint8_t(Opcode::rc_read_response_first));
    EXPECT_EQ(seen.back().bth.opcode, uint8_t(Opcode::rc_read_response_last));

    // Without a progress thread: all of a long READ at once.
    RawRequester solo;
    ASSERT_NO_FATAL_FAILURE(solo.open(p0, 0));
    ASSERT_NO_FATAL_FAILURE(solo.region(len, 13));
    ASSERT_NO_FATAL_FAILURE(inject(solo.b, read_request(solo.qb, p0, solo.mem.data(), solo.k.rkey, len), {},
                                   solo.peer));
    EXPECT_EQ(solo.b.dev->stats().tx_packets, uint64_t(npkts));
}

TEST(SwManual, ResponsesWaitingOnAQpAreBounded) {
    // Behind a long READ, a peer's flood of requests that each want an answer (here WRITEs to
    // a wrong rkey: one NAK each) must not queue answers without bound: beyond max_resp_jobs
    // they are dropped, as if lost (counter resp_dropped).
    RawRequester rr;
    const uint32_t p0 = 0x300;
    ASSERT_NO_FATAL_FAILURE(rr.open(p0, 60'000));
    if (!rr.skip.empty())
        GTEST_SKIP() << rr.skip;
    Host& b = rr.b;
    constexpr uint32_t mtu = 1024, len = 4096 * mtu;
    ASSERT_NO_FATAL_FAILURE(rr.region(len, 14));
    const std::vector<uint8_t>& mem = rr.mem;
    const MrKeys& k = rr.k;
    ASSERT_NO_FATAL_FAILURE(inject(b, read_request(rr.qb, p0, mem.data(), k.rkey, len), {}, rr.peer));
    const size_t flood = 3 * DeviceImpl::max_resp_jobs;
    for (size_t i = 0; i < flood; ++i)
        ASSERT_NO_FATAL_FAILURE(inject_write(b, rr.qb, p0 + 4096, rr.peer, 0, uint64_t(uintptr_t(mem.data())),
                                             k.rkey ^ 0x100, {1, 2, 3}));
    const DeviceStats s = b.dev->stats();
    const size_t queued = DeviceImpl::max_resp_jobs - 1;   // the READ takes one
    EXPECT_EQ(s.naks_sent_access, queued) << "dropped NAKs are not counted as sent";
    EXPECT_EQ(s.resp_dropped, flood - queued);
    auto* impl = dynamic_cast<DeviceImpl*>(b.dev.get());
    std::lock_guard lk(impl->mu_);
    EXPECT_EQ(impl->find_qp(rr.qb)->resp_jobs.size(), DeviceImpl::max_resp_jobs);
}
