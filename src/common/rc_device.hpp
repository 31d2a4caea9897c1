// The contract between the transports' glue (uct/) and a device backend: RC queue pairs with
// SEND/WRITE/READ/atomics, memory regions, completions and received messages. Two backends
// implement it — the userspace RoCEv2 device (sw/device.hpp, RoCEv2 over a UDP socket) and the
// verbs device (verbs/device.hpp, libibverbs + librdmacm) — so the glue is written once.
// Each backend's header documents what its implementation adds or does differently (opening,
// configuration, counters); the semantics below hold for both.
//
// Threading: every method is thread-safe. The owner thread calls progress(), then drains
// poll_completions() and poll_recv(); completions and messages are only handed out there.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <string>
#include <sys/uio.h>
#include <utility>
#include <vector>

#include "common/status.hpp"

namespace roce {

// Address of a device on the wire: IP (v4 or v6) + port (UDP port of the userspace device,
// rdma_cm listener port of a verbs device). Fixed size so it packs into a UCX address.
struct WireAddr {
    uint8_t family = 0;   // AF_INET or AF_INET6
    uint8_t ip[16] = {};  // IPv4 in the first 4 bytes
    uint16_t port = 0;    // host byte order
    // (Not defaulted: that compares the address byte by byte; this runs per received datagram.)
    bool operator==(const WireAddr& o) const {
        return family == o.family && port == o.port && std::memcmp(ip, o.ip, sizeof(ip)) == 0;
    }
    std::string to_string() const;
    bool is_loopback() const;   // 127.0.0.0/8 or ::1
};

// Memory region access rights (bit mask), as in ibv_access_flags.
enum Access : unsigned {
    access_local_write = 1u << 0,
    access_remote_write = 1u << 1,
    access_remote_read = 1u << 2,
    access_remote_atomic = 1u << 3,
    access_all = 0xf,
    // Not an access right: the region is a registration cache's, kept registered after its users
    // released it, so address lookups for a local buffer (verbs' find_lkey) must not return it —
    // its pages may have been unmapped since (the cache drops it only at its next operation).
    // The verbs backend only; the userspace device refuses it.
    access_no_lookup = 1u << 4,
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
    Status status;    // ok, remote_access, remote_invalid, timeout, unreachable, canceled
    // Work requests this completion stands for: lazy ones (wr_id_lazy) that complete together
    // with the same wr_id, op and status may be reported as one (the verbs device: a signaled
    // CQE completes up to signal_every of them at once); always 1 otherwise.
    uint32_t count = 1;
};

// A received SEND message. `data` is valid only during the poll_recv callback.
struct RecvMessage {
    uint32_t qpn;          // local QP it arrived on
    const uint8_t* data;
    size_t len;
    bool has_imm;
    uint32_t imm;
};

enum class QpState : uint8_t { reset, connecting, rts, error };
const char* to_string(QpState s);   // "reset", "connecting", "rts", "error"

// Protection domain: the memory regions peers may access remotely.
class RcPd {
public:
    virtual ~RcPd() = default;
    // Errors: invalid_param (null/empty range, unknown access bits), no_memory/io_error (the
    // device refused the registration).
    virtual Status reg_mr(void* addr, size_t len, unsigned access, MrKeys& out) = 0;
    // Errors: invalid_param (unknown lkey).
    virtual Status dereg_mr(uint32_t lkey) = 0;
};

inline constexpr uint64_t wr_id_lazy = uint64_t{1} << 63;   // see RcDevice's work requests

class RcDevice {
public:
    virtual ~RcDevice() = default;

    virtual const WireAddr& address() const = 0;
    // The device's counters (monotonic), in a fixed order, named as in the backend's stats
    // struct: for logs, the live counter files and roce_doctor.
    using Counters = std::vector<std::pair<std::string, uint64_t>>;
    virtual Counters counters() const = 0;
    // counters() as "name=value name=value ...", for one log line.
    std::string stats_text() const;
    // Per-QP counters (what went to and came from one peer QP) and gauges (current CC rate,
    // window, RTT: named *_now), for the live counter files; peers are summed by roce_doctor.
    // Destroyed QPs are kept as one entry per peer (closed, qpn 0) with the sums of their
    // counters, so a peer's totals do not shrink when connections go away.
    struct QpCounters {
        uint32_t qpn = 0;
        uint32_t dest_qpn = 0;
        std::string peer;          // the peer device's WireAddr::to_string()
        QpState state = QpState::reset;
        Counters counters;
        bool closed = false;
    };
    virtual std::vector<QpCounters> qp_counters() const = 0;
    // The closed entries: the peer and its port are chosen remotely (a client reconnecting
    // from new ports, a stranger's connection requests), so beyond max_closed_peers distinct
    // peers the sums go to one entry, closed_other_peer.
    static constexpr size_t max_closed_peers = 1024;
    static constexpr const char* closed_other_peer = "other";
    template <class Stats>
    static void add_closed(std::map<std::string, Stats>& by_peer, const WireAddr& peer, const Stats& st) {
        std::string key = peer.to_string();
        if (by_peer.size() >= max_closed_peers && !by_peer.contains(key))
            key = closed_other_peer;
        by_peer[key] += st;
    }

