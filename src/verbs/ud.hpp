// Unreliable datagram QP on a verbs device: the building block of a UD transport (ud_roce on
// verbs). Independent of Device (own CQ, own receive queue); same conventions: copy semantics for
// sends (bounce buffer), owner-thread progress, completions and received messages polled.
// Not thread-safe: its one user, ud::Transport, calls it under its own lock only (a second lock
// here cost atomics on every busy-poll iteration, slow in an emulated guest).
//
// GRH handling: every UD receive buffer starts with the 40-byte GRH area the HCA fills. On RoCE v2
// over IPv4 it holds the IPv4 header in its last 20 bytes (the first 20 are undefined); on RoCE v2
// over IPv6 (and v1) it is the GRH itself. The source GID of a message is taken from whichever it
// is (IPv4 source -> ::ffff:a.b.c.d), the payload starts after the 40 bytes.
// Address handles are created on first use per destination GID and cached. Small sends go inline
// (IBV_SEND_INLINE), gathered from the caller's pieces: on rxe that spares the kernel an lkey
// lookup and a copy through the MR's page map per packet (ud_roce's ACKs and short AMs are all
// small), and us the copy into a slot. Sends are moderated (UdConfig::signal_every): a completion
// is requested only for every N-th send and for those whose wr_id is reported.
// poll_recv() reads the CQ itself and hands messages out as it finds them; progress() queues
// them instead (and retires sends), for a caller that polls completions first.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <memory>
#include <array>
#include <deque>
#include <vector>

#include "common/function_ref.hpp"
#include "verbs/device.hpp"
#include "gid/traffic_class.hpp"
#include "verbs/gid_choice.hpp"

namespace roce::verbs {

struct UdConfig {
    std::string dev_name = "rxe0";
    uint8_t port = 1;
    // The GID policy (UCX_UD_ROCE_GID_* on ud_roce) picks the QP's one entry: the interface
    // default, as rc_roce's device does. One entry, not one per peer: peers know this QP by the
    // source GID of its datagrams, which must be the one its address advertises.
    gid::GidConfig gid;
    uint32_t qkey = 0x1ee7a330;
    uint32_t sq_depth = 256;
    uint32_t recv_buffers = 256;
    uint32_t max_inline = 128;     // sends up to this size go inline (if the QP allows), as DeviceConfig
    uint32_t signal_every = 16;    // one send in N asks for a completion (it retires the earlier ones)
    uint8_t hop_limit = 64;
    std::string sysroot = "/";     // where the GID table and netdevs are read (tests: a fixture tree)
    // Address handles this QP keeps (one per destination GID and class), least recently used
    // evicted beyond: a device's table is shared by every process on the node (rxe: 16,382 in
    // all). 0: the device's max_ah / 4, at most 1,024.
    uint32_t max_ah = 0;
};

struct UdDest {
    uint8_t gid[16] = {};
    uint32_t qpn = 0;
    bool operator==(const UdDest&) const = default;
};

struct UdMessage {
    UdDest src;          // source GID (from the GRH / IPv4 header) and QPN
    const uint8_t* data; // valid during the callback only
    size_t len;
    bool has_imm;
    uint32_t imm;
};

class UdQp {
public:
    virtual ~UdQp() = default;
    // Errors: no_device (no such device/port, no usable GID), invalid_param (a GID setting
    // impossible for the port), unsupported (not a RoCE port), io_error.
    static Status open(const UdConfig& cfg, std::shared_ptr<Pd> pd, std::unique_ptr<UdQp>& out);
    virtual uint32_t qpn() const = 0;
    virtual const GidChoice& gid() const = 0;
    // Our class: the GID settings', else the port's tc/<port>/traffic_class. Datagrams carry it
    // unless post_send names another (class_id). A class's priority is the address handles' SL
    // (hardware RoCE NICs: the PCP; rxe ignores it).
    virtual const gid::TrafficClass& traffic_class() const = 0;
    // An id for sending in class `tc` (post_send's cls): 0 is traffic_class(); a QP keeps up to
    // max_classes besides its own (peers' adverts choose them), later ones get 0 (one warning).
    virtual uint8_t class_id(const gid::TrafficClass& tc) = 0;
    static constexpr size_t max_classes = 16;
    virtual UdDest address() const = 0;     // our GID + QPN
    virtual uint32_t max_msg() const = 0;   // the port's active MTU
    // Copies the payload before return. Errors: invalid_param (larger than max_msg),
    // no_resource (send queue full).
    virtual Status post_send(uint64_t wr_id, const UdDest& dest, const iovec* iov, size_t iovcnt,
                             const uint32_t* imm = nullptr, uint8_t cls = 0) = 0;
    virtual unsigned progress() = 0;
    // Readable once a completion arrives after arm() (a completion channel; progress() drains it).
    virtual int event_fd() const = 0;
    virtual void arm() = 0;
    virtual size_t poll_completions(Completion* out, size_t max) = 0;   // op = send
    virtual size_t poll_recv(FunctionRef<void(const UdMessage&)> fn, size_t max) = 0;
    // Error completions so far (flushes of a QP being destroyed excluded): each a datagram lost.
    struct Errors {
        uint64_t send = 0, recv = 0;
    };
    virtual Errors errors() const = 0;
    // Address handles held now, the cap, and how many were evicted to stay under it (or because
    // the device refused a new one while we held others).
    struct AhStats {
        size_t cached = 0, cap = 0;
        uint64_t evicted = 0;
    };
    virtual AhStats ah_stats() const = 0;
};

// Source GID of a received UD message from its 40-byte GRH area (see above).
void ud_source_gid(const uint8_t* grh_area, uint8_t gid[16]);

} // namespace roce::verbs
