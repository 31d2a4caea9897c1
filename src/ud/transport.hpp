// ud_roce's reliable, connectionless messaging over one datagram QP (ud/datagram.hpp): every
// peer is just an address; per peer a Sender and a Receiver (created on first use, so a peer
// that was only addressed costs a few dozen bytes) carry sequence numbers, acknowledgements
// (on every packet, so traffic in the other direction acknowledges for free; explicit ACKs are
// coalesced), retransmission and an AIMD window. AMs larger than a datagram are fragmented.
//
// A peer that acknowledges nothing for `peer_timeout` fails: its queued packets are dropped,
// sends to it return its status (timeout) and the failure callback runs once (from progress).
// Probes (keepalive / ep_check) are sequenced empty packets: their ACK proves the peer alive.
//
// Threading: every public method is thread-safe (one recursive lock). The owner calls
// progress(); callbacks run inside it and may call send_am()/probe() (not progress()). With
// `progress_thread`, a background thread takes over when the owner has not called progress()
// for `idle_takeover_ns`: it receives (keeping AMs for the owner's next progress, which the
// event fd then announces), acknowledges and retransmits — so a process that computes, or
// blocks outside UCX, neither stalls its peers' flushes nor looks dead to them. AMs whose id
// `async_ok` accepts are delivered by the thread itself, in order (only while no AM waits for
// the owner) and under `outer_lock`.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <thread>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/clock.hpp"
#include "common/owner_watch.hpp"
#include "common/recursive_lock.hpp"
#include "ud/datagram.hpp"
#include "ud/receiver.hpp"
#include "ud/sender.hpp"

namespace roce::ud {

struct TransportConfig {
    SenderConfig tx;
    ReceiverConfig rx;
    uint64_t ack_delay_ns = 50'000;   // longest an ACK waits for data to ride on
    uint32_t sender_id = 0;           // 0: random
    bool progress_thread = false;
    uint64_t idle_takeover_ns = 2'000'000;
    // Datagrams are unauthenticated: bounds on what strangers can make us keep. Peers first heard
    // from (not created by peer() for an endpoint of ours): at most this many, later sources are
    // dropped (a peer costs a few hundred bytes; never forgotten: a sender we hold no endpoint
    // for, idle for long, must find its sequence where it left it). Out-of-order payload held by
    // all peers together: below; AMs being reassembled reserve rx.max_msg each from a pool of
    // max(hold_budget, 16 x rx.max_msg) (ud/receiver.hpp, HoldBudget).
    size_t max_passive_peers = size_t(1) << 20;
    size_t hold_budget = size_t(64) << 20;
};

struct TransportStats {
    uint64_t peers = 0, failed_peers = 0;
    uint64_t data_sent = 0, acks_sent = 0, probes_sent = 0;
    uint64_t retransmits = 0, fast_retransmits = 0, timeouts = 0, window_cuts = 0;
    uint64_t delivered = 0, duplicates = 0, out_of_order = 0, out_of_window = 0;
    uint64_t malformed = 0, restarted_peers = 0;
    uint64_t peers_refused = 0;   // datagrams from a new source beyond max_passive_peers
    uint64_t over_budget = 0;     // packets not taken: hold_budget (or the reassembly pool) spent,
                                  // or AMs kept for an absent owner reached hold_budget
    uint64_t reasm_expired = 0;   // AMs under way given up: their sender fell silent (peers failed)
    uint64_t reasm_refused = 0;   // later fragments of those, not taken (their sender times out)
    uint64_t deferred_bytes = 0;  // gauge: AMs the background thread received, kept for the owner
};

class Transport {
public:
    using PeerId = uint32_t;
    struct Callbacks {
        std::function<void(PeerId, uint8_t am_id, const uint8_t* data, size_t len)> deliver;
        std::function<void(PeerId, Status)> failed;
        // AM ids whose handler may run in the background thread (UCT's CB_ASYNC): those are
        // delivered at once instead of waiting for the owner (UCP's wireup messages). Empty: none.
        std::function<bool(uint8_t am_id)> async_ok;
        // The owner's lock those handlers run under (UCX: the worker's async lock), taken by the
        // thread before the transport's own lock — the order every owner call follows too.
        // acquire=true only tries (false: not taken, the thread skips this round and retries);
        // acquire=false releases.
        std::function<bool(bool acquire)> outer_lock;
    };