    // --- queue pairs
    // Creates an RC QP in reset state; returns its QPN.
    virtual Status create_qp(uint32_t& qpn) = 0;
    // Connects the QP to the peer device; operations may be posted at once and go out when the
    // connection is up. A peer that never answers fails the QP (completions with timeout).
    // Errors: invalid_param (unknown QP, not in reset, port 0), unreachable.
    virtual Status connect_qp(uint32_t qpn, const WireAddr& peer) = 0;
    // Flushes outstanding operations as canceled, then frees the QP.
    virtual Status destroy_qp(uint32_t qpn) = 0;
    // Puts the QP in the error state now, as a NIC's QP moved to ERR: outstanding operations
    // complete as canceled, nothing more is sent or answered (the peer hears of the disconnect as
    // at destroy_qp). For a caller that gives the connection up (UCT flush with CANCEL).
    virtual Status cancel_qp(uint32_t qpn) = 0;
    virtual QpState qp_state(uint32_t qpn) const = 0;

    // --- work requests. wr_id == 0: no completion is reported (the op still counts for
    // outstanding()). A wr_id with wr_id_lazy set tells the device nobody waits for this
    // completion (the caller only counts it off), so it may come late: the userspace device lets
    // the peer acknowledge such SENDs with a delayed ACK instead of one per message. All return
    // no_resource when the send queue is full, invalid_param for an unknown QP or one never
    // connected, canceled (and no completion) on a QP in error.
    // SEND: the iovecs are copied before return (bcopy semantics).
    virtual Status post_send(uint32_t qpn, uint64_t wr_id, const iovec* iov, size_t iovcnt,
                             const uint32_t* imm = nullptr) = 0;
    // RDMA WRITE from `local` (copied before return when `copy` is set, else it must stay
    // valid until the completion). `lkey`: the key of the caller's registration covering `local`
    // (a verbs device then needs no lookup; 0: it finds one by address or registers the buffer
    // for the operation). The userspace device needs none.
    virtual Status post_write(uint32_t qpn, uint64_t wr_id, const void* local, size_t len,
                              uint64_t remote_va, uint32_t rkey, bool copy, uint32_t lkey = 0) = 0;
    // RDMA READ into `local` (must stay valid until the completion); `lkey` as for post_write.
    virtual Status post_read(uint32_t qpn, uint64_t wr_id, void* local, size_t len,
                             uint64_t remote_va, uint32_t rkey, uint32_t lkey = 0) = 0;
    // 64-bit atomics; the original remote value is stored to *result (if non-null) before the
    // completion is reported. remote_va must be 8-byte aligned.
    virtual Status post_fetch_add(uint32_t qpn, uint64_t wr_id, uint64_t remote_va, uint32_t rkey,
                                  uint64_t add, uint64_t* result) = 0;
    virtual Status post_cmp_swap(uint32_t qpn, uint64_t wr_id, uint64_t remote_va, uint32_t rkey,
                                 uint64_t compare, uint64_t swap, uint64_t* result) = 0;

    // Operations posted on the QP (or on all QPs when qpn == 0) not yet completed.
    virtual size_t outstanding(uint32_t qpn) const = 0;
    // The caller now waits for the lazy operations (wr_id_lazy) of the QP (of all QPs when
    // qpn == 0), e.g. for a flush: until this call, a device may hold their completions back
    // until a later operation on the QP completes (the verbs device posts them unsignaled, as
    // UCX's rc_verbs does); from now on it completes them without more posts on the QP.
    virtual void complete_lazy(uint32_t qpn) { (void)qpn; }

    // --- progress (owner thread)
    // Processes packets / completion queues and timers. Returns the number of events produced.
    virtual unsigned progress() = 0;
    virtual size_t poll_completions(Completion* out, size_t max) = 0;
    // Hands received messages, in arrival order per QP, to fn; returns how many.
    virtual size_t poll_recv(const std::function<void(const RecvMessage&)>& fn, size_t max) = 0;
    // One progress round of the owner: progress(), then every queued completion to
    // sink.completion(), then up to max_recv messages to sink.message() (as poll_recv). Returns
    // progress()'s count plus the completions and messages handed out. The sink may post, query
    // and destroy QPs, but must not start another round. The default is exactly those calls; a
    // backend with a lock takes it once for the whole round instead of once per call (verbs:
    // measured in the rxe guest, the lock taken 6 times per ping-pong iteration was ~20% of
    // rc_roce's instructions). A sink, not two std::functions: built per call at no cost.
    struct ProgressSink {
        virtual void completion(const Completion& c) = 0;
        virtual void message(const RecvMessage& m) = 0;
    protected:
        ~ProgressSink() = default;
    };
    virtual unsigned progress_round(ProgressSink& sink, size_t max_recv);
    // A file descriptor that becomes readable when progress() has work (for UCX wakeup). Before
    // waiting on it call arm_events(), then progress() (a verbs device arms its CQs there).
    virtual int event_fd() const = 0;
    // The owner is about to wait on event_fd(): the next progress() makes sure the fd becomes
    // readable on the next completion or message. Arming costs system calls per arm on some
    // devices (rxe), so it is done only when asked — UCX's event_arm asks; UCP's busy polling,
    // which took the fd at worker creation, does not pay for it.
    virtual void arm_events() {}
};

} // namespace roce
