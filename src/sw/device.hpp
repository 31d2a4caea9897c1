// Userspace RoCEv2 device: RC queue pairs speaking real RoCEv2 packets (BTH/RETH/AETH/...,
// ICRC) over a UDP socket, so it runs on any Linux host without an RDMA NIC.
//
// This header is the contract between the core (src/sw) and the UCX glue (uct/). It knows
// nothing of UCX. Threading model:
//   * Every public method is thread-safe (one recursive mutex per device).
//   * The owner thread (UCX's progress) calls progress_round() (or progress(), then drains
//     poll_completions() and poll_recv()). Completions and received messages are only ever
//     handed out there; progress_round() and poll_recv() call back with the mutex held.
//   * Passive target: a background thread runs the protocol (RDMA READ/WRITE/atomic responses,
//     ACKs, retransmission timers) once the owner has not called progress() for
//     `idle_takeover_us` (noticed up to twice that, at most 1 ms, later while the thread had
//     nothing to serve for 100 ms: device.cpp), so one-sided operations aimed at a process
//     complete while that process computes outside MPI. Messages (SENDs) it receives are queued
//     for the owner.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <sys/uio.h>

#include "cc/config.hpp"
#include "common/rc_device.hpp"
#include "common/status.hpp"

namespace roce::sw {

// The value types of the backend-neutral contract (common/rc_device.hpp).
using roce::Access;
using roce::access_all;
using roce::access_local_write;
using roce::access_remote_atomic;
using roce::access_remote_read;
using roce::access_remote_write;
using roce::Completion;
using roce::MrKeys;
using roce::OpKind;
using roce::QpState;
using roce::RecvMessage;
using roce::WireAddr;

// Packet-level fault injection, off by default. Probabilities in [0,1], applied on transmit.
struct FaultConfig {
    double drop = 0;       // drop a packet
    double duplicate = 0;  // send it twice
    double reorder = 0;    // hold it back and send it after the next one
    double corrupt = 0;    // flip a payload bit (the receiver's ICRC check must drop it)
    double ce = 0;         // mark a data packet's ECN field CE, as a congested switch would
    double truncate = 0;   // cut a packet short (after its ICRC was computed)
    double drop_acks = 0;  // drop an RC ACK/NAK (only those: the requester's timer must recover)
    double delay = 0;      // hold a packet back for delay_us (a slow path; it arrives late, out of order)
    uint32_t delay_us = 2000;
    uint64_t seed = 1;
    bool any() const {
        return drop > 0 || duplicate > 0 || reorder > 0 || corrupt > 0 || ce > 0 || truncate > 0 ||
               drop_acks > 0 || delay > 0;
    }
};

// The UDP ports a device may bind: first..last. One port (last <= first) is that port or nothing;
// 0 is an ephemeral port. A range takes a free port in it (firewalls that open a range).
struct PortRange {
    uint16_t first = 0;
    uint16_t last = 0;
    PortRange(uint16_t port = 0) : first(port), last(port) {}
    PortRange(uint16_t f, uint16_t l) : first(f), last(l) {}
    bool is_range() const { return last > first; }
    std::string str() const;   // "0", "4791", "47000-47099"
};
// A port or range as UCX_*_PORT_RANGE takes it: first <= last <= 65535, and 0 only alone
// (an ephemeral port). nullopt otherwise. parse: the text "N" or "A-B".
std::optional<PortRange> make_port_range(unsigned long first, unsigned long last);
std::optional<PortRange> parse_port_range(std::string_view text);

struct DeviceConfig {
    std::string ip = "127.0.0.1";      // a local address (netdev address); IPv4 or IPv6 literal
    PortRange ports;                   // UDP port(s); 0 = ephemeral (several processes per host)
    uint32_t mtu = 4096;               // path MTU: 256, 512, 1024, 2048 or 4096
    uint32_t sq_depth = 256;           // outstanding work requests per QP before no_resource
    uint32_t max_rd_atomic = 16;       // outstanding RDMA READ/atomic requests per QP
    // Largest RDMA READ request: longer READs are asked for in pieces of this size (their
    // responses arrive back to back; a paced QP is charged a piece's responses at once).
    uint32_t max_read_request = 128u << 10;
    uint32_t retransmit_timeout_us = 2000;  // first retransmission timeout (doubles per retry)
    uint32_t retry_count = 7;          // retransmissions before the QP fails with timeout ...
    uint32_t peer_timeout_ms = 5000;   // ... and only once nothing came from the peer for this long
    uint32_t rnr_retry = 7;            // 7 = infinite, as in IB
    uint32_t ack_coalesce = 16;        // ACK at most every N packets (plus on AckReq / idle)
    // Packets without AckReq are acknowledged at the latest this long after they arrived (a
    // delayed ACK). The requester leaves AckReq off only the SENDs nobody waits for (wr_id_lazy):
    // an MPI ping-pong then puts one datagram per message on the wire instead of two (at 200 us
    // the ACK is, at ping-pong rates, the ack_coalesce-th packet's: 2.13 datagrams per round trip
    // instead of 2.36 at 50 us, bench/device_bench.cpp). 0: every SEND asks for an ACK.
    uint32_t ack_delay_us = 200;
    // The longest ack_delay_us open() accepts: a quarter of the retransmission timeout (of its
    // ceiling, when longer), so that a delayed ACK comes well before the requester gives up.
    uint32_t ack_delay_limit_us() const;
    uint32_t max_recv_msg = 65536;     // largest SEND message the responder reassembles
    uint32_t recv_queue_len = 1024;    // undelivered messages before the responder sends RNR NAK
    // Bytes of messages the owner has not taken, all QPs together, before every QP answers
    // RNR NAK: RX_QUEUE_LEN bounds each QP, and strangers can make up to 65,536 passive QPs
    // while the owner computes and the progress thread receives.
    size_t recv_budget = size_t(64) << 20;
    // While recv_budget is spent, a SEND whose FIRST came this long ago and is still being
    // reassembled is given up (NAK invalid request: both QPs fail, the sender's SEND completes
    // with an error), so that SENDs parked unfinished cannot hold every peer's new SENDs behind
    // RNR NAKs for good. From the FIRST, not the last packet: a sender trickling one MIDDLE per
    // QP now and then kept a stall clock from ever running out (review finding), and a clock of
    // the last packet also failed honest senders whose ACKs were lost for a few backoffs, or
    // whose packets waited unread while this device was away. An honest sender moves a message
    // (128 KiB by default) in far less, or its own QP has timed out first (peer_timeout_ms).
    uint32_t reasm_deadline_ms = 30'000;
    uint8_t traffic_class = 0;         // whole IP TOS / IPv6 traffic class byte
    // Traffic class negotiation (gid/traffic_class.hpp): how strongly this side holds
    // traffic_class and priority (gid::TcSource: 0 builtin default, 1 device default, 2 configured).
    // The CM REQ and REP carry each side's class and both directions of a connection use
    // gid::negotiate_traffic_class of the two: a connection whose ToS differs from the socket's
    // sends it per packet. The priority is only advertised (a UDP socket cannot tag per packet).
    uint8_t traffic_class_source = 0;
    uint8_t priority = 0;
    uint8_t priority_source = 0;
    uint8_t cnp_traffic_class = 48 << 2;   // ToS of the CNPs we send (congestion notifications)
    // Congestion control of every RC QP (src/cc, sw/congestion.cpp): the mode (auto = dcqcn here:
    // CE marks read from each packet's IP header, CNPs, a pacer per QP) and its parameters.
    cc::CcConfig cc;
    double line_rate_bps = 100e9;      // the pacer's ceiling and DCQCN's initial rate (netdev speed)
    bool progress_thread = true;       // passive-target progress (see above)
    uint32_t idle_takeover_us = 500;
    FaultConfig faults;
    // Kernel offloads: UDP GSO on transmit (runs of equal-size packets to one peer go out as one
    // UDP_SEGMENT send; each segment's ICRC is computed for the IPv4 ID the kernel gives it:
    // 0, 1, 2, ...) and UDP GRO on receive (coalesced datagrams are split at the segment size,
    // each segment verified on its own). Silently off when the kernel lacks them, and GSO is off
    // while fault injection is active.
    bool gso = true;
    bool gro = true;
    // Packet trace (sw/pcap_writer.hpp): every packet sent and received, as Ethernet/IP/UDP
    // frames, into this pcap file; %p is replaced by the pid, %d by the UDP port. Empty: off.
    // Writing stops (logged once) when the file reaches pcap_limit bytes (0: unbounded).
    std::string pcap_path;
    uint64_t pcap_limit = 64ull << 20;
    // QPs created by incoming connection requests (unauthenticated: anyone can send a REQ) at
    // most; a REQ beyond is answered with a REJ (counter cm_refused).
    uint32_t max_passive_qps = 65536;
    // A passive QP is freed when its peer destroys its side (DREQ). When no DREQ ever comes (the
    // process was killed, its QP failed before it was destroyed, the REQ was forged) the device
    // asks after passive_idle_ms without a packet from the peer (CM PROBE, cm.hpp) and frees the
    // QP on a DREQ answer, or passive_reap_ms after the first PROBE without any answer (counter
    // cm_reaped; 0: one PROBE's interval). A passive QP that failed goes after passive_idle_ms
    // without asking. A peer answers while its owner computes only with its progress thread.
    // passive_idle_ms 0: never ask, never free.
    uint32_t passive_idle_ms = 60'000;
    uint32_t passive_reap_ms = 600'000;
};

// Counters of one device (monotonic).
struct DeviceStats {
    uint64_t tx_packets, rx_packets, tx_bytes, rx_bytes;
    uint64_t retransmits, duplicates, seq_errors, naks_sent, naks_received;
    uint64_t rnr_naks, timeouts, icrc_errors, malformed, dropped_unknown_qp;
    uint64_t faults_dropped, faults_duplicated, faults_reordered, faults_corrupted;
    uint64_t faults_truncated, faults_acks_dropped, faults_delayed;
    uint64_t gso_sends, gro_datagrams;   // offload use: multi-segment sends / coalesced receives
    uint64_t rx_nonzero_ipv4_id;         // packets whose ICRC matched a nonzero IPv4 ID (GSO segments;
                                         // every packet of a ManualPeer that numbers them, e.g. rxe)
    // Congestion control: CE-marked packets received, CNPs sent / received, CE marks on READ
    // responses answered locally (the reader paces its own READs), CE marks the fault injector
    // set, and times a QP's pacer or window held a packet back.
    uint64_t ce_received, cnps_sent, cnps_received, cnps_local, faults_ce, cc_paced;
    uint64_t reads_capped;   // READ requests held back by MAX_RD_BYTES
    // Packets whose payload the kernel read in place (gather send, no copy into a tx slot), and
    // gathered READ responses dropped because their region was deregistered before the send.
    uint64_t tx_gathered, tx_region_gone;
    // Responses not sent because max_resp_jobs waited on their QP already (a requester beyond
    // its READ/atomic limit, or a flood of bad requests behind a long READ): as if lost.
    uint64_t resp_dropped;
    // NAKs by type (naks_sent / naks_received count them all, RNR NAKs included).
    uint64_t naks_sent_seq, naks_sent_rnr, naks_sent_access, naks_sent_invalid;
    uint64_t naks_received_seq, naks_received_rnr, naks_received_access, naks_received_invalid;
    uint64_t cm_refused;   // connection requests rejected: max_passive_qps passive QPs exist
    uint64_t cm_probes;    // PROBEs sent for passive QPs whose peer was silent (passive_idle_ms)
    uint64_t cm_reaped;    // passive QPs freed without a DREQ: no answer to PROBEs, or failed
    uint64_t reasm_given_up;   // SENDs past reasm_deadline_ms given up while recv_budget was spent
};

// Protection domain: the memory regions peers may access remotely. UCX registers memory on its
// memory domain, not on an iface, so regions live here and every Device opened on the same Pd
// serves them. Thread-safe (the responder thread looks regions up concurrently).
class Pd : public RcPd {
public:
    static std::shared_ptr<Pd> create();
    // reg_mr/dereg_mr as in RcPd; rkeys are unguessable (random, never reused while
    // registered) and revoked by dereg.
};

// A QP connected by hand (connect_qp_manual) instead of through our CM: the parameters a verbs
// application exchanges out of band and gives ibv_modify_qp for RTR/RTS (ibv_rc_pingpong's
// QPN/PSN/GID), so a QP of a peer that does not speak our CM (kernel rxe, an RDMA NIC) can be the
// other end. Both sides must agree: each one's sq_psn is the other's rq_psn, and the MTUs match.
struct ManualPeer {
    WireAddr addr;            // peer IP (same family as the device) + the UDP port it receives
                              // RoCEv2 on: 4791 for rxe and NICs (and then our cfg.port is 4791 too)
    uint32_t qpn = 0;         // the peer's QPN: our packets' BTH DestQP (2 .. 2^24-1)
    uint32_t sq_psn = 0;      // first PSN we send (the peer's rq_psn), 24 bit
    uint32_t rq_psn = 0;      // first PSN the peer sends (its sq_psn): our expected PSN, 24 bit
    uint32_t mtu = 0;         // path MTU, must be the peer's (rxe: its port's active_mtu); 0 = cfg.mtu
    // rxe (and RDMA NICs) send from a per-QP entropy source port (rxe: 0xC000 | hash), not from
    // the port they receive on: accept the peer's packets from any UDP source port of its IP.
    bool any_source_port = true;
    // They also number their IPv4 packets (rxe: the kernel's per-destination IP ID counter), and
    // the ICRC covers the ID, which a UDP socket does not show: accept any ID that makes the ICRC
    // valid (a corrupted packet then passes with probability 2^-16 instead of ~2^-26; on a real
    // link the Ethernet FCS checks too). Without it every rxe packet counts as an icrc_error.
    bool any_ipv4_id = true;
};

// The RcDevice contract (common/rc_device.hpp) over a UDP socket. What it adds:
//   * QPNs are 24 bit, never 0 or 1. connect_qp goes through the device's own connection
//     manager (CM messages to the peer device's QP1, retransmitted until answered): the peer
//     creates a passive QP connected back to this one. connect_qp's unreachable: the address
//     family differs from the device's. connect_qp_manual connects without it (ManualPeer).
//   * destroy_qp tells the peer (of a CM-connected QP). A passive QP (created for a peer's connect) is freed by the
//     device itself when its peer destroys its side; an active QP whose peer went away stays in
//     error until destroyed.
//   * A remote error completes every outstanding operation of the QP with that status.
class Device : public RcDevice {
public:
    // Binds the UDP socket. Errors: no_device (address not local / unparsable), busy (every
    // port of cfg.ports bound), io_error, invalid_param (bad mtu etc.).
    static Status open(const DeviceConfig& cfg, std::shared_ptr<Pd> pd, std::unique_ptr<Device>& out);

    // Connects a QP in reset by hand (no CM messages, see ManualPeer): it is in rts on return and
    // the peer's QP must be in RTR before our first packet reaches it. destroy_qp then tells the
    // peer nothing (nor do DREQs from it apply). Errors: invalid_param (unknown QP, not in reset,
    // QPN/PSN out of range, bad MTU, port 0), unreachable (address family differs).
    virtual Status connect_qp_manual(uint32_t qpn, const ManualPeer& peer) = 0;

    virtual const DeviceConfig& config() const = 0;
    virtual DeviceStats stats() const = 0;
};

} // namespace roce::sw
