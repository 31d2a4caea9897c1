// `roce_doctor wire FILE.pcap [--json]`: per RoCEv2 flow of a capture (tcpdump -w / dumpcap -P,
// or the userspace device's UCX_RC_ROCE_PCAP traces), the traffic class its packets really
// carried: what the switches see.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "gid/doctor.hpp"
#include "gid/ip.hpp"
#include "wire/packet.hpp"
#include "wire/pcap.hpp"

namespace roce::doctor {

void wire_usage(FILE* f) {
    std::fprintf(f,
                 "usage: roce_doctor wire FILE.pcap [--json]\n"
                 "  One line per RoCEv2 flow (UDP port 4791, or any port when the ICRC verifies) of the\n"
                 "  capture and traffic class:\n"
                 "  flow SRC -> DST KIND packets=N tos=T dscp=D ecn=E [vlan=V pcp=P]\n"
                 "  (KIND: rc, uc, ud, cnp, other; vlan and pcp for 802.1Q-tagged frames)\n");
}

namespace {

struct Flow {
    std::string src, dst;
    const char* kind;
    uint8_t tos;
    int vlan;   // -1: untagged
    uint8_t pcp;
    unsigned packets = 0;
};

gid::IpAddr ip_of(const roce::wire::IpContext& ip, const uint8_t* a) {
    if (ip.ipv6)
        return gid::IpAddr::from_bytes(a);
    return gid::IpAddr::v4(uint32_t(a[0]) << 24 | uint32_t(a[1]) << 16 | uint32_t(a[2]) << 8 | a[3]);
}

} // namespace

int wire_main(int argc, char** argv) {
    std::string file;
    bool json = false;
    for (int i = 2; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "-h" || a == "--help") { wire_usage(stdout); return 0; }
        if (a == "--json") json = true;
        else if (a[0] == '-' || !file.empty()) { wire_usage(stderr); return 2; }
        else file = a;
    }
    if (file.empty()) { wire_usage(stderr); return 2; }
    std::vector<roce::wire::PcapFrame> frames;
    std::string err;
    if (roce::wire::read_pcap(file, frames, err) != Status::ok) {
        std::fprintf(stderr, "error: %s: %s\n", file.c_str(), err.c_str());
        return 1;
    }
    static const char* const ecn_names[] = {"not-ect", "ect1", "ect0", "ce"};
    std::vector<Flow> flows;   // in order of first appearance
    for (const auto& f : frames) {
        // UDP port 4791, or any port when the payload is a RoCEv2 packet whose ICRC verifies (the
        // userspace device's traces: ephemeral ports).
        if (f.udp_payload.empty()) continue;
        roce::wire::Packet pkt;
        if (f.ip.dst_port != 4791 && roce::wire::parse(f.payload(), f.ip, true, pkt) != roce::wire::ParseError::none)
            continue;
        const uint8_t op = f.udp_payload[0];
        const char* kind = op == 0x81 ? "cnp" : op < 0x20 ? "rc" : op < 0x40 ? "uc" : (op >= 0x60 && op < 0x80) ? "ud" : "other";
        const Flow key{ip_of(f.ip, f.ip.src_ip).str(), ip_of(f.ip, f.ip.dst_ip).str(), kind, f.tos, f.vlan_id,
                       f.vlan_id >= 0 ? f.vlan_pcp : uint8_t(0)};
        auto it = std::find_if(flows.begin(), flows.end(), [&](const Flow& x) {
            return x.src == key.src && x.dst == key.dst && !std::strcmp(x.kind, key.kind) && x.tos == key.tos &&
                   x.vlan == key.vlan && x.pcp == key.pcp;
        });
        if (it == flows.end()) it = flows.insert(flows.end(), key);
        ++it->packets;
    }
    if (json) {
        std::printf("{\"file\": %s, \"frames\": %zu, \"flows\": [", json_string(file).c_str(), frames.size());
        for (size_t i = 0; i < flows.size(); ++i) {
            const Flow& x = flows[i];
            std::printf("%s\n  {\"src\": %s, \"dst\": %s, \"kind\": \"%s\", \"packets\": %u, \"tos\": %u, \"dscp\": %u, "
                        "\"ecn\": \"%s\"",
                        i ? "," : "", json_string(x.src).c_str(), json_string(x.dst).c_str(), x.kind, x.packets,
                        unsigned(x.tos), unsigned(x.tos >> 2), ecn_names[x.tos & 3]);
            if (x.vlan >= 0)
                std::printf(", \"vlan\": %d, \"pcp\": %u", x.vlan, unsigned(x.pcp));
            std::printf("}");
        }
        std::printf("%s]}\n", flows.empty() ? "" : "\n");
        return 0;
    }
    for (const Flow& x : flows) {
        std::printf("flow %s -> %s %s packets=%u tos=%u dscp=%u ecn=%s", x.src.c_str(), x.dst.c_str(), x.kind,
                    x.packets, unsigned(x.tos), unsigned(x.tos >> 2), ecn_names[x.tos & 3]);
        if (x.vlan >= 0)
            std::printf(" vlan=%d pcp=%u", x.vlan, unsigned(x.pcp));
        std::printf("\n");
    }
    if (flows.empty())
        std::printf("no RoCEv2 packets (UDP port 4791 or a valid ICRC) in %s (%zu frames)\n", file.c_str(), frames.size());
    return 0;
}

} // namespace roce::doctor
