// State of one RC queue pair: requester (send queue, PSNs, window, retransmission), completer
// (acknowledged PSN, outstanding RDMA READ/atomic) and responder (expected PSN, MSN, inbound
// reassembly, replay cache). The state machines live in requester.cpp / completer.cpp /
// responder.cpp; the device lock protects everything here.
#pragma once

#include <array>
#include <cstdint>
#include <deque>
#include <netinet/in.h>
#include <optional>
#include <vector>

#include "cc/qp_cc.hpp"
#include "sw/device.hpp"
#include "wire/packet.hpp"

namespace roce::sw {

// PSNs one work request may take: PSN arithmetic is modulo 2^24 and the windows compare
// differences within half of it, so a message stays far below.
inline constexpr uint32_t max_wr_packets = 1u << 22;

// One posted work request.
struct Wr {
    uint64_t wr_id = 0;
    OpKind op = OpKind::send;
    bool has_imm = false;
    uint32_t imm = 0;
    const uint8_t* src = nullptr;    // SEND/WRITE source (owned.data() or the caller's buffer)
    std::vector<uint8_t> owned;      // bcopy'd payload
    uint8_t* dst = nullptr;          // READ destination
    size_t len = 0;
    uint64_t remote_va = 0;
    uint32_t rkey = 0;
    uint64_t swap_add = 0, compare = 0;
    uint64_t* result = nullptr;
    uint32_t npkts = 1;              // PSNs the operation consumes (READ: response packets)
    uint32_t first_psn = 0;
    bool psn_assigned = false;
    bool lazy = false;               // a SEND whose completion nobody waits for (wr_id_lazy)
    uint32_t resp_pkts = 0;          // READ responses / atomic ACKs received in order

    bool is_rd_atomic() const {
        return op == OpKind::read || op == OpKind::fetch_add || op == OpKind::cmp_swap;
    }
    uint32_t last_psn() const { return wire::psn_add(first_psn, npkts - 1); }
    // PSNs it takes at path MTU `mtu` (atomics: one; an empty SEND/WRITE/READ: one). Wider
    // than npkts: a caller checks it against max_wr_packets before storing it.
    uint64_t packets(uint32_t mtu) const {
        if (op != OpKind::send && op != OpKind::write && op != OpKind::read)
            return 1;
        return len == 0 ? 1 : (uint64_t(len) + mtu - 1) / mtu;
    }
};

// A READ/atomic request the responder executed, kept to answer duplicates: a duplicate atomic
// must return the original result, not execute again. A QP keeps the last replay_entries of
// each kind: a requester may have at most that many outstanding (the device refuses a larger
// max_rd_atomic). Atomics have a ring of their own: our requester issues a large READ as many
// requests (one per chunk), which counted against one shared ring pushed an unacknowledged
// atomic's result out, and its retry after a loss then failed the QP.
inline constexpr size_t replay_entries = 64;
struct ReplayEntry {
    bool valid = false;
    bool atomic = false;
    uint32_t psn = 0;
    uint32_t npkts = 0;
    uint64_t orig = 0;
};

// A response the responder owes, in PSN order. A READ of more than DeviceImpl::resp_slice_bytes
// (a kernel rxe requester asks for up to 2 GiB in one request) is answered a slice per progress
// round: built in one go, it held the device lock for the whole of it and burst everything
// into the peer's socket. What the responder answers after such a READ (ACKs, NAKs, atomic and
// READ responses) waits behind it: a requester takes an answer for a later PSN as a sign that
// the READ's responses were lost and asks again.
struct RespJob {
    enum class Kind : uint8_t { read, atomic, ack } kind = Kind::read;
    bool mid_start = false;   // read: packet 0 continues an earlier READ (MIDDLE/LAST, as rxe)
    uint8_t syndrome = 0;     // ack: the AETH syndrome (an ACK, or a NAK)
    uint32_t psn = 0;         // the response's PSN (read: of packet 0)
    uint32_t msn = 0;         // the AETH's MSN when it was executed
    uint32_t n = 1;           // read: response packets ...
    uint32_t next = 0;        // ... and the next one to send
    uint32_t rkey = 0;        // read: [va, va + len)
    uint32_t len = 0;
    uint64_t va = 0;
    uint64_t orig = 0;        // atomic: the original value
};

// What a QP sent to and received from its peer: DeviceStats' per-peer subset, same names (and
// rtt_ambiguous, per QP only: the delay window's samples the poller's absence may explain). One
// list for the fields, their sum (a destroyed QP's counts stay with its peer) and their names.
#define ROCE_SW_QP_STATS(X)                                                                       \
    X(tx_packets) X(tx_bytes) X(rx_packets) X(rx_bytes) X(retransmits) X(duplicates)             \
    X(seq_errors) X(timeouts) X(rnr_naks) X(naks_sent_seq) X(naks_sent_rnr) X(naks_sent_access)   \
    X(naks_sent_invalid) X(naks_received_seq) X(naks_received_rnr) X(naks_received_access)       \
    X(naks_received_invalid) X(ce_received) X(cnps_sent) X(cnps_received) X(cnps_local) X(cc_paced) \
    X(rtt_ambiguous)
struct QpStats {
#define ROCE_FIELD(f) uint64_t f = 0;
    ROCE_SW_QP_STATS(ROCE_FIELD)
#undef ROCE_FIELD
    QpStats& operator+=(const QpStats& o) {
#define ROCE_ADD(f) f += o.f;
        ROCE_SW_QP_STATS(ROCE_ADD)
#undef ROCE_ADD
        return *this;
    }
};

struct Qp {
    uint32_t qpn = 0;
    QpState state = QpState::reset;
    bool passive = false;            // created by the CM for a peer's REQ
    uint64_t conn_id = 0;            // CM connection identifier (nonce from the REQ)
    bool manual = false;             // connected by connect_qp_manual: no CM messages
    bool any_source_port = false;    // ManualPeer::any_source_port
    bool any_ipv4_id = false;        // ManualPeer::any_ipv4_id

