// The device implementation, one file per part:
//   device.cpp     open/close, public API (one recursive mutex), QP table, completion and receive
//                  queues, passive-target thread
//   datapath.cpp   progress loop: recvmmsg (+GRO split) -> parse/ICRC -> dispatch; coalesced
//                  ACKs; requesters; timers; sendmmsg (+GSO, per-segment ICRC; fault injection)
//   requester.cpp  WR -> packets, PSNs, window (cwnd), go-back-N cursor
//   completer.cpp  ACK/NAK/RNR/READ response/atomic ACK -> in-order completions, RTT/RTO
//   responder.cpp  inbound requests: PSN check, execute, NAK, replay of READ/atomic duplicates
//   cm.cpp         QP1 connection manager (REQ/REP/DREQ/REJ)
//   manual.cpp     connect_qp_manual: a QP connected from out-of-band parameters (rxe, NICs)
//   pd.cpp, udp_socket.cpp, fault.cpp: MR table, socket, fault injection
// No per-packet allocation: packets are built in place in tx slots and parsed in place in rx
// buffers; bcopy'd payloads and received messages use pooled buffers. Per message there is one
// copy on each side (user buffer -> tx slot, rx buffer -> MR or message buffer).
#pragma once

#include <algorithm>

#include <atomic>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "common/buffer_pool.hpp"
#include "common/clock.hpp"
#include "common/owner_watch.hpp"
#include "common/recursive_lock.hpp"
#include "sw/cm.hpp"
#include "sw/device.hpp"
#include "sw/fault.hpp"
#include "sw/gso_icrc.hpp"
#include "sw/pcap_writer.hpp"
#include "sw/pd.hpp"
#include "sw/qp.hpp"
#include "sw/class_sockets.hpp"
#include "sw/udp_socket.hpp"

namespace roce::sw {

inline constexpr size_t max_datagram = 4096 + 128;   // largest RoCE packet we build or accept
inline constexpr unsigned tx_batch = 64;
inline constexpr unsigned rx_batch = 64;
// The ICRC check cannot see the IPv4 ID; the ID-agnostic check accepts IDs below this (0 for
// single datagrams, 0,1,2.. for GSO segments) so a corrupted packet passes with p ~ 2^-26.
inline constexpr uint16_t max_plausible_ipv4_id = 64;
inline constexpr uint8_t wire_ecn_ce = 0x3;                 // ECN field (ToS bits 1..0) "congestion experienced"
inline constexpr uint64_t max_rto_ns = 1'000'000'000;   // the doubled retransmission timeout stops here

// Tests: SO_PRIORITY and ToS of the socket the QP's packets leave from ({-1, -1}: no such QP),
// and the device's sockets' descriptors (its own first, then the class sockets).
struct TxClass {
    int priority = -1;
    int tos = -1;
    int fd = -1;
};
TxClass qp_tx_class_for_test(Device& dev, uint32_t qpn);
std::vector<int> socket_fds_for_test(Device& dev);

class DeviceImpl final : public Device {
public:
    DeviceImpl(const DeviceConfig& cfg, std::shared_ptr<PdImpl> pd);
    ~DeviceImpl() override;
    Status init();

    const WireAddr& address() const override { return sock_.local(); }
    const DeviceConfig& config() const override { return cfg_; }
    DeviceStats stats() const override;
    std::vector<QpCounters> qp_counters() const override;
    Counters counters() const override;
    // Capacity of the buffers the pool keeps (take_buf/give_buf): one SEND message, at most 1 MiB.
    size_t pooled_buf_max() const {
        return std::max<size_t>(64u << 10, std::min<size_t>(cfg_.max_recv_msg, 1u << 20) + 64);
    }

    Status create_qp(uint32_t& qpn) override;
    Status connect_qp(uint32_t qpn, const WireAddr& peer) override;
    Status connect_qp_manual(uint32_t qpn, const ManualPeer& peer) override;
    Status destroy_qp(uint32_t qpn) override;
    Status cancel_qp(uint32_t qpn) override;
    QpState qp_state(uint32_t qpn) const override;

