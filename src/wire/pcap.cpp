// Classic pcap: 24-byte file header, then per record a 16-byte header and the frame bytes. The
// magic tells byte order (writer's host) and timestamp resolution (usec / nsec).
#include "wire/pcap.hpp"

#include <cstring>
#include <fstream>
#include <iterator>

#include "wire/byteorder.hpp"

namespace roce::wire {
namespace {

constexpr uint32_t magic_usec = pcap_magic_usec, magic_nsec = pcap_magic_nsec;
constexpr uint32_t linktype_ethernet = pcap_linktype_ethernet;
constexpr uint32_t max_record = 1u << 26;   // far above any snaplen; larger means garbage

struct Reader {
    bool swap = false;
    uint32_t u32(const uint8_t* p) const {
        uint32_t v;
        std::memcpy(&v, p, 4);
        return swap ? __builtin_bswap32(v) : v;
    }
};

// Decodes one Ethernet frame; false (frame skipped) when it is not a complete UDP datagram.
bool decode_frame(std::span<const uint8_t> f, PcapFrame& fr, std::string& why) {
    size_t off = 14;
    if (f.size() < off) { why = "Ethernet header truncated"; return false; }
    uint16_t type = be::load16(&f[12]);
    if (type == 0x8100) {
        if (f.size() < off + 4) { why = "802.1Q tag truncated"; return false; }
        fr.vlan_id = be::load16(&f[14]) & 0x0fff;
        fr.vlan_pcp = uint8_t(f[14] >> 5);
        type = be::load16(&f[16]);
        off += 4;
    }
    std::span<const uint8_t> l3 = f.subspan(off);
    std::span<const uint8_t> udp;
    if (type == 0x0800) {
        if (l3.size() < 20 || (l3[0] >> 4) != 4) { why = "IPv4 header truncated"; return false; }
        const size_t ihl = size_t(l3[0] & 0x0f) * 4, tot = be::load16(&l3[2]);
        if (ihl < 20 || tot < ihl || tot > l3.size()) { why = "IPv4 lengths inconsistent"; return false; }
        const uint16_t frag = be::load16(&l3[6]);
        if (l3[9] != 17) { why = "not UDP"; return false; }
        if (frag & 0x3fff) { why = "IPv4 fragment"; return false; }
        fr.ip.ipv6 = false;
        fr.tos = l3[1];
        fr.ttl = l3[8];
        fr.ip.ipv4_id = be::load16(&l3[4]);
        fr.ip.ipv4_flags_df = (frag & 0x4000) ? 1 : 0;
        std::memcpy(fr.ip.src_ip, &l3[12], 4);
        std::memcpy(fr.ip.dst_ip, &l3[16], 4);
        fr.ip_header.assign(l3.begin(), l3.begin() + ptrdiff_t(ihl));
        udp = l3.subspan(ihl, tot - ihl);   // drops Ethernet trailer padding
    } else if (type == 0x86dd) {
        if (l3.size() < 40 || (l3[0] >> 4) != 6) { why = "IPv6 header truncated"; return false; }
        const size_t plen = be::load16(&l3[4]);
        if (40 + plen > l3.size()) { why = "IPv6 payload length exceeds frame"; return false; }
        if (l3[6] != 17) { why = "not UDP (or IPv6 extension headers)"; return false; }
        fr.ip.ipv6 = true;
        fr.tos = uint8_t(be::load16(&l3[0]) >> 4);
        fr.ttl = l3[7];
        std::memcpy(fr.ip.src_ip, &l3[8], 16);
        std::memcpy(fr.ip.dst_ip, &l3[24], 16);
        fr.ip_header.assign(l3.begin(), l3.begin() + 40);
        udp = l3.subspan(40, plen);
    } else {
        why = "not IP";
        return false;
    }
    if (udp.size() < 8) { why = "UDP header truncated"; return false; }
    const size_t ulen = be::load16(&udp[4]);
    if (ulen < 8 || ulen > udp.size()) { why = "UDP length inconsistent"; return false; }
    fr.ip.src_port = be::load16(&udp[0]);
    fr.ip.dst_port = be::load16(&udp[2]);
    fr.ip.ipv4_id_known = true;
    fr.udp_checksum = be::load16(&udp[6]);
    fr.udp_header.assign(udp.begin(), udp.begin() + 8);
    fr.udp_payload.assign(udp.begin() + 8, udp.begin() + ptrdiff_t(ulen));
    return true;
}

} // namespace

Status parse_pcap(std::span<const uint8_t> file, std::vector<PcapFrame>& out, std::string& err) {
    if (file.size() < 24) {
        err = "pcap: file shorter than the 24-byte header";
        return Status::invalid_param;
    }
    Reader r;
    uint32_t magic;
    std::memcpy(&magic, file.data(), 4);
    bool nsec = false;
    if (magic == magic_usec || magic == magic_nsec) {
        nsec = magic == magic_nsec;
    } else if (__builtin_bswap32(magic) == magic_usec || __builtin_bswap32(magic) == magic_nsec) {
        r.swap = true;
        nsec = __builtin_bswap32(magic) == magic_nsec;
    } else {
        err = "pcap: bad magic (not a classic pcap file; pcapng is not supported)";
        return Status::invalid_param;
    }
    const uint32_t link = r.u32(file.data() + 20) & 0x0fffffff;   // upper bits: FCS info
    if (link != linktype_ethernet) {
        err = "pcap: link type " + std::to_string(link) + " is not Ethernet (EN10MB)";
        return Status::unsupported;
    }
    size_t off = 24;
    for (uint32_t no = 1; off < file.size(); ++no) {
        if (file.size() - off < 16) {
            err = "pcap: record " + std::to_string(no) + " header truncated";
            return Status::io_error;
        }
        const uint8_t* h = file.data() + off;
        const uint32_t sec = r.u32(h), frac = r.u32(h + 4), incl = r.u32(h + 8), orig = r.u32(h + 12);
        off += 16;
        if (incl > max_record || incl > file.size() - off) {
            err = "pcap: record " + std::to_string(no) + " data truncated or length " +
                  std::to_string(incl) + " implausible";
            return Status::io_error;
        }
        std::span<const uint8_t> frame = file.subspan(off, incl);
        off += incl;
        PcapFrame fr;
        fr.frame_no = no;
        fr.ts_ns = int64_t(sec) * 1000000000 + int64_t(frac) * (nsec ? 1 : 1000);
        std::string why;
        if (decode_frame(frame, fr, why)) {
            out.push_back(std::move(fr));
        } else if (incl < orig) {
            err = "pcap: frame " + std::to_string(no) + " cut by the snaplen (" + why + ")";
            return Status::io_error;
        }
    }
    return Status::ok;
}

Status read_pcap(const std::string& path, std::vector<PcapFrame>& out, std::string& err) {
    std::ifstream in(path, std::ios::binary);
    if (!in) {
        err = "pcap: cannot open " + path;
        return Status::io_error;
    }
    std::vector<uint8_t> bytes;
    try {
        bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    } catch (const std::ios_base::failure& e) {
        // libstdc++'s filebuf throws when read(2) fails: a directory opens fine, then EISDIR
        err = "pcap: cannot read " + path + ": " + e.code().message();
        return Status::io_error;
    }
    if (in.bad()) {
        err = "pcap: read error on " + path;
        return Status::io_error;
    }
    const Status s = parse_pcap(bytes, out, err);
    if (s != Status::ok)
        err += " [" + path + "]";
    return s;
}

} // namespace roce::wire
