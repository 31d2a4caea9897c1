// Userspace RoCEv2 device: RC queue pairs speaking real RoCEv2 packets (BTH/RETH/AETH/...,
// ICRC) over a UDP socket, so it runs on any Linux host without an RDMA NIC.
//
// This header is the contract between the core (src/sw) and the UCX glue (uct/). It knows
// nothing of UCX. Threading model:
//   * Every public method is thread-safe (one recursive mutex per device).
//   * The owner thread (UCX's progress) calls progress(), then drains poll_completions() and
//     poll_recv(). Completions and received messages are only ever handed out there.
//   * Passive target: a background thread runs the protocol (RDMA READ/WRITE/atomic responses,
//     ACKs, retransmission timers) whenever the owner has not called progress() for
//     `idle_takeover_us`, so one-sided operations aimed at a process complete while that process
//     computes outside MPI. Messages (SENDs) it receives are queued for the owner.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <sys/uio.h>

#include "common/status.hpp"

namespace roce::sw {

// Address of a device on the wire: IP (v4 or v6) + UDP port. Fixed size so it packs into a
// UCX device/iface address.
struct WireAddr {
    uint8_t family = 0;   // AF_INET or AF_INET6
    uint8_t ip[16] = {};  // IPv4 in the first 4 bytes
    uint16_t port = 0;    // host byte order
    bool operator==(const WireAddr&) const = default;
    std::string to_string() const;
};

// Packet-level fault injection, off by default. Probabilities in [0,1], applied on transmit.
struct FaultConfig {
    double drop = 0;       // drop a packet
    double duplicate = 0;  // send it twice
    double reorder = 0;    // hold it back and send it after the next one
    double corrupt = 0;    // flip a payload bit (the receiver's ICRC check must drop it)
    uint64_t seed = 1;
    bool any() const { return drop > 0 || duplicate > 0 || reorder > 0 || corrupt > 0; }
};

struct DeviceConfig {
    std::string ip = "127.0.0.1";      // a local address (netdev address); IPv4 or IPv6 literal
    uint16_t port = 0;                 // UDP port; 0 = ephemeral (several processes per host)
    uint32_t mtu = 4096;               // path MTU: 256, 512, 1024, 2048 or 4096
    uint32_t sq_depth = 256;           // outstanding work requests per QP before no_resource
    uint32_t max_rd_atomic = 16;       // outstanding RDMA READ/atomic requests per QP
    uint32_t retransmit_timeout_us = 2000;  // first retransmission timeout (doubles per retry)
    uint32_t retry_count = 7;          // retransmissions before the QP fails with timeout
    uint32_t rnr_retry = 7;            // 7 = infinite, as in IB
    uint32_t ack_coalesce = 16;        // ACK at most every N packets (plus on AckReq / idle)
    uint32_t max_recv_msg = 65536;     // largest SEND message the responder reassembles
    uint32_t recv_queue_len = 1024;    // undelivered messages before the responder sends RNR NAK
    uint8_t traffic_class = 0;         // whole IP TOS / IPv6 traffic class byte
    bool progress_thread = true;       // passive-target progress (see above)
    uint32_t idle_takeover_us = 200;
    FaultConfig faults;
    // Kernel offloads: UDP GSO on transmit (runs of equal-size packets to one peer go out as one
    // UDP_SEGMENT send; each segment's ICRC is computed for the IPv4 ID the kernel gives it:
    // 0, 1, 2, ...) and UDP GRO on receive (coalesced datagrams are split at the segment size,
    // each segment verified on its own). Silently off when the kernel lacks them, and GSO is off
    // while fault injection is active.
    bool gso = true;
    bool gro = true;
};

// Memory region access rights (bit mask), as in ibv_access_flags.
enum Access : unsigned {
    access_local_write = 1u << 0,
    access_remote_write = 1u << 1,
    access_remote_read = 1u << 2,
    access_remote_atomic = 1u << 3,
    access_all = 0xf,
};

struct MrKeys {
    uint32_t lkey = 0;
    uint32_t rkey = 0;
};

enum class OpKind : uint8_t { send, write, read, fetch_add, cmp_swap };

struct Completion {
    uint64_t wr_id;
    uint32_t qpn;
    OpKind op;
    Status status;    // ok, remote_access, remote_invalid, timeout, canceled
};

// A received SEND message. `data` is valid only during the poll_recv callback.
struct RecvMessage {
    uint32_t qpn;          // local QP it arrived on
    const uint8_t* data;
    size_t len;
    bool has_imm;
    uint32_t imm;
};

// Counters of one device (monotonic).
struct DeviceStats {
    uint64_t tx_packets, rx_packets, tx_bytes, rx_bytes;
    uint64_t retransmits, duplicates, seq_errors, naks_sent, naks_received;
    uint64_t rnr_naks, timeouts, icrc_errors, malformed, dropped_unknown_qp;
    uint64_t faults_dropped, faults_duplicated, faults_reordered, faults_corrupted;
    uint64_t gso_sends, gro_datagrams;   // offload use: multi-segment sends / coalesced receives
    uint64_t rx_nonzero_ipv4_id;         // packets whose ICRC matched a nonzero IPv4 ID (GSO segments)
};

// Connection events, reported to the owner through poll_recv's companion callback.
enum class QpState : uint8_t { reset, connecting, rts, error };

// Protection domain: the memory regions peers may access remotely. UCX registers memory on its
// memory domain, not on an iface, so regions live here and every Device opened on the same Pd
// serves them. Thread-safe (the responder thread looks regions up concurrently).
class Pd {
public:
    virtual ~Pd() = default;
    static std::shared_ptr<Pd> create();
    // rkeys are unguessable (random, never reused while registered) and revoked by dereg.
    // Errors: invalid_param (null/empty range, unknown access bits).
    virtual Status reg_mr(void* addr, size_t len, unsigned access, MrKeys& out) = 0;
    // Errors: invalid_param (unknown lkey).
    virtual Status dereg_mr(uint32_t lkey) = 0;
};

class Device {
public:
    virtual ~Device() = default;

