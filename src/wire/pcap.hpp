// Reader for classic pcap captures of RoCEv2 traffic (tcpdump -w), so tests can replay what a
// kernel RoCE stack (rxe) really put on the wire. Link type EN10MB only: Ethernet, optional
// 802.1Q tag, IPv4 (any IHL) or IPv6 (UDP as the first next header), UDP.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "common/status.hpp"
#include "wire/packet.hpp"

namespace roce::wire {

// Classic pcap format constants (shared by this reader and the userspace device's writer,
// sw/pcap_writer.hpp).
inline constexpr uint32_t pcap_magic_usec = 0xa1b2c3d4, pcap_magic_nsec = 0xa1b23c4d;
inline constexpr uint32_t pcap_linktype_ethernet = 1;   // LINKTYPE_ETHERNET (EN10MB)

struct PcapFrame {
    uint32_t frame_no = 0;        // 1-based position in the file, as Wireshark numbers frames
    int64_t ts_ns = 0;            // capture timestamp (capturing host's clock)
    IpContext ip;                 // real addresses, ports, IPv4 ID and DF; ipv4_id_known = true
    uint8_t tos = 0;              // IPv4 TOS / IPv6 traffic class, as captured
    uint8_t ttl = 0;              // IPv4 TTL / IPv6 hop limit, as captured
    int vlan_id = -1;             // 802.1Q VID, -1 when untagged
    uint8_t vlan_pcp = 0;         // 802.1Q priority code point (what PFC pauses by), when tagged
    uint16_t udp_checksum = 0;
    std::vector<uint8_t> ip_header;     // IPv4 (incl. options) / IPv6 fixed header, as captured
    std::vector<uint8_t> udp_header;    // 8 bytes, as captured
    std::vector<uint8_t> udp_payload;   // the whole UDP payload (BTH .. ICRC)

    std::span<const uint8_t> payload() const { return udp_payload; }
};

// Appends every UDP frame of the capture to `out` (frames that are not IPv4/IPv6 UDP, and IPv4
// fragments, are skipped but still counted in frame_no). A malformed or truncated file yields
// Status::io_error / Status::invalid_param with a human-readable reason in `err`; `out` then
// holds the frames decoded before the problem.
Status read_pcap(const std::string& path, std::vector<PcapFrame>& out, std::string& err);

// Same, from bytes already in memory (fuzzing and tests).
Status parse_pcap(std::span<const uint8_t> file, std::vector<PcapFrame>& out, std::string& err);

} // namespace roce::wire
