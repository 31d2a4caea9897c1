// Verbs device backend: the RcDevice contract (common/rc_device.hpp, which the UCX glue calls) over a
// real RDMA device through libibverbs, with connections set up by librdmacm, so rc_roce runs on an
// HCA or on kernel soft-RoCE (rdma_rxe) with the same semantics as on the userspace device.
//
// It knows nothing of UCX. The value types (WireAddr, MrKeys, Completion, RecvMessage, OpKind,
// QpState, Access) are the contract's, shared with the userspace device.
//
// Differences from sw::Device (the rest is identical):
//   * Pd::open(device name) instead of Pd::create(): a protection domain belongs to one RDMA
//     device. Device::open takes the device name and port in DeviceConfig; pd may be null (the
//     device then opens its own).
//   * address(): the IP of the GID the policy chooses as the interface default (gid_choice.hpp)
//     + the TCP-space port of the device's rdma_cm listener (ephemeral unless cm_port is set). A
//     connection needs only that. Towards each peer the active side chooses its source GID again
//     (the entry that reaches that peer), binds its address in rdma_resolve_addr and sets its
//     index as the QP's sgid_index.
//   * Traffic class: each side resolves its own (gid/traffic_class.hpp: TRAFFIC_CLASS/DSCP/ECN/
//     PRIORITY, else the device's tc/<port>/traffic_class, else DSCP 26 + ECT(0)) and carries it
//     in the rdma_cm private data (REQ and REP); both QPs of a connection use
//     negotiate_traffic_class of the two (ToS as the GRH traffic class, priority as the SL), so
//     both directions are in the same class even when only one side configured it.
//   * Local buffers of zero-copy operations (post_write with copy=false, post_read) are found by
//     address among the Pd's registered regions (no lkey parameter). An unregistered buffer still
//     works: it is registered for the operation and deregistered at its completion (slow path,
//     counted in stats().temp_regs).
//   * A remote error (remote_access, remote_invalid, timeout) completes the failing operation with
//     that status and the QP's later operations with canceled (verbs flush semantics); the
//     userspace device reports the same status for all of them.
//   * Passive target needs no progress thread: the HCA answers RDMA READ/WRITE/atomics, receive
//     buffers are pre-posted on a shared receive queue. A background thread serves only rdma_cm
//     (accepting connections, disconnects), so a process computing outside MPI still accepts.
//   * stats() returns verbs::DeviceStats (different counters; packets are the HCA's business).
//   * Fault injection, GSO/GRO, ack_coalesce, retransmit timers are the HCA's: not configurable.
//
// UD (for a UD transport on verbs): verbs/ud.hpp, UdQp, not part of the RcDevice contract.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <sys/uio.h>

#include "common/status.hpp"
#include "common/rc_device.hpp"
#include "cc/config.hpp"
#include "gid/config.hpp"