    Status post_send(uint32_t qpn, uint64_t wr_id, const iovec* iov, size_t iovcnt,
                     const uint32_t* imm) override;
    Status post_write(uint32_t qpn, uint64_t wr_id, const void* local, size_t len,
                      uint64_t remote_va, uint32_t rkey, bool copy, uint32_t lkey = 0) override;
    Status post_read(uint32_t qpn, uint64_t wr_id, void* local, size_t len, uint64_t remote_va,
                     uint32_t rkey, uint32_t lkey = 0) override;
    Status post_fetch_add(uint32_t qpn, uint64_t wr_id, uint64_t remote_va, uint32_t rkey,
                          uint64_t add, uint64_t* result) override;
    Status post_cmp_swap(uint32_t qpn, uint64_t wr_id, uint64_t remote_va, uint32_t rkey,
                         uint64_t compare, uint64_t swap, uint64_t* result) override;
    size_t outstanding(uint32_t qpn) const override;

    unsigned progress() override;
    size_t poll_completions(Completion* out, size_t max) override;
    size_t poll_recv(const std::function<void(const RecvMessage&)>& fn, size_t max) override;
    unsigned progress_round(ProgressSink& sink, size_t max_recv) override;
    int event_fd() const override { return epoll_fd_; }
    // The next owner progress reads the socket until it is empty: a single read (recv_batch)
    // may leave datagrams queued, and after arming, the fd must reflect only new arrivals.
    void arm_events() override { drain_rx_.store(true, std::memory_order_relaxed); }

    // ---- internals (called with mu_ held)
    Qp* find_qp(uint32_t qpn);
    Qp* new_qp();
    void send_dreq(Qp& qp);
    // `now`: in, the caller's clock reading, taken just before the call; out, the last reading.
    // A clock read costs ~27 ns on this VM (vDSO, kvm-clock) and a ping-pong message took ~10
    // of them per device, most within a microsecond of each other: a round reads the clock at
    // its start, once per received batch (its arrival time) and again only after work that
    // took long (more than one packet, packets sent), and uses the last reading for the rest.
    unsigned progress_locked(bool owner, uint64_t& now);
    unsigned owner_progress_locked(uint64_t& now);   // progress()'s body
    template <typename Fn>
    size_t recv_locked(Fn&& fn, size_t max, uint64_t now);   // poll_recv's body
    // ce: the datagram's IP header carried ECN CE (a congested queue marked it); now: when its
    // batch arrived.
    void process_datagram(const uint8_t* buf, size_t len, const WireAddr& src, bool ce, uint64_t now);
    void process_datagram(const uint8_t* buf, size_t len, const WireAddr& src, bool ce = false) {
        process_datagram(buf, len, src, ce, now_ns());
    }
    void run_timers(uint64_t now);
    void flush_acks();

    // transmit
    uint8_t* tx_slot();
    // tos >= 0: this packet's ToS differs from the device's (a connection's negotiated class);
    // sock: the socket it leaves from (Qp::tx_sock).
    void tx_commit(size_t len, const sockaddr_storage& sa, socklen_t salen, int tos = -1, uint8_t sock = 0);
    void tx_flush();
    // Fault injection's delayed packets (FaultConfig::delay), sent once due (progress, timers).
    struct DelayedTx {
        uint64_t due_ns;
        std::vector<uint8_t> bytes;
        sockaddr_storage sa;
        socklen_t salen;
        int tos;
        uint8_t sock;
    };
    std::deque<DelayedTx> delayed_;
    void send_delayed(uint64_t now);
    // Leaves queued packets for the owner's next progress(): the background thread, when it
    // serves the device, sends them within IDLE_TAKEOVER; without a thread they go now.
    void hold_tx(uint64_t now);
    // Builds and queues one packet to the QP's peer.
    void emit(Qp& qp, wire::Packet& pkt, std::span<const uint8_t> payload);
    // The same, but the payload may stay where it is until tx_flush (gather send: the tx slot
    // holds headers, pad and ICRC; the kernel reads the payload from `payload` directly), which
    // saves a copy of every byte. Only for memory that outlives the send: a work request's own
    // buffer (zero-copy WRITE: it belongs to the WR until completion, and every path that
    // completes a WR flushes before the lock is released) or, with mr_rkey != 0, a registered
    // region pinned by pd_pinned_ (READ responses; tx_flush re-checks regions if any was
    // deregistered meanwhile). Copies when fault injection or tracing need the bytes in the
    // slot (no GSO then, or pcap), and for payloads too small for a copy to matter.
    void emit_gather(Qp& qp, wire::Packet& pkt, std::span<const uint8_t> payload, uint32_t mr_rkey = 0,
                     uint64_t mr_va = 0);
    bool pd_pinned_ = false;   // the caller holds pd_->pin() (emit_response)