    // Addressing
    WireAddr peer{};
    sockaddr_storage peer_sa{};
    socklen_t peer_salen = 0;
    uint32_t dest_qpn = 0;
    uint32_t mtu = 4096;
    wire::IpContext tx_ip{};         // ICRC context of packets we send to the peer
    int tos = -1;                    // negotiated ToS when it differs from the device's (tc.cpp)
    uint8_t tx_sock = 0;             // socket of its packets: 0 the device's, k its class socket k-1 (tc.cpp)
    uint8_t cnp_sock = 0;            // socket of its CNPs (CNP ToS at the connection's priority)

    // CM (active side): REQ retransmission
    uint64_t cm_deadline_ns = 0;
    uint64_t cm_timeout_ns = 0;
    uint32_t cm_retries = 0;
    // CM (passive side): PROBEs to a silent peer (cm.hpp)
    uint64_t alive_ns = 0;           // the peer's device last answered ALIVE
    uint64_t probe_jitter_ns = 0;    // added to passive_idle_ms: QPs do not all ask at once
    uint64_t probe_deadline_ns = 0;  // next PROBE; 0: none sent since the peer was last heard
    uint64_t probe_interval_ns = 0;
    uint64_t first_probe_ns = 0;     // of this silence

    // ---- requester / completer
    std::deque<Wr> sq;
    size_t send_idx = 0;             // cursor: WR index in sq ...
    uint32_t send_pkt = 0;           // ... and packet within it
    uint32_t sq_start_psn = 0;
    uint32_t next_psn = 0;           // next unassigned PSN
    uint32_t una_psn = 0;            // oldest PSN not yet acknowledged / answered
    uint32_t rd_outstanding = 0;     // READ/atomic WRs sent and not completed
    uint64_t timer_deadline_ns = 0;  // retransmission timer, 0 = idle
    bool timer_deferred = false;     // expiry already postponed once (device was not running)
    uint64_t cur_timeout_ns = 0;
    uint32_t retries_left = 0;
    uint64_t last_heard_ns = 0;      // last valid packet from the peer on this QP
    uint32_t rnr_left = 0;
    uint64_t rnr_wait_until_ns = 0;
    // Congestion window in packets (AIMD, slow start below ssthresh): the loopback "network" is
    // the peer's socket buffer, which overflows when the peer's thread is descheduled.
    double cwnd = 0;
    double ssthresh = 0;
    // RTT estimate (RFC 6298, Karn's rule: no samples across retransmissions) for the
    // retransmission timeout: max(retransmit_timeout_us, srtt + 4 rttvar).
    bool probe_active = false;
    uint32_t probe_psn = 0;
    uint64_t probe_ns = 0;
    uint64_t cc_acked_pkts = 0;      // acknowledged since the last RTT sample (delay control's
                                     // increase is per byte acknowledged, not per ACK)
    double srtt_ns = 0, rttvar_ns = 0;
    uint32_t sent_hi = 0;            // one past the highest PSN ever sent
    uint32_t since_ackreq = 0;       // SEND/WRITE packets sent since the last one with AckReq
    uint32_t last_goback_psn = 0;
    uint64_t last_goback_ns = 0;
    // Congestion control (sw/congestion.cpp): empty when the mode is off. cc_wake_ns: when the
    // pacer lets the next packet go (0: not waiting), a timer like the others.
    std::optional<cc::QpCc> cc;
    uint64_t cc_wake_ns = 0;

    // ---- responder
    uint32_t epsn = 0;               // expected PSN
    uint32_t msn = 0;
    bool nak_sent = false;           // one NAK per gap
    bool ack_pending = false;        // accepted SEND/WRITE packets (or a duplicate) not yet acknowledged
    bool ack_listed = false;         // in ack_list_: acknowledged at the end of the receive batch
    uint64_t ack_deadline_ns = 0;    // delayed ACK of packets without AckReq (0: none due)
    uint32_t ack_psn = 0;            // PSN of the last accepted SEND/WRITE packet (what ACKs say)
    uint32_t pkts_since_ack = 0;
    enum class InOp : uint8_t { none, send, write } in_op = InOp::none;
    std::vector<uint8_t> rbuf;       // SEND reassembly
    size_t rbuf_charge = 0;          // what rbuf adds to the device's rq_bytes_ (its bytes so far)
    uint64_t rbuf_first_ns = 0;      // when rbuf took its SEND FIRST (reasm_deadline_ms)
    uint64_t w_va = 0;               // WRITE in progress
    uint32_t w_rkey = 0;
    uint64_t w_remaining = 0;
    std::array<ReplayEntry, replay_entries> replay_read{};
    std::array<ReplayEntry, replay_entries> replay_atomic{};
    unsigned replay_read_next = 0;
    unsigned replay_atomic_next = 0;
    unsigned undelivered = 0;        // received messages not yet handed to the owner
    std::deque<RespJob> resp_jobs;   // responses waiting behind a sliced READ (RespJob)
    bool resp_listed = false;        // in DeviceImpl::resp_list_

    QpStats st{};
};

} // namespace roce::sw