namespace roce::verbs {

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

struct DeviceConfig {
    std::string dev_name = "rxe0";     // RDMA device (ibv_get_device_name)
    uint8_t port = 1;                  // its port
    // GID and traffic-class settings (UCX_RC_ROCE_GID_INDEX, SUBNETS, TRAFFIC_CLASS, ... see
    // gid/config.hpp), applied by the policy in src/gid: the local GID is chosen per peer.
    gid::GidConfig gid;
    std::string sysroot = "/";         // where the policy reads sysfs and the netdevs (tests: a tree)
    uint16_t cm_port = 0;              // rdma_cm listener port; 0 = ephemeral
    uint32_t mtu = 4096;               // cap on the path MTU (the route's active MTU may be lower)
    uint32_t sq_depth = 256;           // outstanding work requests per QP before no_resource
    uint32_t max_rd_atomic = 16;       // outstanding READ/atomic per QP (clamped to the device)
    uint32_t retry_count = 7;          // transport retries (IB: 0..7)
    uint32_t rnr_retry = 7;            // 7 = infinite, as in IB
    uint8_t ack_timeout = 14;          // local ACK timeout, 4.096 us * 2^n (14: ~67 ms)
    uint8_t min_rnr_timer = 12;        // responder's RNR NAK timer code (12: 0.64 ms)
    uint32_t max_recv_msg = 65536;     // largest SEND message (size of each receive buffer)
    uint32_t recv_buffers = 128;       // receive buffers pre-posted on the shared receive queue
    uint32_t max_inline = 128;         // SENDs/WRITEs up to this size go inline (if the QP allows)
    uint32_t signal_every = 64;        // completion moderation: unsignaled WRs between signaled ones
    uint32_t bounce_slots = 512;       // registered bounce buffers for copy semantics
    uint32_t bounce_size = 16384;      // bytes each (bigger copies register a temporary buffer)
    uint32_t cq_size = 8192;           // send CQ entries = cap on WRs in flight over all QPs
    uint64_t first_seq = 1;            // tests: each QP's first work-request sequence number
    uint64_t fail_post_seq = 0;        // tests: ibv_post_send is not called for the work request
                                       // with this sequence number, it fails as if refused (0: none)
    uint32_t connect_timeout_ms = 2000;   // address/route resolution timeout (each)
    // QPs created by incoming connection requests (unauthenticated: anyone who reaches the rdma_cm
    // port can send one) at most, on this listener; a request beyond is rejected (counter
    // cm_refused). Clamped to half the device's max_qp, which every process and device instance
    // on the port shares: one flooded listener leaves room for the others' own connections.
    uint32_t max_passive_qps = 65536;
    // Congestion control of the QPs' requests (verbs/congestion.cpp): delay mode holds work
    // requests in software while the QP's window is full; MAX_RD_BYTES caps READ bytes in flight
    // in every mode. dcqcn is the NIC's business here (firmware), not ours.
    cc::CcConfig cc;
    double line_rate_bps = 0;          // the pacer's ceiling; 0 = the port's rate
};

struct DeviceStats {
    uint64_t sends, writes, reads, atomics;          // posted work requests
    uint64_t inline_sends, bounce_copies, temp_regs; // how the payload was handed over
    uint64_t signaled, unsignaled;                   // completion moderation
    uint64_t untracked_sends;                        // lazy inline SENDs posted without a record
    uint64_t send_cqes, recv_cqes, recv_messages, recv_errors;
    uint64_t cm_connects, cm_established, cm_accepted, cm_rejected, cm_errors, cm_disconnects;
    uint64_t wr_errors;                              // error completions other than flushes
    uint64_t passive_freed;                          // passive QPs freed after their peer left
    uint64_t cm_refused;                             // requests rejected: max_passive_qps exist
};

class Pd : public RcPd {
public:
    // Opens the named RDMA device (through librdmacm's device list, so rdma_cm ids and our QPs
    // share one ibv_context) and allocates a protection domain. Errors: no_device (no such device,
    // or no RDMA at all; logged with the reason), io_error.
    static Status open(const std::string& dev_name, std::shared_ptr<Pd>& out);
    virtual const std::string& dev_name() const = 0;
    // reg_mr/dereg_mr as in RcPd; rkeys come from the HCA (ibv_reg_mr).
};

class Device : public RcDevice {
public:
    // Opens cfg.dev_name/cfg.port, selects the local GID (its IP becomes the device address),
    // starts the rdma_cm listener. pd: a Pd of the same device, or null (opens one).
    // Errors: no_device (device absent, port down or without a usable RoCE GID), invalid_param,
    // io_error.
    static Status open(const DeviceConfig& cfg, std::shared_ptr<Pd> pd, std::unique_ptr<Device>& out);

    virtual const DeviceConfig& config() const = 0;
    virtual DeviceStats stats() const = 0;
    virtual Pd& pd() const = 0;
    // The rest is RcDevice (common/rc_device.hpp). QPNs are the HCA's. connect_qp: rdma_cm to
    // the peer's IP + listener port; returns unreachable at once (logged with the reasons) when no
    // GID entry the settings allow reaches the peer; operations posted meanwhile are queued and go
    // out when the connection is established. Rejected (nobody listens) -> QP error, queued ops complete with
    // unreachable; resolution/CM timeout -> timeout. poll_recv reposts receive buffers after fn
    // returns. event_fd: an epoll fd over the completion channel and the CM thread's notify
    // eventfd; the CQs are armed by the progress() after arm_events().
};

} // namespace roce::verbs
