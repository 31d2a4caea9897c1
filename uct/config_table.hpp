// The rc_roce and ud_roce tunables, written once. No UCX headers here: the same list feeds the UCX
// configuration table (config_table.cpp, variables UCX_RC_ROCE_<NAME>, shown by `ucx_info -c`)
// and the Markdown table printed by `roce_config_doc` for the README.
//
// Two parts: ROCE_IFACE_CONFIG below (typed UCX fields), then the GID and traffic-class settings,
// whose one table is gid::gid_config_vars (src/gid/config.hpp: name, default, valid choices,
// documentation). Those enter UCX's table as strings (IfaceConfig::gid, in table order) and are
// parsed at iface open by gid::parse_gid_config, whose errors are one line naming the setting
// and the valid choices.
//
// X(field, c_type, NAME, default, TYPE, doc)
//   field   member of roce::uct::IfaceConfig
//   c_type  its C type; must match what the UCX parser of TYPE writes
//   TYPE    UCS_CONFIG_TYPE_<TYPE> (UINT: unsigned, MEMUNITS: size_t, TIME: double seconds,
//           DOUBLE: double, BOOL: int, ULONG: unsigned long, LOG_LEVEL: ucs_log_level_t enum,
//           ULUNITS: size_t, "auto" = UCS_ULUNITS_AUTO, STRING: char*, owned by UCX,
//           RANGE_SPEC: ucs_range_spec_t {first, last}, "a" or "a-b"; the c_type token only
//           reaches code that includes UCX)
#pragma once

#include <iterator>

#include "cc/config.hpp"
#include "gid/config.hpp"

// Tunables of the device both transports open (the userspace device's socket and its fault
// injection, the core's log level): UCX_RC_ROCE_<NAME> and UCX_UD_ROCE_<NAME>.
#define ROCE_DEVICE_CONFIG(X)                                                                  \
    X(mtu, size_t, "MTU", "auto", ULUNITS,                                                     \
      "Path MTU in bytes (RoCEv2 payload per packet): 256, 512, 1024, 2048 or 4096. auto: "   \
      "on the userspace device the largest whose packets (with RoCE, UDP and IP headers) fit " \
      "the netdev's MTU (1500 -> 1024; 9000 and loopback -> 4096), on RDMA devices the "      \
      "port's active MTU and what fits the GID's netdev (a VLAN smaller than its port). On "  \
      "the userspace device a value whose packets do not fit the netdev is refused (with DF "  \
      "set they would never leave); an RDMA port takes the smaller. Two peers use the "       \
      "smaller of their two MTUs (rc_roce agrees on it when connecting, ud_roce's interface "  \
      "address carries it), so hosts with jumbo and standard frames talk at the standard "     \
      "one.")                                                                                  \
    X(port_range, ucs_range_spec_t, "PORT_RANGE", "0", RANGE_SPEC,                             \
      "UDP port(s) the userspace device binds, as UCX_TCP_PORT_RANGE: 0 lets the kernel pick " \
      "an ephemeral one; a single port binds exactly it (one interface per host address, "     \
      "e.g. 4791 to be reached by kernel rxe or an RDMA NIC); a range a-b (for a firewall "   \
      "that opens one) binds a free port of it, each tried once from a random one. Every "    \
      "interface of every process on a host address needs its own port; when none is free "   \
      "the interface does not open, with an error naming the range. RDMA devices do not use " \
      "it (their RoCEv2 port is 4791; the value is still checked).")                          \
    X(fault_drop, double, "FAULT_DROP", "0", DOUBLE,                                           \
      "Fault injection (tests only): probability in [0,1] to drop a transmitted packet.")     \
    X(fault_duplicate, double, "FAULT_DUPLICATE", "0", DOUBLE,                                 \
      "Fault injection (tests only): probability to transmit a packet twice.")                 \
    X(fault_reorder, double, "FAULT_REORDER", "0", DOUBLE,                                     \
      "Fault injection (tests only): probability to hold a packet back behind the next one.") \
    X(fault_corrupt, double, "FAULT_CORRUPT", "0", DOUBLE,                                     \
      "Fault injection (tests only): probability to flip a payload bit (the receiver's "      \
      "ICRC check must drop the packet).")                                                     \
    X(fault_truncate, double, "FAULT_TRUNCATE", "0", DOUBLE,                                   \
      "Fault injection (tests only): probability to cut a packet short (the receiver's "      \
      "length and ICRC checks must drop it).")                                                 \
    X(fault_delay, double, "FAULT_DELAY", "0", DOUBLE,                                         \
      "Fault injection (tests only): probability to hold a packet back for FAULT_DELAY_TIME "  \
      "(it arrives late, behind later packets).")                                              \
    X(fault_delay_time, double, "FAULT_DELAY_TIME", "2ms", TIME,                               \
      "How long FAULT_DELAY holds a packet back.")                                             \
    X(fault_seed, unsigned long, "FAULT_SEED", "1", ULONG,                                     \
      "Seed of the fault-injection random generator (reproducible runs).")                     \
    X(stats_dir, char*, "STATS_DIR", "", STRING,                                               \
      "Write every interface's counters (device, per peer, per QP) to "                         \
      "DIR/<transport>.<pid>.<device>.<port> about once a second while the process runs and "  \
      "at close (the file stays: the counters at exit); roce_doctor counters DIR shows them. " \
      "Empty: off.")                                                                           \
    X(idle_yield, double, "IDLE_YIELD", "5us", TIME,                                           \
      "Userspace device: once the owner's progress calls have found nothing for this long "   \
      "(and 8 in a row), "                                                                     \
      "each further empty one yields the CPU (sched_yield) while the machine has at least "  \
      "twice as many runnable tasks as CPUs (/proc/loadavg, 3 samples 10 ms apart while idle), so "  \
      "that the peer a busy-polling rank waits for gets to run (Open MPI yields only once per " \
      "100 polls under pml ucx). Not on multi-threaded workers. Measured on 2 cores, MPI 8 B " \
      "message rate of 4 pairs: 1.0-1.2 M msg/s without, 1.5-2.2 with. 0: never yield.")     \
    X(log_level, unsigned, "LOG_LEVEL", "warn", LOG_LEVEL,                                     \
      "Verbosity of the RoCE core (error, warn, info, debug); messages go to the UCX log, "   \
      "so UCX_LOG_LEVEL must allow them too.")

