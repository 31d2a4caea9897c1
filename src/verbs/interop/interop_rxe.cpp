// roce_interop_rxe: our userspace RoCEv2 device (src/sw) against a kernel soft-RoCE (rxe) QP.
//
//   roce_interop_rxe --rxe <dev> --sw-ip <a.b.c.d> [--sw-netns <path>] [--udp-port 4791]
//                    [--gid-index <n>] [--ib-port 1] [--no-gso] [-v]
//
// One process, two ends: the kernel end is a raw verbs RC QP on <dev> (kernel_qp.hpp), moved
// RESET->INIT->RTR->RTS by hand with our GID (::ffff:<sw-ip>), QPN and PSN; the userspace end is
// an sw::Device bound to <sw-ip>:4791 and a QP connected by hand (connect_qp_manual) to rxe's GID
// address, QPN and PSN. Every RoCEv2 packet goes to UDP port 4791, where the kernel's rxe listens
// (in the initial network namespace only), so the userspace device is opened inside another
// network namespace (--sw-netns, e.g. /run/netns/ns1) whose interface reaches rxe's netdev
// without NAT (a veth pair): the IP addresses the ICRC covers stay what each side thinks.
//
// Checks (ops.cpp), each printed as "check <name> pass|FAIL ...", every byte compared: SEND (also
// with immediate), RDMA WRITE (rxe->sw also with immediate), RDMA READ, fetch-add and compare-swap
// in both directions, sizes from 1 byte to 257 packets at rxe's active MTU (which our path MTU
// takes), PSNs across the 2^24 wrap; a wrong rkey in each direction for WRITE and READ (a fresh
// QP pair each: the QP that detects it goes to error) gives a remote access error; the first QP
// pair still works afterwards. Then the ICRC: our device counted no ICRC error and received
// packets; rxe counted ours in rcvd_pkts, which it does only after its ICRC check — shown by a
// negative control, a second userspace device whose packets all carry a flipped bit: they reach
// rxe's UDP socket (InDatagrams) but not rcvd_pkts, and nothing is written. Figures are printed as
// "rxe-result name=interop.... value=... unit=..." lines. Exit 0 when every check passed, 1
// otherwise, 2 on a setup failure.
#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>

#include "common/log.hpp"
#include "verbs/interop/interop.hpp"