    Transport(const TransportConfig& cfg, std::unique_ptr<DatagramQp> qp, Callbacks cb);
    ~Transport();
    Transport(const Transport&) = delete;
    Transport& operator=(const Transport&) = delete;

    // The peer at `addr` (created on first use; nothing is sent). `max_payload`, when known (the
    // peer's interface address carries it), is the largest datagram payload the peer's QP takes:
    // packets to it carry no more than that, nor more than ours — both ends' MTUs, as rc_roce's
    // CM takes the smaller (a 4096-byte packet from a jumbo-frame host is dropped on its way to a
    // 1500-byte one, and the peer would time out). 0: unknown, this QP's own.
    // `cls`, when known (the interface address carries it too), is the peer's class advert: data,
    // probes and ACKs to it then leave in the class both sides negotiate from their adverts, so
    // both directions agree once each side has an endpoint to the other (before, a peer only
    // heard from is answered in our own class).
    PeerId peer(const UdAddr& addr, size_t max_payload = 0, const ClassAdvert* cls = nullptr);
    UdAddr peer_addr(PeerId id) const;
    Status peer_status(PeerId id) const;

    // Bytes of one AM at most (reassembly limit) and per packet.
    size_t max_msg() const { return cfg_.rx.max_msg; }
    size_t packet_payload() const { return frag_; }
    size_t packet_payload(PeerId id) const;   // to that peer: the smaller MTU's
    // Queues an AM of the gathered iov bytes. no_resource: the peer's queue is full (retry
    // after progress); the peer's status once it failed; invalid_param: larger than max_msg, or
    // more packets of the peer's MTU than the queue holds (it could never be sent).
    // can_send(len): room for len bytes, or an empty queue if len could never fit (a caller that
    // checks room for its largest message, then sends a smaller one, must not wait forever).
    Status send_am(PeerId id, uint8_t am_id, const iovec* iov, size_t iovcnt);
    bool can_send(PeerId id, size_t len) const;
    // Keepalive: a sequenced empty packet; a dead peer then fails within peer_timeout.
    Status probe(PeerId id);

    // Everything sent to the peer (to every peer) acknowledged.
    bool flushed(PeerId id) const;
    bool all_flushed() const;
    // Some peer has something unacknowledged or is owed an ACK: progress has timers to run.
    bool busy() const;
    // AMs the background thread received, or failures it found, wait for progress().
    bool has_deferred() const;
    // Readable when progress() has work: the QP's fd and the background thread's notifications.
    int event_fd() const { return epoll_fd_; }

    // Receives, acknowledges, retransmits; callbacks run from here. Returns events handled.
    unsigned progress();

    // Arms the QP's event source (call only from the owner, before waiting on event_fd()).
    void arm();
    UdAddr address() const { return qp_->address(); }
    ClassAdvert class_advert() const { return qp_->class_advert(); }
    size_t max_datagram_payload() const { return qp_->max_payload(); }   // what peers may send us
    DatagramStats qp_stats() const { return qp_->stats(); }
    TransportStats stats() const;
    // The transport's and its QP's counters, named, in a fixed order (live counter files).
    using Counters = std::vector<std::pair<std::string, uint64_t>>;
    Counters counters() const;
    std::string stats_text() const;   // counters() as name=value pairs
    // Per peer: what was sent to it and received from it, its sender's and receiver's counters,
    // and the gauges window_now / unacked_now.
    struct PeerCounters {
        PeerId id = 0;
        uint32_t remote_id = 0;
        std::string addr;
        bool failed = false;
        Counters counters;
    };
    std::vector<PeerCounters> peer_counters() const;
    uint32_t sender_id() const { return cfg_.sender_id; }

private:
    struct Peer {
        UdAddr addr;
        uint32_t remote_id = 0;          // the peer's sender_id, once heard
        uint32_t replaced_id = 0;        // the sender_id of the process it replaced at its address
        Status status = Status::ok;
        bool active = false;             // in active_ (has something to send, ACK or time out)
        size_t frag = 0;                 // AM bytes per packet to it (peer())
        ClassId cls = 0;                 // the class its packets leave in (peer())
        // Packets an AM of len bytes takes to this peer (an empty AM still takes one).
        size_t packets_for(size_t len) const { return std::max<size_t>(1, (len + frag - 1) / frag); }
        std::unique_ptr<Sender> tx;
        std::unique_ptr<Receiver> rx;
        uint64_t data_sent = 0, acks_sent = 0, probes_sent = 0, bytes_sent = 0;
        uint64_t last_busy_ack_ns = 0;   // (at most one busy ACK per millisecond)
    };