#define ROCE_RC_CONFIG(X)                                                                      \
    X(tx_queue_len, unsigned, "TX_QUEUE_LEN", "256", UINT,                                     \
      "Send queue depth of every QP: work requests in flight before operations return "        \
      "UCS_ERR_NO_RESOURCE (and callers queue on the pending queue).")                         \
    X(max_rd_atomic, unsigned, "MAX_RD_ATOMIC", "16", UINT,                                    \
      "Outstanding RDMA READ and atomic requests per QP (userspace device: at most 64).")                                     \
    X(max_read_request, size_t, "MAX_READ_REQUEST", "128k", MEMUNITS,                          \
      "Userspace device: longer RDMA READs are requested in pieces of this size, whose "       \
      "responses arrive back to back (behind a slow bottleneck, smaller pieces keep bursts "   \
      "short; 16k halves loopback bandwidth).")                                                \
    X(timeout, double, "TIMEOUT", "2ms", TIME,                                                 \
      "First retransmission timeout of a QP; it doubles on every retry.")                      \
    X(retry_count, unsigned, "RETRY_COUNT", "7", UINT,                                         \
      "Retransmissions before a QP fails with UCS_ERR_ENDPOINT_TIMEOUT (peer failure), "       \
      "once PEER_TIMEOUT has also passed without a packet from the peer.")                     \
    X(peer_timeout, double, "PEER_TIMEOUT", "5s", TIME,                                        \
      "Userspace device: a QP whose retries ran out fails only after the peer has been silent " \
      "this long; a peer that still answers (behind a congested queue) is alive however many " \
      "retransmission timeouts pass.")                                                          \
    X(passive_probe, double, "PASSIVE_PROBE", "60s", TIME,                                     \
      "Userspace device: a QP created for a peer's connection asks the peer's device whether " \
      "the connection still exists after this long without a packet from it, and is freed "   \
      "when the answer is no (the peer's QP failed or is gone without telling) or when no "    \
      "answer comes for PASSIVE_REAP more (the peer process was killed). The peer answers "    \
      "while its owner computes only with its PROGRESS_THREAD. 0: never ask.")    \
    X(passive_reap, double, "PASSIVE_REAP", "600s", TIME,                                     \
      "Userspace device: how long after PASSIVE_PROBE's first question a connection whose "    \
      "peer answers nothing is freed (counter cm_reaped; 0: after one unanswered question).")  \
    X(rnr_retry, unsigned, "RNR_RETRY", "7", UINT,                                             \
      "Receiver-not-ready retries before a QP fails; 7 means infinite, as in InfiniBand.")     \
    X(ack_coalesce, unsigned, "ACK_COALESCE", "16", UINT,                                      \
      "The responder acknowledges at most every N packets (and on AckReq or when idle).")      \
    X(ack_delay, double, "ACK_DELAY", "200us", TIME,                                           \
      "Userspace device: SENDs nobody waits for (UCX's short/bcopy active messages) go "       \
      "without AckReq and the peer acknowledges them at most this late (coalesced), so a "     \
      "ping-pong puts one datagram per message on the wire instead of two; 0 asks for an ACK " \
      "on every message. Capped at a quarter of TIMEOUT. Not under CC=delay (its RTT samples) "\
      "nor towards hand-connected peers (rxe and NICs acknowledge only AckReq packets).")      \
    X(max_recv_msg, size_t, "MAX_RECV_MSG", "128k", MEMUNITS,                                   \
      "Largest SEND message the responder reassembles. Bounds the active-message sizes "       \
      "(max_bcopy/max_zcopy) and the bcopy PUT/GET sizes.")                                    \
    X(rx_queue_len, unsigned, "RX_QUEUE_LEN", "1024", UINT,                                    \
      "Received messages not yet handed to UCX before the responder answers with RNR NAK.")   \
    X(progress_thread, int, "PROGRESS_THREAD", "y", BOOL,                                      \
      "Run a background thread that serves one-sided operations (RDMA READ/WRITE/atomics, "    \
      "ACKs, retransmissions) while the owner does not call progress.")                        \
    X(idle_takeover, double, "IDLE_TAKEOVER", "500us", TIME,                                   \
      "How long the owner may stay out of progress before the background thread takes over "  \
      "(the thread sleeps on a timer the owner pushes forward: it fires this time after the "  \
      "owner's push while the thread serves an owner that calls only now and then, else up to "\
      "twice it, at most 1 ms or half TIMEOUT). "                                               \
      "Shorter values serve one-sided operations sooner to an "                               \
      "owner that polls only now and then, but cost a busy rank that timer's system calls "   \
      "and takeovers whenever it is merely preempted. Measured on 2 cores, 3 interleaved "    \
      "rounds (MPI 8 B latency, ucp_get 1 MiB from a passive target): 200us 8.5-8.6 us, "     \
      "3.2-3.3 GB/s; 500us 7.6-7.9 us, 2.4-2.5 GB/s. Keep it well below TIMEOUT.")            \
    X(gso, int, "GSO", "y", BOOL,                                                              \
      "Transmit runs of equal-size packets to one peer as one UDP_SEGMENT send (kernel GSO); "\
      "off when the kernel lacks it or fault injection is active.")                           \
    X(gro, int, "GRO", "y", BOOL,                                                              \
      "Receive coalesced datagrams (kernel UDP GRO) and split them into packets.")             \
    X(fault_drop_acks, double, "FAULT_DROP_ACKS", "0", DOUBLE,                                 \
      "Fault injection (tests only): probability to drop an ACK or NAK (only those: the "     \
      "requester's retransmission timer and the responder's duplicate handling recover).")    \
    X(fault_ce, double, "FAULT_CE", "0", DOUBLE,                                               \
      "Fault injection (tests only): probability to mark a packet ECN CE, as a congested "     \
      "switch queue would (the receiver answers with CNPs when CC is dcqcn).")                 \
    X(cc_line_rate, double, "CC_LINE_RATE", "0", DOUBLE,                                       \
      "Userspace device: the line rate in Gbit/s congestion control starts from and paces "    \
      "below; 0 reads the netdev's speed (100 when it has none, e.g. loopback).")              \
    X(verbs_ack_timeout, unsigned, "VERBS_ACK_TIMEOUT", "18", UINT,                            \
      "Verbs devices: the HCA's local ACK timeout, 4.096 us * 2^N (0..31; 18 = 1.07 s, as "    \
      "UCX's rc_verbs default; rxe under load fires spurious retries at 14 = 67 ms). The HCA " \
      "retransmits by itself, so TIMEOUT applies to the userspace device only.")              \
    X(pcap, char*, "PCAP", "", STRING,                                                         \
      "Userspace device: write every RoCEv2 packet sent and received to this pcap file "       \
      "(Ethernet/IP/UDP frames rebuilt from the socket addresses; open with Wireshark or "     \
      "roce_doctor wire). %p is replaced by the process id, %d by the interface's UDP port. "  \
      "Empty: off.")                                                                           \
    X(pcap_size, size_t, "PCAP_SIZE", "64m", MEMUNITS,                                         \
      "Largest packet trace file (PCAP); once reached no more packets are written (logged "   \
      "once).")