    // requester (requester.cpp)
    Status post_wr(uint32_t qpn, Wr&& wr);
    void req_progress(Qp& qp, uint64_t now);
    bool lazy_ack_ok(const Qp& qp) const;
    void goback(Qp& qp, uint32_t psn, bool force, uint64_t now);
    void goback_head(Qp& qp, uint64_t now);
    // completer (completer.cpp)
    void comp_packet(Qp& qp, const wire::Packet& pkt, uint64_t now);
    void complete_wr(Qp& qp, Status st);   // pops sq.front()
    void qp_fail(Qp& qp, Status st);       // QP -> error, all WRs complete with st
    // responder (responder.cpp)
    void resp_packet(Qp& qp, const wire::Packet& pkt);
    bool send_ack(Qp& qp, uint8_t syndrome, uint32_t psn);   // false: dropped (respond)
    // Every response goes through respond(): at once while nothing waits before it on the QP,
    // else behind what waits (RespJob); a READ sends at most resp_slice_bytes of it at once,
    // the rest from pump_responses (each progress round, that much per QP).
    static constexpr size_t resp_slice_bytes = 256u << 10;
    // Responses that may wait on one QP: a requester keeps at most max_rd_atomic (<= 64)
    // READs/atomics outstanding, an ACK behind each, a few NAKs; beyond, responses are dropped
    // (st_.resp_dropped), as if lost.
    static constexpr size_t max_resp_jobs = 4 * replay_entries;
    // ahead: before what waits (a duplicate from before it: Resp::answer_ahead). false: the
    // response was dropped (max_resp_jobs).
    bool respond(Qp& qp, RespJob j, bool ahead = false);
    bool emit_response(Qp& qp, RespJob& j, size_t& budget);   // true: all of it sent (or dropped)
    void pump_responses();
    std::vector<uint32_t> resp_list_;   // QPs with Qp::resp_jobs
    // Accepted packets (or a duplicate) want an ACK: at the end of the receive batch (prompt:
    // the packet asked for it) or by the delayed-ACK deadline.
    void want_ack(Qp& qp, bool prompt);
    void count_nak(Qp& qp, uint8_t syndrome, bool sent);   // device and QP counters, by type
    // congestion control (congestion.cpp)
    cc::CcMode resolve_cc_mode() const;   // cfg_.cc.mode for this device (auto: off on loopback)
    void cc_init(Qp& qp);
    // Whether the packet at `psn` of `bytes` (READ requests: the bytes they ask for) may leave
    // now; if not, the QP's cc_wake_ns says when to try again (0: at the next ACK).
    bool cc_may_send(Qp& qp, uint32_t bytes, uint64_t now, uint32_t psn);
    void cc_sent(Qp& qp, uint32_t bytes, uint64_t now);
    void cc_ce(Qp& qp, uint8_t opcode, uint64_t now);   // a CE-marked packet arrived for the QP
    void cc_cnp(Qp& qp, uint64_t now);                  // a CNP arrived for the QP
    void cc_loss(Qp& qp, uint64_t now);                 // sequence NAK or retransmission timeout
    void send_cnp(Qp& qp);
    // cm (cm.cpp)
    void cm_packet(const wire::Packet& pkt, const WireAddr& src);
    void cm_send(const WireAddr& to, const cm::Msg& m);
    static cm::Msg conn_msg(const Qp& qp, cm::MsgType type);
    void cm_answer(const WireAddr& to, cm::MsgType type, const cm::Msg& m);
    void cm_reject(const WireAddr& to, const cm::Msg& req);
    void cm_send_req(Qp& qp);
    void cm_timers(uint64_t now);
    uint64_t passive_timer(const Qp& qp) const;
    uint64_t passive_idle_ns() const { return uint64_t(cfg_.passive_idle_ms) * 1000000; }
    bool probe_peer(Qp& qp, uint64_t now);
    static std::array<uint8_t, 18> peer_key(const WireAddr& a);   // passive_'s key
    // DREQs of destroyed QPs, retransmitted until a DREP answers (cm.hpp).
    struct Closing {
        WireAddr peer;
        cm::Msg m;
        uint64_t deadline_ns;
        uint64_t interval_ns;
        unsigned tries_left;
    };
    std::vector<Closing> closing_;
    // Connections whose passive QP was freed, by the active side's nonce, for timewait_ns: a late
    // or duplicated REQ of such a connection (still in the network when its DREQ arrived) must not
    // create a new passive QP that nobody would ever close (found by SwSoak: duplicate + delay
    // faults under QP churn).
    static constexpr uint64_t timewait_ns = 5'000'000'000ull;
    static constexpr size_t timewait_max = 16384;
    std::unordered_map<uint64_t, uint64_t> timewait_;        // conn_id -> expiry
    std::deque<std::pair<uint64_t, uint64_t>> timewait_order_;   // (expiry, conn_id), oldest first
    void timewait_add(uint64_t conn_id, uint64_t now);
    bool in_timewait(uint64_t conn_id, uint64_t now);
    void cm_put_tc(cm::Msg& m) const;           // tc.cpp: our class into a REQ/REP
    void cm_take_tc(Qp& qp, const cm::Msg& m);  // tc.cpp: the connection's class from the peer's
    bool warned_tc_conflict_ = false;   // cm_take_tc(): said once per device
    // Class sockets (class_sockets.hpp), created at connection setup; their ids are Qp::tx_sock
    // and cnp_sock (0: the device's own socket).
    uint8_t class_socket(uint8_t tos, uint8_t priority) { return class_socks_.get(tos, priority); }
    UdpSocket& tx_socket(uint8_t i) { return class_socks_.at(i); }
    void set_peer(Qp& qp, const WireAddr& peer);
    // Whether a packet from `src` may be the QP's peer (the source port counts unless the QP
    // was connected with ManualPeer::any_source_port).
    static bool from_peer(const Qp& qp, const WireAddr& src);

