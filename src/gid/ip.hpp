// IP addresses and prefixes as the GID policy needs them: one 16-byte form for both families
// (IPv4 held as the IPv4-mapped IPv6 address, which is exactly how a RoCE GID carries it), so
// GIDs, netdev addresses and routes compare without conversions.
#pragma once
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace roce::gid {

enum class Family : uint8_t { inet, inet6 };

constexpr std::string_view to_string(Family f) { return f == Family::inet ? "IPv4" : "IPv6"; }

struct IpAddr {
    std::array<uint8_t, 16> b{};   // IPv4: ::ffff:a.b.c.d

    static std::optional<IpAddr> parse(std::string_view text);   // "10.0.0.1", "fe80::1", "fe80::1%eth0"
    static IpAddr v4(uint32_t host_order);
    static IpAddr from_bytes(const uint8_t raw[16]) { IpAddr a; for (int i = 0; i < 16; ++i) a.b[i] = raw[i]; return a; }

    Family family() const;
    bool is_zero() const;
    // IPv4 169.254/16 and IPv6 fe80::/10: valid only on one link, so a peer elsewhere cannot use them.
    bool is_link_local() const;
    std::string str() const;
    auto operator<=>(const IpAddr&) const = default;
};

struct IpPrefix {
    IpAddr addr;
    uint8_t len = 0;               // in the address's own family: 0..32 for IPv4, 0..128 for IPv6

    static std::optional<IpPrefix> parse(std::string_view text);   // "10.0.0.0/24", "fe80::/64", "10.0.0.1" (=/32)
    Family family() const { return addr.family(); }
    bool contains(const IpAddr& a) const;
    IpPrefix network() const;      // host bits cleared
    std::string str() const;
    auto operator<=>(const IpPrefix&) const = default;
};

} // namespace roce::gid
