#include "gid/ip.hpp"

#include <arpa/inet.h>

#include <charconv>
#include <cstring>

namespace roce::gid {
namespace {

constexpr uint8_t v4_mapped_prefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};

} // namespace

std::optional<IpAddr> IpAddr::parse(std::string_view text) {
    // A zone ("fe80::1%eth0") names the link, not part of the address.
    if (auto pct = text.find('%'); pct != std::string_view::npos) text = text.substr(0, pct);
    if (text.empty() || text.size() >= INET6_ADDRSTRLEN) return std::nullopt;
    char buf[INET6_ADDRSTRLEN];
    std::memcpy(buf, text.data(), text.size());
    buf[text.size()] = '\0';
    IpAddr a;
    in_addr v4{};
    if (inet_pton(AF_INET, buf, &v4) == 1) {
        std::memcpy(a.b.data(), v4_mapped_prefix, 12);
        std::memcpy(a.b.data() + 12, &v4, 4);
        return a;
    }
    if (inet_pton(AF_INET6, buf, a.b.data()) == 1) return a;
    return std::nullopt;
}

IpAddr IpAddr::v4(uint32_t host_order) {
    IpAddr a;
    std::memcpy(a.b.data(), v4_mapped_prefix, 12);
    a.b[12] = host_order >> 24;
    a.b[13] = host_order >> 16;
    a.b[14] = host_order >> 8;
    a.b[15] = host_order;
    return a;
}

Family IpAddr::family() const {
    return std::memcmp(b.data(), v4_mapped_prefix, 12) == 0 ? Family::inet : Family::inet6;
}

bool IpAddr::is_zero() const {
    for (uint8_t x : b) if (x) return false;
    return true;
}

bool IpAddr::is_link_local() const {
    if (family() == Family::inet) return b[12] == 169 && b[13] == 254;
    return b[0] == 0xfe && (b[1] & 0xc0) == 0x80;
}

std::string IpAddr::str() const {
    char buf[INET6_ADDRSTRLEN] = {};
    if (family() == Family::inet) inet_ntop(AF_INET, b.data() + 12, buf, sizeof(buf));
    else inet_ntop(AF_INET6, b.data(), buf, sizeof(buf));
    return buf;
}

std::optional<IpPrefix> IpPrefix::parse(std::string_view text) {
    const auto slash = text.find('/');
    auto addr = IpAddr::parse(text.substr(0, slash));
    if (!addr) return std::nullopt;
    const unsigned max = addr->family() == Family::inet ? 32 : 128;
    unsigned len = max;
    if (slash != std::string_view::npos) {
        const auto digits = text.substr(slash + 1);
        auto [p, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), len);
        if (ec != std::errc() || p != digits.data() + digits.size() || digits.empty() || len > max) return std::nullopt;
    }
    return IpPrefix{*addr, static_cast<uint8_t>(len)};
}

bool IpPrefix::contains(const IpAddr& a) const {
    if (a.family() != family()) return false;
    const unsigned bits = len + (family() == Family::inet ? 96 : 0);
    for (unsigned i = 0; i < bits; ++i) {
        const uint8_t mask = 0x80 >> (i % 8);
        if ((a.b[i / 8] & mask) != (addr.b[i / 8] & mask)) return false;
    }
    return true;
}

IpPrefix IpPrefix::network() const {
    IpPrefix n = *this;
    const unsigned bits = len + (family() == Family::inet ? 96 : 0);
    for (unsigned i = bits; i < 128; ++i) n.addr.b[i / 8] &= ~(0x80 >> (i % 8));
    return n;
}

std::string IpPrefix::str() const { return addr.str() + "/" + std::to_string(len); }

} // namespace roce::gid