    // Binds the UDP socket. Errors: no_device (address not local / unparsable), io_error,
    // invalid_param (bad mtu etc.).
    static Status open(const DeviceConfig& cfg, std::shared_ptr<Pd> pd, std::unique_ptr<Device>& out);

    virtual const WireAddr& address() const = 0;
    virtual const DeviceConfig& config() const = 0;
    virtual DeviceStats stats() const = 0;

    // --- queue pairs
    // Creates an RC QP in reset state; returns its QPN (24 bit, never 0 or 1).
    virtual Status create_qp(uint32_t& qpn) = 0;
    // Active connection setup through the device's own connection manager (CM messages to the
    // peer device's QP1, retransmitted until answered): the peer creates a passive QP connected
    // back to this one. Operations may be posted at once; they go out when the peer answers.
    // If the peer never answers the QP fails (completions with Status::timeout).
    // Errors: invalid_param (unknown QP, not in reset, port 0), unreachable (address family
    // differs from the device's).
    virtual Status connect_qp(uint32_t qpn, const WireAddr& peer) = 0;
    // Flushes outstanding operations as canceled, then frees the QP (its peer is told).
    // A passive QP (created for a peer's connect) is freed by the device itself when its peer
    // destroys its side; an active QP whose peer went away stays in error until destroyed.
    virtual Status destroy_qp(uint32_t qpn) = 0;
    virtual QpState qp_state(uint32_t qpn) const = 0;

    // --- work requests. wr_id == 0: no completion is reported (the op still counts for
    // outstanding()). All return no_resource when the send queue is full, invalid_param for an
    // unknown QP or one never connected, canceled (and no completion) on a QP in error.
    // SEND: the iovecs are copied before return (bcopy semantics).
    virtual Status post_send(uint32_t qpn, uint64_t wr_id, const iovec* iov, size_t iovcnt,
                             const uint32_t* imm = nullptr) = 0;
    // RDMA WRITE from `local` (copied before return when `copy` is set, else it must stay
    // valid until the completion).
    virtual Status post_write(uint32_t qpn, uint64_t wr_id, const void* local, size_t len,
                              uint64_t remote_va, uint32_t rkey, bool copy) = 0;
    // RDMA READ into `local` (must stay valid until the completion).
    virtual Status post_read(uint32_t qpn, uint64_t wr_id, void* local, size_t len,
                             uint64_t remote_va, uint32_t rkey) = 0;
    // 64-bit atomics; the original remote value is stored to *result (if non-null) before the
    // completion is reported. remote_va must be 8-byte aligned.
    virtual Status post_fetch_add(uint32_t qpn, uint64_t wr_id, uint64_t remote_va, uint32_t rkey,
                                  uint64_t add, uint64_t* result) = 0;
    virtual Status post_cmp_swap(uint32_t qpn, uint64_t wr_id, uint64_t remote_va, uint32_t rkey,
                                 uint64_t compare, uint64_t swap, uint64_t* result) = 0;

    // Operations posted on the QP (or on all QPs when qpn == 0) not yet completed.
    virtual size_t outstanding(uint32_t qpn) const = 0;

    // --- progress (owner thread)
    // Receives and processes packets, runs timers. Returns the number of events produced.
    virtual unsigned progress() = 0;
    virtual size_t poll_completions(Completion* out, size_t max) = 0;
    // Hands received messages, in arrival order per QP, to fn; returns how many.
    virtual size_t poll_recv(const std::function<void(const RecvMessage&)>& fn, size_t max) = 0;
    // A file descriptor that becomes readable when progress() has work (for UCX wakeup).
    virtual int event_fd() const = 0;
};

} // namespace roce::sw
