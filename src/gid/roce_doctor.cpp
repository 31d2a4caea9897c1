// roce_doctor: diagnostics for RoCE setups. One subcommand per file:
//   `gid`      (doctor_gid.cpp): each RoCE port's GID table, the entry chosen per peer (or per local
//              subnet) and why every other entry was rejected, and the traffic class;
//   `wire`     (doctor_wire.cpp): per RoCEv2 flow of a packet capture, the traffic class its
//              packets really carried: what the switches see;
//   `counters` (doctor_counters.cpp): the live counter files rc_roce / ud_roce interfaces write
//              (UCX_*_ROCE_STATS_DIR): per interface, per peer, per QP;
//   `devices`  (doctor_devices.cpp): RDMA ports and the userspace device's netdevs with their MTUs,
//              GIDs, traffic class, PFC/ECN settings and locality, and checks of each;
//   `serve` / `check PEER` (doctor_serve.cpp, doctor_check.cpp): a pair of hosts end to end: the
//              route, the netdev and path MTU against our RoCEv2 packet size, and data-checked
//              ping-pongs over the userspace device (RC, UD) and the verbs backend.
// Every subcommand prints text, or JSON with --json; checks exit 1 when one failed, usage errors 2.
#include <cstdio>
#include <cstring>

#include "gid/doctor.hpp"
#include "gid/doctor_check.hpp"
#include "gid/doctor_serve.hpp"

namespace {

int usage(FILE* f) {
    roce::doctor::gid_usage(f);
    roce::doctor::wire_usage(f);
    std::fprintf(f,
                 "usage: roce_doctor devices [--json]\n"
                 "  RDMA ports and the userspace device's netdevs: state, MTUs, GIDs, traffic class, PFC/ECN,\n"
                 "  NUMA node and CPUs (hwloc), with checks (exit 1 when one fails).\n"
                 "usage: roce_doctor counters [DIR] [--json] [--live] [--device] [--sum NAME[,NAME...]]\n"
                 "  Live counters of rc_roce / ud_roce interfaces (UCX_*_ROCE_STATS_DIR): device, per peer, per QP.\n");
    roce::doctor::serve_usage(f);
    roce::doctor::check_usage(f);
    return f == stderr ? 2 : 0;
}

} // namespace

int main(int argc, char** argv) {
    using namespace roce::doctor;
    if (argc < 2) return usage(stderr);
    if (!std::strcmp(argv[1], "-h") || !std::strcmp(argv[1], "--help")) return usage(stdout);
    if (!std::strcmp(argv[1], "gid")) return gid_main(argc, argv);
    if (!std::strcmp(argv[1], "wire")) return wire_main(argc, argv);
    if (!std::strcmp(argv[1], "counters")) return counters_main(argc, argv);
    if (!std::strcmp(argv[1], "devices")) return devices_main(argc, argv);
    if (!std::strcmp(argv[1], "serve")) return serve_main(argc, argv);
    if (!std::strcmp(argv[1], "check")) return check_main(argc, argv);
    std::fprintf(stderr, "roce_doctor: unknown subcommand '%s'; valid: gid, wire, counters, devices, serve, check\n",
                 argv[1]);
    return 2;
}