// ud_roce's own tunables (its reliability layer, ud/transport.hpp).
#define ROCE_UD_CONFIG(X)                                                                      \
    X(timeout, double, "TIMEOUT", "30s", TIME,                                                 \
      "A peer that acknowledges nothing for this long has failed: its endpoints report "      \
      "UCS_ERR_ENDPOINT_TIMEOUT (peer failure), sends to it return that error.")              \
    X(retransmit_timeout, double, "RETRANSMIT_TIMEOUT", "2ms", TIME,                          \
      "Smallest retransmission timeout; the measured round-trip time raises it, every "       \
      "retransmission without answer doubles it (up to 0.5 s).")                              \
    X(max_window, unsigned, "MAX_WINDOW", "256", UINT,                                         \
      "Largest number of unacknowledged packets per peer (the AIMD window grows up to it "    \
      "and halves on loss).")                                                                  \
    X(tx_queue_len, unsigned, "TX_QUEUE_LEN", "1024", UINT,                                    \
      "Packets queued per peer (sent or waiting for the window) before sends to that peer "   \
      "return UCS_ERR_NO_RESOURCE; other peers are not affected.")                             \
    X(ack_delay, double, "ACK_DELAY", "50us", TIME,                                            \
      "How long an acknowledgement waits for data to the same peer to ride on.")              \
    X(seg_size, size_t, "SEG_SIZE", "64k", MEMUNITS,                                           \
      "Largest active message (max_bcopy/max_zcopy); larger ones are fragmented into MTU-size " \
      "packets and reassembled by the receiver. Use the same value on every rank: an AM above "\
      "the receiver's value is dropped (counted as malformed, logged once).")                 \
    X(progress_thread, int, "PROGRESS_THREAD", "y", BOOL,                                      \
      "Run a background thread that receives, acknowledges and retransmits while the owner "  \
      "does not call progress (received messages wait for the owner), so peers' flushes and " \
      "emulated one-sided operations complete and the process does not look dead.")           \
    X(idle_takeover, double, "IDLE_TAKEOVER", "2ms", TIME,                                     \
      "How long the owner may stay out of progress before the background thread takes over "  \
      "(it sleeps while the owner calls). It then receives, keeps ACKs "                      \
      "and retransmissions going and sends messages the owner posted after its last progress "\
      "call (those wait for the next call, to leave in one batch). Shorter values compete "   \
      "with a busy owner.")                                                                    \
    X(cc, char*, "CC", "auto", STRING,                                                         \
      "Congestion control per peer on top of the loss-based AIMD window (always on): off; "   \
      "delay, the delay-target byte window of rc_roce's CC=delay fed by ud_roce's round-trip " \
      "samples (any device); auto = off (ud_roce has no CNPs: dcqcn is rc_roce's). Measured "  \
      "on the rxe guest's ECN fabric: see the README.")                                       \
    X(delay_target, double, "DELAY_TARGET", "1ms", TIME,                                       \
      "CC=delay: round-trip target (base round trip + allowed queueing); the window grows "   \
      "below it and shrinks above it.")                                                        \
    X(delay_ai, size_t, "DELAY_AI", "4k", MEMUNITS,                                            \
      "CC=delay: additive window increase per round trip below the target.")

