// A datagram queue pair: what ud_roce needs of a device. One per interface; the reliability above
// it (ud/transport.hpp) is the same on both backends:
//   * the userspace device (sw/ud_qp.hpp): RoCEv2 UD SEND_ONLY packets (BTH + DETH + payload +
//     ICRC) over a UDP socket;
//   * verbs (verbs/ud_datagram.cpp): an ibv UD QP on a RoCE port.
// Delivery is unreliable and unordered: datagrams may be lost, duplicated or reordered.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <sys/uio.h>

#include "common/function_ref.hpp"
#include "common/rc_device.hpp"
#include "common/status.hpp"

namespace roce::ud {

// Where a datagram QP receives: its network address and QPN. On the userspace device `net` is
// the socket's IP and UDP port; on verbs it is the port's GID (IPv4 as ::ffff:a.b.c.d in
// net.ip with family AF_INET6, port 0).
struct UdAddr {
    WireAddr net;
    uint32_t qpn = 0;   // 24 bit
    bool operator==(const UdAddr&) const = default;
    std::string to_string() const { return net.to_string() + "/qp" + std::to_string(qpn); }
};

struct UdAddrHash {
    size_t operator()(const UdAddr& a) const noexcept {
        uint64_t h = 1469598103934665603ull;
        auto mix = [&](uint64_t v) { h = (h ^ v) * 1099511628211ull; };
        for (uint8_t b : a.net.ip) mix(b);
        mix(a.net.port);
        mix(a.qpn);
        return size_t(h);
    }
};

struct Datagram {
    UdAddr src;
    const uint8_t* data;   // valid during the callback only
    size_t len;
};

// Monotonic counters of a datagram QP.
struct DatagramStats {
    uint64_t tx_packets = 0, rx_packets = 0, tx_bytes = 0, rx_bytes = 0;
    uint64_t tx_dropped = 0;          // the device refused a send (socket buffer / send queue)
    uint64_t tx_errors = 0, rx_errors = 0;   // sends/receives that failed (error completion, no
                                             // address handle): each a datagram lost
    uint64_t tx_batches = 0;          // system calls that sent held datagrams (send_held), one or more
    uint64_t ah_evicted = 0;          // verbs: address handles freed to stay under the cap (UdConfig::max_ah)
    uint64_t icrc_errors = 0, malformed = 0, wrong_qp = 0;
    uint64_t faults_dropped = 0, faults_duplicated = 0, faults_reordered = 0, faults_corrupted = 0;
    uint64_t faults_truncated = 0, faults_delayed = 0;
};

// A QP's traffic class as its address advertises it (gid::TcAdvert: ToS, priority and where each
// came from); all zero: none.
using ClassAdvert = std::array<uint8_t, 4>;

// Which class a datagram leaves in: 0 is the QP's own; others come from class_for().
using ClassId = uint8_t;

class DatagramQp {
public:
    virtual ~DatagramQp() = default;
    virtual UdAddr address() const = 0;
    // Largest payload of one datagram (the path MTU).
    virtual size_t max_payload() const = 0;
    // Our class, for the address peers connect to. Default: none (the peers keep their own).
    virtual ClassAdvert class_advert() const { return {}; }
    // The class to send to a peer that advertised `peer` in: the two sides' negotiated class
    // (gid::negotiate_traffic_class, symmetric, so the peer computes the same), as an id for
    // send(). 0 when it is our own, the advert is empty or malformed, or no more classes fit.
    virtual ClassId class_for(const ClassAdvert& /*peer*/) { return 0; }
    // Copies the payload before return. no_resource: the device cannot take it now (retry
    // later); unreachable: wrong address family; invalid_param: larger than max_payload.
    virtual Status send(const UdAddr& dst, ClassId cls, const iovec* iov, size_t iovcnt) = 0;
    // As send(), but the device may keep the datagram until the next send(), flush() or poll(),
    // or until a batch is full: on the userspace device a burst then costs one system call
    // (sendmmsg) instead of one per datagram. Order is kept. Default: send() at once.
    virtual Status send_held(const UdAddr& dst, ClassId cls, const iovec* iov, size_t iovcnt) {
        return send(dst, cls, iov, iovcnt);
    }
    // Sends what send_held() kept (what the socket refuses stays for the next try).
    virtual void flush() {}
    // Whether send_held() ever keeps anything (false: the caller need not hold or flush).
    virtual bool holds_sends() const { return false; }
    // Hands up to `max` received datagrams to `fn`; returns how many.
    virtual size_t poll(FunctionRef<void(const Datagram&)> fn, size_t max) = 0;
    // Whether the last poll() left nothing queued: what the next one finds arrived after it
    // (the delay window's RTT samples). false: not known (a poll that finds nothing says so).
    virtual bool emptied() const { return false; }
    // Readable when poll() may find something (after arm()).
    virtual int event_fd() const = 0;
    virtual void arm() {}
    virtual DatagramStats stats() const = 0;
};

} // namespace roce::ud