namespace roce::verbs::interop {

std::map<std::string, long long> hw_counters(const std::string& dev, uint8_t port) {
    std::map<std::string, long long> out;
    const std::string dir = "/sys/class/infiniband/" + dev + "/ports/" + std::to_string(port) + "/hw_counters";
    DIR* d = opendir(dir.c_str());
    if (!d)
        return out;
    while (dirent* e = readdir(d)) {
        if (e->d_name[0] == '.')
            continue;
        if (FILE* f = std::fopen((dir + "/" + e->d_name).c_str(), "r")) {
            long long v;
            if (std::fscanf(f, "%lld", &v) == 1)
                out[e->d_name] = v;
            std::fclose(f);
        }
    }
    closedir(d);
    return out;
}

long long udp_in_datagrams() {
    FILE* f = std::fopen("/proc/thread-self/net/snmp", "r");
    if (!f)
        return -1;
    char line[1024];
    long long v = -1;
    bool header = false;
    while (std::fgets(line, sizeof(line), f)) {
        if (std::strncmp(line, "Udp: ", 5) != 0)
            continue;
        if (header) {   // "Udp: InDatagrams NoPorts ..." then the values
            v = std::atoll(line + 5);
            break;
        }
        header = true;
    }
    std::fclose(f);
    return v;
}

bool in_netns(const std::string& path, const std::function<bool()>& fn) {
    if (path.empty())
        return fn();
    const int self = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
    const int target = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    bool ok = false;
    if (self < 0 || target < 0 || setns(target, CLONE_NEWNET) != 0) {
        std::fprintf(stderr, "interop: cannot enter network namespace %s: %s\n", path.c_str(), std::strerror(errno));
    } else {
        ok = fn();
        if (setns(self, CLONE_NEWNET) != 0) {
            std::fprintf(stderr, "interop: cannot return to the initial network namespace: %s\n", std::strerror(errno));
            std::exit(2);
        }
    }
    for (int fd : {self, target})
        if (fd >= 0)
            close(fd);
    return ok;
}

bool Interop::setup() {
    std::string err;
    if (!kd.open(opt.rxe, opt.ib_port, opt.gid_index, buf_bytes, err)) {
        std::fprintf(stderr, "interop: %s\n", err.c_str());
        return false;
    }
    mtu = 128u << kd.active_mtu();   // IBV_MTU_256 = 1 ... IBV_MTU_4096 = 5
    const sw::DeviceConfig cfg = sw_config();
    Status s = Status::ok;
    if (!in_netns(opt.netns, [&] { return (s = sw.open(cfg)) == Status::ok; })) {
        std::fprintf(stderr, "interop: userspace device on %s:%u: %s\n", opt.sw_ip.c_str(), unsigned(opt.udp_port),
                     std::string(to_string(s)).c_str());
        return false;
    }
    if ((s = sw.pd->reg_mr(smem.data(), smem.size(), access_all, skeys)) != Status::ok) {
        std::fprintf(stderr, "interop: reg_mr: %s\n", std::string(to_string(s)).c_str());
        return false;
    }
    const std::string gid_ip = kd.gid().addr.to_string();   // "a.b.c.d:0"
    std::printf("interop: kernel %s port %u, GID index %d = ::ffff:%s, active_mtu %u; userspace %s%s%s, path MTU %u, GSO %s\n",
                opt.rxe.c_str(), unsigned(opt.ib_port), kd.gid().index, gid_ip.substr(0, gid_ip.rfind(':')).c_str(), mtu,
                sw.dev->address().to_string().c_str(), opt.netns.empty() ? "" : " in netns ", opt.netns.c_str(),
                mtu, opt.gso ? "on" : "off");
    return true;
}

bool Interop::connect(Link& l, Host& h, uint32_t sw_psn, uint32_t rxe_psn) {
    std::string err;
    if (h.dev->create_qp(l.sq) != Status::ok || !l.kq.create(kd, err)) {
        std::fprintf(stderr, "interop: create QPs: %s\n", err.c_str());
        return false;
    }
    sw::ManualPeer mp;
    mp.addr = kd.gid().addr;
    mp.addr.port = 4791;   // RoCEv2's port: where rxe listens
    mp.qpn = l.kq.qpn();
    mp.sq_psn = sw_psn;
    mp.rq_psn = rxe_psn;
    mp.mtu = mtu;
    RemoteEnd re;   // our GID: the IPv4-mapped address of the userspace device
    re.gid[10] = re.gid[11] = 0xff;
    std::memcpy(re.gid + 12, h.dev->address().ip, 4);
    re.qpn = l.sq;
    re.psn = sw_psn;
    const Status s = h.dev->connect_qp_manual(l.sq, mp);
    if (s != Status::ok || !l.kq.connect(re, rxe_psn, err)) {
        std::fprintf(stderr, "interop: connect: %s %s\n", std::string(to_string(s)).c_str(), err.c_str());
        return false;
    }
    std::printf("interop: QP pair: userspace 0x%06x (sq_psn 0x%06x) <-> %s 0x%06x (sq_psn 0x%06x)\n", l.sq, sw_psn,
                opt.rxe.c_str(), l.kq.qpn(), rxe_psn);
    return true;
}

void Interop::run() {
    // The data link: both sides' PSNs wrap past 2^24 within the first messages.
    Link data;
    if (!connect(data, sw, 0xffffc0, 0xffff80)) {
        ++failed;
        return;
    }
    const uint32_t imm = 0x12345678;
    const size_t sizes[] = {1, 1000, size_t(mtu), size_t(mtu) + 1, 4 * size_t(mtu) + 3, 65536, 257 * size_t(mtu) - 5};
    for (size_t n : sizes) {
        sw_send(data, n, nullptr);
        sw_write(data, n, kd.rkey(), true);
        sw_read(data, n, kd.rkey(), true);
        rxe_send(data, n, nullptr);
        rxe_write(data, n, skeys.rkey, true);
        rxe_read(data, n, skeys.rkey, true);
    }
    sw_send(data, 3000, &imm);
    rxe_send(data, 3000, &imm);
    rxe_write(data, 3000, skeys.rkey, true, &imm);
    sw_atomics(data);
    rxe_atomics(data);

    // A wrong rkey, each on a fresh QP pair (the QP that detects it goes to error, IBTA class C).
    Link bad[4];
    const uint32_t wrong_k = kd.rkey() ^ 0x5a5a5a00u, wrong_s = skeys.rkey ^ 0x5a5a5a00u;
    for (int i = 0; i < 4; ++i)
        if (!connect(bad[i], sw, 0x100 * uint32_t(i + 1), 0x10000 * uint32_t(i + 1))) {
            ++failed;
            return;
        }
    sw_write(bad[0], 100, wrong_k, false);
    sw_read(bad[1], 100, wrong_k, false);
    rxe_write(bad[2], 100, wrong_s, false);
    rxe_read(bad[3], 100, wrong_s, false);
    // Informational: rxe's responder moves its QP to error after the NAK (IBTA class C); ours NAKs
    // and stays in rts (the requester's side fails).
    auto kstate = [](const KernelQp& q) { return q.state() == IBV_QPS_ERR ? "ERR" : "not ERR"; };
    auto sstate = [&](uint32_t q) { return sw.dev->qp_state(q) == sw::QpState::rts ? "rts" : "not rts"; };
    std::printf("interop: after the wrong rkeys: %s QPs that NAKed: %s, %s; userspace QPs that NAKed: %s, %s\n",
                opt.rxe.c_str(), kstate(bad[0].kq), kstate(bad[1].kq), sstate(bad[2].sq), sstate(bad[3].sq));
    // The data link is unaffected.
    sw_send(data, 100, nullptr);
    rxe_send(data, 100, nullptr);
    icrc_control();
}

// Negative control: a second userspace device whose every packet has one bit flipped after the
// BTH (fault injection) writes to rxe. rxe must drop all of them (no rcvd_pkts, memory untouched,
// our requester times out): the passes above mean the ICRC verified, not that rxe ignores it.
void Interop::icrc_control() {
    const double t0 = now_ms();
    sw::DeviceConfig cfg = sw_config();
    cfg.ports = 0;   // only sends: rxe would answer to 4791, which the main device holds
    cfg.faults.corrupt = 1.0;
    cfg.retry_count = 2;
    Host bad;
    Link l;
    if (!in_netns(opt.netns, [&] { return bad.open(cfg) == Status::ok; }) || !connect(l, bad, 0x777, 0x888)) {
        check("rxe.drops_bad_icrc", false, "setup failed", t0);
        return;
    }
    std::memset(kd.buf(), 0, 64);
    const std::vector<uint8_t> src(64, 0xa5);
    const long long rcvd0 = hw_counters(opt.rxe, opt.ib_port)["rcvd_pkts"], udp0 = udp_in_datagrams();
    Status s = bad.dev->post_write(l.sq, 1, src.data(), src.size(), kd.va(0), kd.rkey(), true);
    if (s == Status::ok) {
        const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
        while (!bad.find(1) && std::chrono::steady_clock::now() < end) {
            bad.poll();
            sched_yield();
        }
        s = bad.find(1) ? bad.find(1)->status : Status::in_progress;
    }
    const long long rcvd = hw_counters(opt.rxe, opt.ib_port)["rcvd_pkts"] - rcvd0;
    const long long udp = udp_in_datagrams() - udp0;   // they did reach rxe's UDP socket
    const sw::DeviceStats st = bad.dev->stats();
    const bool untouched = kd.buf()[0] == 0 && kd.buf()[63] == 0;
    check("rxe.drops_bad_icrc",
          s == Status::timeout && untouched && rcvd == 0 && st.faults_corrupted > 0 &&
              (udp0 < 0 || udp >= (long long)st.faults_corrupted),
          "sent " + std::to_string(st.faults_corrupted) + " corrupted, UDP InDatagrams +" + std::to_string(udp) +
              ", rxe rcvd_pkts +" + std::to_string(rcvd) + ", sw " + std::string(to_string(s)), t0);
}

void Interop::finish(const std::map<std::string, long long>& hw0) {
    const sw::DeviceStats st = sw.dev->stats();
    std::printf("interop: userspace device: %s\n", sw.dev->stats_text().c_str());
    const double t0 = now_ms();
    check("sw.icrc_verified", st.rx_packets > 0 && st.icrc_errors == 0,
          "rx_packets " + std::to_string(st.rx_packets) + ", icrc_errors " + std::to_string(st.icrc_errors), t0);
    check("sw.no_malformed_or_stray", st.malformed == 0 && st.dropped_unknown_qp == 0,
          "malformed " + std::to_string(st.malformed) + ", dropped_unknown_qp " + std::to_string(st.dropped_unknown_qp), t0);
    const auto hw1 = hw_counters(opt.rxe, opt.ib_port);
    std::string moved;
    for (const auto& [k, v] : hw1) {
        const long long d = v - (hw0.count(k) ? hw0.at(k) : 0);
        if (d != 0 && k != "lifespan") {
            moved += " " + k + "=+" + std::to_string(d);
            std::printf("rxe-result name=interop.%s.%s value=%lld unit=count\n", opt.rxe.c_str(), k.c_str(), d);
        }
    }
    std::printf("interop: %s hw_counters moved:%s\n", opt.rxe.c_str(), moved.empty() ? " none" : moved.c_str());
    if (!hw1.empty()) {
        const long long rcvd = hw1.count("rcvd_pkts") ? hw1.at("rcvd_pkts") - (hw0.count("rcvd_pkts") ? hw0.at("rcvd_pkts") : 0) : 0;
        check(opt.rxe + ".icrc_verified", rcvd > 0, "rcvd_pkts +" + std::to_string(rcvd), t0);
    }
    std::printf("rxe-result name=interop.sw.rx_packets value=%llu unit=count\n", (unsigned long long)st.rx_packets);
    std::printf("rxe-result name=interop.sw.tx_packets value=%llu unit=count\n", (unsigned long long)st.tx_packets);
    std::printf("rxe-result name=interop.sw.icrc_errors value=%llu unit=count\n", (unsigned long long)st.icrc_errors);
    std::printf("rxe-result name=interop.sw.rx_nonzero_ipv4_id value=%llu unit=count\n",
                (unsigned long long)st.rx_nonzero_ipv4_id);
    std::printf("rxe-result name=interop.sw.retransmits value=%llu unit=count\n", (unsigned long long)st.retransmits);
    std::printf("rxe-result name=interop.checks_passed value=%d unit=count\n", passed);
    std::printf("interop: %d checks, %d passed, %d failed\n", passed + failed, passed, failed);
}

namespace {
bool parse_options(int argc, char** argv, Options& o) {
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        auto val = [&]() -> const char* { return i + 1 < argc ? argv[++i] : nullptr; };
        const char* v = nullptr;
        if (a == "--rxe" && (v = val())) o.rxe = v;
        else if (a == "--sw-ip" && (v = val())) o.sw_ip = v;
        else if (a == "--sw-netns" && (v = val())) o.netns = v;
        else if (a == "--udp-port" && (v = val())) o.udp_port = uint16_t(std::atoi(v));
        else if (a == "--gid-index" && (v = val())) o.gid_index = std::atoi(v);
        else if (a == "--ib-port" && (v = val())) o.ib_port = uint8_t(std::atoi(v));
        else if (a == "--no-gso") o.gso = false;
        else if (a == "-v") o.verbose = true;
        else return false;
    }
    return !o.rxe.empty() && !o.sw_ip.empty();
}
} // namespace

} // namespace roce::verbs::interop

using namespace roce;
using roce::verbs::interop::Interop;
using roce::verbs::interop::hw_counters;
using roce::verbs::interop::parse_options;

int main(int argc, char** argv) {
    setvbuf(stdout, nullptr, _IOLBF, 0);
    Interop t;
    if (!parse_options(argc, argv, t.opt)) {
        std::fprintf(stderr, "usage: %s --rxe <dev> --sw-ip <a.b.c.d> [--sw-netns <path>] [--udp-port 4791] "
                             "[--gid-index <n>] [--ib-port 1] [--no-gso] [-v]\n", argv[0]);
        return 2;
    }
    if (t.opt.verbose)
        set_log_level(LogLevel::debug);
    const auto hw0 = hw_counters(t.opt.rxe, t.opt.ib_port);
    if (!t.setup())
        return 2;
    t.run();
    t.finish(hw0);
    return t.failed == 0 ? 0 : 1;
}