// The tables: rc_roce (UCX_RC_ROCE_*) and ud_roce (UCX_UD_ROCE_*); the GID settings follow both.
#define ROCE_IFACE_CONFIG(X) ROCE_DEVICE_CONFIG(X) ROCE_RC_CONFIG(X)
#define ROCE_UD_IFACE_CONFIG(X) ROCE_DEVICE_CONFIG(X) ROCE_UD_CONFIG(X)

namespace roce::uct {

// Prefix of the transport's variables after UCX_ (UCX_RC_ROCE_MTU, ...).
inline constexpr const char* tl_config_prefix = "RC_ROCE_";
inline constexpr const char* ud_tl_config_prefix = "UD_ROCE_";

// The table as plain text, for documentation tools.
struct ConfigDoc {
    const char* name;     // without prefix
    const char* dfl;
    const char* type;     // TYPE token
    const char* doc;
};

#define ROCE_CONFIG_DOC_ENTRY(_field, _ctype, _name, _dfl, _type, _doc) {_name, _dfl, #_type, _doc},
inline constexpr ConfigDoc config_doc[] = {ROCE_IFACE_CONFIG(ROCE_CONFIG_DOC_ENTRY)};
inline constexpr ConfigDoc ud_config_doc[] = {ROCE_UD_IFACE_CONFIG(ROCE_CONFIG_DOC_ENTRY)};
#undef ROCE_CONFIG_DOC_ENTRY

// The GID and traffic-class settings, after config_doc in UCX's table and in the README.
inline constexpr auto& gid_config_doc = gid::gid_config_vars;
inline constexpr size_t n_gid_settings = std::size(gid::gid_config_vars);
// The congestion-control settings (cc::cc_config_vars), after those, rc_roce only.
inline constexpr size_t n_cc_settings = cc::cc_config_var_count;

// UCX wants C strings: every field of the gid table must be a whole literal (NUL right after it).
constexpr bool is_c_string(std::string_view v) { return v.data()[v.size()] == '\0'; }
constexpr bool gid_table_is_c_strings() {
    for (const auto& v : gid::gid_config_vars)
        if (!is_c_string(v.name) || !is_c_string(v.dfl) || !is_c_string(v.choices) || !is_c_string(v.doc))
            return false;
    return true;
}
static_assert(gid_table_is_c_strings());

} // namespace roce::uct