    Sender& tx(Peer& p);
    Receiver& rx(Peer& p);
    bool emit(Peer& p, const Sender::Packet& pkt, bool ack_req);
    Status put(const Peer& p, const iovec* iov, size_t iovcnt);   // send or send_held (hold_)
    void send_ack(Peer& p, uint8_t flags = 0);
    void on_datagram(const Datagram& d, uint64_t now);
    void fail(PeerId id, Status why, bool quiet = false);   // quiet: no log line (counted only)
    void activate(PeerId id);
    void service(uint64_t now, unsigned& count, bool were_away);
    unsigned receive(uint64_t now);
    unsigned receive_held(uint64_t now);   // receive() with every send held until its end
    void thread_main();
    void takeover(bool may_deliver);

    struct Deferred {
        PeerId peer;
        uint8_t am_id;
        std::vector<uint8_t> data;
    };

    TransportConfig cfg_;
    std::unique_ptr<DatagramQp> qp_;
    Callbacks cb_;
    size_t frag_;
    HoldBudget hold_budget_;           // before peers_: their receivers give it back when destroyed
    BufferPool tx_buffers_{cfg_.tx.queue_len};   // before peers_ too: their senders' queues fill it
    uint64_t last_reasm_sweep_ns_ = 0;  // release_stale_reservations()
    void release_stale_reservations(uint64_t now);
    size_t passive_peers_ = 0;         // peers created by on_datagram (max_passive_peers)
    bool warned_refused_ = false;
    // Restarts logged so far: each is a line (and its old peer's failure another), and anyone
    // may send datagrams with a new sender id from an address: a flood of them is counted only.
    static constexpr unsigned logged_restarts = 8;
    unsigned restarts_logged_ = 0;
    bool warned_small_mtu_ = false;    // peer(): a peer's MTU too small for SEG_SIZE
    std::vector<std::unique_ptr<Peer>> peers_;
    std::unordered_map<UdAddr, PeerId, UdAddrHash> by_addr_;
    UdAddr last_src_;                 // the last datagram's source and its peer (on_datagram)
    PeerId last_peer_ = 0;
    bool have_last_src_ = false;
    std::vector<PeerId> active_;
    uint64_t service_interval_ns_;        // 20 us, or half ack_delay_ns if that is shorter
    uint64_t last_service_ns_ = 0;
    uint64_t last_receive_ns_ = 0;   // receive_held's last call: longer gaps read the QP empty
    uint64_t emptied_ns_ = 0;        // the last poll that found the QP empty: later finds arrived after it
    bool watched_ = false;           // since the last receive, someone slept on the QP's event fd
    bool urgent_ = false;                 // a peer owes an immediate ACK (receive())
    unsigned posts_since_progress_ = 0;   // send_am calls since the owner's last progress()
    bool holds_ = false;                  // the QP batches (DatagramQp::holds_sends)
    bool hold_ = false;                   // emit(): the QP may keep the packet (send_held)
    // Sets hold_ for a scope, restores it after (a send_am inside receive()'s scope).
    struct HoldSends {
        bool& flag;
        bool saved;
        HoldSends(bool& f, bool on) : flag(f), saved(f) { flag = on; }
        ~HoldSends() { flag = saved; }
        HoldSends(const HoldSends&) = delete;
        HoldSends& operator=(const HoldSends&) = delete;
    };
    std::vector<std::pair<PeerId, Status>> failures_;
    TransportStats stats_;
    mutable RecursiveLock mu_;   // a futex word: the owner takes it twice per ping-pong iteration
    bool passive_ = false;                    // the background thread is receiving
    bool notified_ = false;                   // notify_fd_ was written and not yet drained
    std::vector<Deferred> deferred_;
    // deferred_'s payload bytes (plus a per-AM overhead). At hold_budget the thread takes no more
    // data: a rank computing outside MPI would otherwise keep, in copies, whatever its peers
    // (or strangers) stream at it, for as long as it computes. Not taken is not acknowledged:
    // the senders retransmit (backing off) until the owner is back and drains deferred_.
    size_t deferred_bytes_ = 0;
    OwnerWatch owner_;   // the owner's last progress call; wakes the thread once it stopped
    std::atomic<bool> stop_{false};
    int epoll_fd_ = -1, notify_fd_ = -1, stop_fd_ = -1;
    std::thread thread_;
    SenderStats dead_tx_;     // counters of senders already freed
};

} // namespace roce::ud
