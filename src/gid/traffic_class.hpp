// Traffic class of a connection: the IP ToS / IPv6 traffic-class byte (DSCP << 2 | ECN) and the
// 802.1p priority (PCP) that PFC acts on, plus the class of the CNPs the userspace device sends.
//
// Both directions of a connection must use the same class, or one direction is lossless and
// marked while the other is dropped or unmarked (a real complaint: the responder used its own
// class). So each side resolves a local class, advertises it at connection setup, and both apply
// negotiate_traffic_class(local, peer) - a pure, symmetric function.
#pragma once
#include <array>
#include <cstdint>
#include <optional>
#include <string>

#include "gid/config.hpp"

namespace roce::gid {

// How strongly a side holds its value; the stronger side wins the negotiation.
enum class TcSource : uint8_t { builtin = 0, device = 1, config = 2 };

std::string_view to_string(TcSource s);

inline constexpr uint8_t ecn_not_ect = 0, ecn_ect1 = 1, ecn_ect0 = 2;
inline constexpr uint8_t default_dscp = 26;       // UCX/NCCL default: 26 << 2 | ECT(0) = 106
inline constexpr uint8_t default_cnp_dscp = 48;   // mlx5's default CNP DSCP

struct TrafficClass {
    uint8_t tos = default_dscp << 2 | ecn_ect0;
    uint8_t priority = 0;
    TcSource tos_source = TcSource::builtin;
    TcSource priority_source = TcSource::builtin;

    uint8_t dscp() const { return tos >> 2; }
    uint8_t ecn() const { return tos & 3; }
    std::string str() const;   // "tos 106 (DSCP 26, ECT(0)) priority 0 [builtin/builtin]"
    bool operator==(const TrafficClass&) const = default;
};

// A class from a device configuration's bytes (sources as gid::TcSource numbers; larger ones
// count as configured).
TrafficClass traffic_class_of(uint8_t tos, uint8_t tos_source, uint8_t priority, uint8_t priority_source);

// The local class: TRAFFIC_CLASS, else DSCP (+ECN), else the device default
// (tc/<port>/traffic_class, ECN overridable), else DSCP 26. ECN auto means ECT(0) for every
// source that does not carry its own ECN bits, so switches mark instead of drop and congestion
// control can react. PRIORITY, else 0.
TrafficClass resolve_traffic_class(const GidConfig& cfg, std::optional<uint8_t> device_tclass);

// The class both sides use. For the ToS byte and, separately, the priority: the value of the
// side with the stronger source; between equal sources the numerically larger value (both sides
// compute the same answer, and it is the higher class of the two). Symmetric:
// negotiate(a, b) == negotiate(b, a). `conflict` (optional) is set when both sides configured
// different values explicitly - worth a warning.
TrafficClass negotiate_traffic_class(const TrafficClass& local, const TrafficClass& peer, bool* conflict = nullptr);

// What goes into the connection-setup message: 4 bytes, tos | priority | tos_source | prio_source.
using TcAdvert = std::array<uint8_t, 4>;
TcAdvert encode_tc_advert(const TrafficClass& tc);
std::optional<TrafficClass> decode_tc_advert(const TcAdvert& a);   // nullopt on out-of-range fields

// The class to use with a peer that advertised `peer`: negotiate_traffic_class of ours and its;
// ours when the advert does not decode.
TrafficClass class_with(const TrafficClass& ours, const TcAdvert& peer);

// Congestion notification packets of the userspace device: DSCP from CNP_DSCP (48), Not-ECT (a
// CNP is itself the congestion signal; it must not be marked or dropped as ECN-capable traffic),
// and the data priority so it follows the same lossless queue.
struct CnpClass {
    uint8_t tos = default_cnp_dscp << 2;
    uint8_t priority = 0;
};
CnpClass cnp_class(const GidConfig& cfg, const TrafficClass& data);

} // namespace roce::gid
