// Packet trace of a userspace device (UCX_RC_ROCE_PCAP): a classic pcap file (nanosecond
// timestamps, LINKTYPE_ETHERNET) with one frame per RoCEv2 packet sent or received.
//
// A UDP socket shows neither the IP nor the UDP header, so each frame's headers are rebuilt from
// the socket addresses, as the kernel writes them:
//   +----------------+---------------------------+-------------+--------------------------+
//   | Ethernet 14B   | IPv4 20B (DF, TTL 64) or  | UDP 8B      | BTH ... payload ... ICRC |
//   | MACs zero      | IPv6 40B (hop limit 64)   | checksummed | (the datagram as is)     |
//   +----------------+---------------------------+-------------+--------------------------+
// The ICRC covers the IPv4 ID, which the caller supplies: 0 for a single datagram, k for the
// k-th segment of a GSO send, and on receive the ID the ICRC check matched (datapath.cpp), so
// Wireshark verifies the ICRC of every frame whose packet was intact.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <span>
#include <string>

#include "common/status.hpp"
#include "sw/device.hpp"

namespace roce::sw {

// `tmpl` with %p replaced by the process id, %d by `port` and %% by %.
std::string expand_trace_path(const std::string& tmpl, uint16_t port);

class PcapWriter {
public:
    // Creates (truncates) `path` and writes the file header. Frames stop once the file would
    // exceed `limit_bytes` (0: no limit); the first frame refused is logged (warn) once.
    // Errors: io_error with the reason in `err`.
    static Status open(const std::string& path, uint64_t limit_bytes, std::unique_ptr<PcapWriter>& out,
                       std::string& err);
    ~PcapWriter();
    PcapWriter(const PcapWriter&) = delete;
    PcapWriter& operator=(const PcapWriter&) = delete;

    // One packet from `src` to `dst` (same family). `tos`: IPv4 ToS / IPv6 traffic class.
    void write(const WireAddr& src, const WireAddr& dst, uint8_t tos, uint16_t ipv4_id,
               std::span<const uint8_t> udp_payload);
    void flush();

    const std::string& path() const { return path_; }
    uint64_t frames() const { return frames_; }
    bool full() const { return full_; }

private:
    PcapWriter() = default;
    FILE* f_ = nullptr;
    std::string path_;
    uint64_t limit_ = 0;
    uint64_t bytes_ = 0;
    uint64_t frames_ = 0;
    bool full_ = false;
};

} // namespace roce::sw