    uint32_t random32();
    void push_completion(const Completion& c);

    DeviceConfig cfg_;
    std::shared_ptr<PdImpl> pd_;
    UdpSocket sock_;
    ClassSockets class_socks_{sock_};
    FaultInjector faults_;
    // The owner takes it several times per busy-poll iteration and rarely meets the progress
    // thread: the futex-word lock (recursive_lock.hpp). glibc's recursive mutex took 238 user
    // instructions per UCT am_lat iteration; this one saves ~360 of the ~10,250 a device_bench
    // ping-pong round trip costs (callgrind; no change in time was measurable on this host).
    mutable RecursiveLock mu_;
    DeviceStats st_{};
    uint32_t window_pkts_ = 256;     // in-flight packets per QP
    uint32_t read_chunk_pkts_ = 32;  // response packets per READ request
    cc::CcMode cc_mode_ = cc::CcMode::off;   // of every QP (resolve_cc_mode at init)
    static constexpr double min_cwnd = 8;

    std::unordered_map<uint32_t, std::unique_ptr<Qp>> qps_;
    std::map<std::string, QpStats> closed_qps_;   // destroyed QPs' counters, per peer address
    std::map<std::pair<std::array<uint8_t, 18>, uint32_t>, uint32_t> passive_;   // (peer, peer qpn) -> qpn
    uint32_t next_qpn_ = 0;
    uint32_t cm_psn_ = 0;
    uint64_t rng_[2] = {};

    std::deque<Completion> cq_;
    struct RecvEntry {
        uint32_t qpn;
        std::vector<uint8_t> data;
        bool has_imm;
        uint32_t imm;
        size_t charge;   // what it adds to rq_bytes_ (its bytes and this entry's)
    };
    std::deque<RecvEntry> rq_;
    // rq_'s charges and the bytes of SENDs being reassembled (cfg_.recv_budget): strangers can
    // open 65,536 passive QPs and leave a SEND unfinished on each. Bytes, not the buffer a SEND
    // FIRST reserves (MAX_RECV_MSG, mapped but untouched): charging that let ~512 one-packet
    // SEND FIRSTs fill the budget and RNR-block every SEND on the device (review finding).
    size_t rq_bytes_ = 0;
    void charge_rbuf(Qp& qp);                   // after qp.rbuf took more bytes
    std::vector<uint8_t> take_rbuf(Qp& qp);     // the reassembled bytes, their charge dropped
    void release_rbuf(Qp& qp);                  // drops a reassembly (its buffer back to the pool)
    // recv_budget is spent: gives up SENDs begun reasm_deadline_ms ago (scans at most every
    // quarter of it); true if any was.
    bool give_up_overdue_sends(uint64_t now);
    uint64_t overdue_scan_ns_ = 0;
    // Message buffers (SEND reassembly, received and bcopy'd messages): a stream of large
    // messages reuses its buffers. At most 64, each up to one whole SEND message.
    BufferPool buf_pool_{64, pooled_buf_max()};
    std::vector<uint8_t> take_buf() { return buf_pool_.take(); }
    void give_buf(std::vector<uint8_t>&& b) { buf_pool_.give(std::move(b)); }
    unsigned new_events_ = 0;
    uint64_t last_timer_ns_ = 0;   // last run_timers(); longer gaps (we were not running) freeze timers
    std::atomic<uint64_t> next_timer_ns_{0};   // earliest armed deadline after run_timers (0 = none)

