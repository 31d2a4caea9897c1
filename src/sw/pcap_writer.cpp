// pcap writer of the userspace device: file header, per frame a record header and the rebuilt
// Ethernet / IP / UDP headers in front of the datagram (see pcap_writer.hpp).
#include "sw/pcap_writer.hpp"

#include <cerrno>
#include <cstring>
#include <ctime>
#include <unistd.h>

#include <sys/socket.h>

#include "common/log.hpp"
#include "wire/byteorder.hpp"
#include "wire/inet_csum.hpp"
#include "wire/pcap.hpp"

namespace roce::sw {
namespace {

constexpr uint32_t snaplen = 65535;
constexpr uint8_t ip_ttl = 64;
constexpr uint8_t ipproto_udp = 17;

} // namespace

std::string expand_trace_path(const std::string& tmpl, uint16_t port) {
    std::string out;
    for (size_t i = 0; i < tmpl.size(); ++i) {
        if (tmpl[i] != '%' || i + 1 == tmpl.size()) {
            out += tmpl[i];
            continue;
        }
        const char c = tmpl[++i];
        if (c == 'p')
            out += std::to_string(getpid());
        else if (c == 'd')
            out += std::to_string(port);
        else if (c == '%')
            out += '%';
        else {
            out += '%';
            out += c;
        }
    }
    return out;
}

Status PcapWriter::open(const std::string& path, uint64_t limit_bytes, std::unique_ptr<PcapWriter>& out,
                        std::string& err) {
    std::unique_ptr<PcapWriter> w(new PcapWriter);
    w->f_ = std::fopen(path.c_str(), "wb");
    if (!w->f_) {
        err = "cannot create " + path + ": " + std::strerror(errno);
        return Status::io_error;
    }
    w->path_ = path;
    w->limit_ = limit_bytes;
    // Native byte order: readers detect it from the magic.
    const uint32_t hdr[6] = {wire::pcap_magic_nsec, 0x00040002u /* version 2.4 */, 0, 0, snaplen,
                             wire::pcap_linktype_ethernet};
    static_assert(sizeof(hdr) == 24);
    if (std::fwrite(hdr, sizeof(hdr), 1, w->f_) != 1) {
        err = "cannot write " + path + ": " + std::strerror(errno);
        return Status::io_error;
    }
    w->bytes_ = sizeof(hdr);
    out = std::move(w);
    return Status::ok;
}

PcapWriter::~PcapWriter() {
    if (f_ && std::fclose(f_) != 0)
        ROCE_WARN("packet trace %s: %s", path_.c_str(), std::strerror(errno));
}

void PcapWriter::flush() {
    if (f_)
        std::fflush(f_);
}

void PcapWriter::write(const WireAddr& src, const WireAddr& dst, uint8_t tos, uint16_t ipv4_id,
                       std::span<const uint8_t> udp_payload) {
    if (full_)
        return;
    const bool v6 = src.family == AF_INET6;
    const size_t ip_len = v6 ? 40 : 20;
    const size_t udp_len = 8 + udp_payload.size();
    const size_t frame_len = 14 + ip_len + udp_len;
    if (frame_len > snaplen)
        return;   // larger than any datagram the device sends or accepts
    if (limit_ && bytes_ + 16 + frame_len > limit_) {
        full_ = true;
        ROCE_WARN("packet trace %s reached its size limit (%llu bytes, %llu frames): no more frames "
                  "are written (UCX_RC_ROCE_PCAP_SIZE)", path_.c_str(), (unsigned long long)limit_,
                  (unsigned long long)frames_);
        return;
    }
    uint8_t h[14 + 40 + 8] = {};   // Ethernet + IP + UDP
    wire::be::store16(h + 12, v6 ? 0x86dd : 0x0800);
    uint8_t* ip = h + 14;
    uint8_t* udp = ip + ip_len;
    uint32_t pseudo = 0;   // UDP checksum pseudo-header
    if (v6) {
        wire::be::store32(ip, 6u << 28 | uint32_t(tos) << 20);
        wire::be::store16(ip + 4, uint16_t(udp_len));
        ip[6] = ipproto_udp;
        ip[7] = ip_ttl;
        std::memcpy(ip + 8, src.ip, 16);
        std::memcpy(ip + 24, dst.ip, 16);
        pseudo = wire::csum_add(pseudo, ip + 8, 32);
    } else {
        ip[0] = 0x45;
        ip[1] = tos;
        wire::be::store16(ip + 2, uint16_t(20 + udp_len));
        wire::be::store16(ip + 4, ipv4_id);
        wire::be::store16(ip + 6, 0x4000);   // DF
        ip[8] = ip_ttl;
        ip[9] = ipproto_udp;
        std::memcpy(ip + 12, src.ip, 4);
        std::memcpy(ip + 16, dst.ip, 4);
        wire::be::store16(ip + 10, wire::csum_fold(wire::csum_add(0, ip, 20)));
        pseudo = wire::csum_add(pseudo, ip + 12, 8);
    }
    pseudo += ipproto_udp + uint32_t(udp_len);
    wire::be::store16(udp, src.port);
    wire::be::store16(udp + 2, dst.port);
    wire::be::store16(udp + 4, uint16_t(udp_len));
    uint16_t sum = wire::csum_fold(wire::csum_add(wire::csum_add(pseudo, udp, 8), udp_payload.data(), udp_payload.size()));
    wire::be::store16(udp + 6, sum ? sum : 0xffff);

    timespec ts{};
    clock_gettime(CLOCK_REALTIME, &ts);
    const uint32_t rec[4] = {uint32_t(ts.tv_sec), uint32_t(ts.tv_nsec), uint32_t(frame_len),
                             uint32_t(frame_len)};
    const size_t hdr_len = 14 + ip_len + 8;
    if (std::fwrite(rec, sizeof(rec), 1, f_) != 1 || std::fwrite(h, hdr_len, 1, f_) != 1 ||
        (!udp_payload.empty() && std::fwrite(udp_payload.data(), udp_payload.size(), 1, f_) != 1)) {
        full_ = true;
        ROCE_WARN("packet trace %s: write failed (%s); tracing stopped", path_.c_str(), std::strerror(errno));
        return;
    }
    bytes_ += sizeof(rec) + frame_len;
    ++frames_;
}

} // namespace roce::sw