    std::vector<uint32_t> ack_list_;

    // tx batch
    struct TxSlot {
        size_t len;
        socklen_t salen;
        int tos;   // -1: the device's
        uint8_t sock;   // tx_socket index
        sockaddr_storage sa;
        // Gather send (emit_gather): buf holds the `head` header bytes, then pad + ICRC; the
        // payload, ext_len bytes at ext, goes between them. len counts all of it.
        const uint8_t* ext = nullptr;
        size_t ext_len = 0;
        size_t head = 0;
        uint32_t mr_rkey = 0;   // ext lies in this registered region (READ response), at mr_va
        uint64_t mr_va = 0;
        bool dead = false;      // its region was deregistered before the send: dropped
        const uint8_t* icrc() const { return buf + (len - ext_len) - 4; }
        uint8_t* icrc() { return buf + (len - ext_len) - 4; }
        alignas(64) uint8_t buf[max_datagram];
    };
    unsigned tx_mr_n_ = 0;       // queued slots that point into registered regions
    uint64_t tx_mr_gen_ = 0;     // pd_'s dereg generation when the first of them was built
    void tx_check_regions();
    std::vector<TxSlot> tx_;
    unsigned tx_n_ = 0;
    std::vector<mmsghdr> tx_msgs_;
    std::vector<uint8_t> tx_msg_sock_;   // per tx_msgs_ entry: its socket
    void tx_send_runs(unsigned m);       // tx_msgs_[0, m) by runs of one socket
    std::vector<iovec> tx_iov_;
    GsoIcrcPatches gso_patches_;   // tx_send_gso: segment k's ICRC for IPv4 ID k
    bool in_flush_ = false;
    bool tx_has_data_ = false;   // queued packets other than ACKs
    // Work requests posted since the owner's last progress(): the first goes out at once (a
    // ping-pong's reply), later ones wait for the next progress() or a full batch, so a burst
    // of small messages costs one sendmmsg per batch instead of one system call per message.
    unsigned posts_since_progress_ = 0;
    std::atomic<bool> drain_rx_{false};   // arm_events: see there
    bool gso_ = false;
    struct alignas(8) CmsgBuf {
        uint8_t b[64];
    };
    std::vector<CmsgBuf> tx_cmsg_;
    void tx_send_plain();
    void tx_send_gso();

    // packet trace (cfg_.pcap_path), written with mu_ held
    std::unique_ptr<PcapWriter> pcap_;
    uint64_t pcap_flushed_ns_ = 0;   // progress flushes the trace file about once a second
    void trace_tx(const TxSlot& s, uint16_t ipv4_id);
    // The ToS cmsg a packet needs: its ToS when the socket it leaves from has another, else -1.
    int cmsg_tos(int tos, uint8_t sock) { return tos >= 0 && tos != tx_socket(sock).traffic_class() ? tos : -1; }

    // rx batch
    bool gro_ = false;
    unsigned rx_n_ = rx_batch;           // entries per recvmmsg
    // The last read that emptied the socket: what a later read finds arrived after it, so an ACK
    // may have waited unread since then (the delay window's RTT samples, cc::DelayCc).
    uint64_t rx_emptied_ns_ = 0;
    uint64_t rx_slack(uint64_t now) const { return rx_emptied_ns_ ? elapsed_ns(now, rx_emptied_ns_) : 0; }
    size_t rx_size_ = max_datagram;      // bytes per entry (64 KiB with GRO)
    std::vector<CmsgBuf> rx_cmsg_;
    std::vector<uint8_t> rx_bufs_;
    std::vector<mmsghdr> rx_msgs_;
    std::vector<iovec> rx_iov_;
    std::vector<sockaddr_storage> rx_sa_;

    // progress thread / wakeup
    int epoll_fd_ = -1;
    int notify_fd_ = -1;     // eventfd: work queued for the owner
    int stop_fd_ = -1;       // eventfd: stop the thread
    uint64_t rearm_quiet_ns_ = 0;   // the owner's timer period while the thread has nothing to serve
    OwnerWatch owner_;   // the owner's last progress call; wakes the thread once it stopped
    std::atomic<bool> stop_{false};
    std::atomic<bool> notified_{false};   // notify_fd_ has been written (skip the read syscall otherwise)
    std::thread thread_;
    void thread_main();
};

} // namespace roce::sw
