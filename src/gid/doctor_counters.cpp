// `roce_doctor counters`: the live counter files rc_roce and ud_roce interfaces write with
// UCX_RC_ROCE_STATS_DIR / UCX_UD_ROCE_STATS_DIR=DIR (common/counters_file.hpp). Per interface: the
// device's counters, then per peer (rc_roce: the sums over the QPs connected to one peer device;
// ud_roce: its reliability state per peer) and per QP (its nonzero counters and gauges).
// Human-readable, or JSON with --json.
#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <dirent.h>
#include <map>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "common/counters_file.hpp"
#include "gid/doctor.hpp"

namespace roce::doctor {

std::string json_string(const std::string& v) {
    std::string out = "\"";
    for (const char c : v) {
        if (c == '"' || c == '\\') {
            out += '\\';
            out += c;
        } else if (static_cast<unsigned char>(c) < 0x20) {
            char b[8];
            std::snprintf(b, sizeof(b), "\\u%04x", c);
            out += b;
        } else {
            out += c;
        }
    }
    return out + "\"";
}

namespace {

using CounterList = std::vector<std::pair<std::string, uint64_t>>;

int usage(FILE* f) {
    std::fprintf(f,
                 "usage: roce_doctor counters [DIR] [--json] [--live] [--device] [--sum NAME[,NAME...]]\n"
                 "  The counters of every rc_roce / ud_roce interface that writes to DIR\n"
                 "  (UCX_RC_ROCE_STATS_DIR=DIR or UCX_UD_ROCE_STATS_DIR=DIR; default: the first of them that is\n"
                 "  set): the device's, per peer (sums over its QPs) and per QP (nonzero\n"
                 "  counters and the gauges *_now: outstanding work, window, RTT, CC rate). Interfaces of\n"
                 "  processes that have exited are marked, or with --live left out. --device: the device's\n"
                 "  counters only. --sum: for each NAME a line \"NAME TOTAL\", the device counter summed over\n"
                 "  the interfaces, exited ones too (a|b: the sum of both; what scripts check after a run).\n");
    return f == stderr ? 2 : 0;
}

bool pid_alive(long pid) { return ::kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM; }

bool is_gauge(const std::string& name) {
    return name.size() > 4 && name.compare(name.size() - 4, 4, "_now") == 0;
}

// One peer device: its QPs (open ones; destroyed ones come as one "closed" entry) and the sums of
// their counters (gauges too, except the rate/window/RTT ones that do not add up: per QP only).
struct Peer {
    std::string addr;
    unsigned qps = 0, qps_rts = 0;
    CounterList sums;
};

std::vector<Peer> peers_of(const CounterSnapshot& snap) {
    std::vector<Peer> out;
    for (const auto& q : snap.qps) {
        auto it = std::find_if(out.begin(), out.end(), [&](const Peer& p) { return p.addr == q.peer; });
        if (it == out.end()) {
            out.push_back(Peer{q.peer, 0, 0, {}});
            it = out.end() - 1;
        }
        it->qps += q.state != "closed";
        it->qps_rts += q.state == "rts" || q.state == "ok";
        for (const auto& kv : q.counters) {
            const std::string& k = kv.first;
            if (is_gauge(k) && k != "outstanding_now" && q.kind != "peer")   // ud_roce: one section per peer
                continue;
            auto c = std::find_if(it->sums.begin(), it->sums.end(), [&](const auto& e) { return e.first == k; });
            if (c == it->sums.end())
                it->sums.push_back(kv);
            else
                c->second += kv.second;
        }
    }
    return out;
}

std::string json_counters(const CounterList& list) {
    std::string out = "{";
    for (size_t k = 0; k < list.size(); ++k)
        out += (k ? ", " : "") + json_string(list[k].first) + ": " + std::to_string(list[k].second);
    return out + "}";
}

std::string nonzero_text(const CounterList& list) {
    std::string out;
    for (const auto& [k, v] : list)
        if (v != 0 || is_gauge(k))
            out += " " + k + "=" + std::to_string(v);
    return out.empty() ? " (all zero)" : out;
}

struct Entry {
    std::string file;
    CounterSnapshot snap;
    bool alive;
};

void print_json(const std::string& dir, const std::vector<Entry>& entries, double now, bool device_only) {
    std::printf("{\"dir\": %s, \"interfaces\": [", json_string(dir).c_str());
    for (size_t i = 0; i < entries.size(); ++i) {
        const Entry& e = entries[i];
        std::printf("%s\n  {\"file\": %s, \"transport\": %s, \"pid\": %ld, \"alive\": %s, \"device\": %s, "
                    "\"address\": %s, \"time\": %.3f, \"age_s\": %.3f, \"counters\": %s",
                    i ? "," : "", json_string(e.file).c_str(), json_string(e.snap.transport).c_str(), e.snap.pid,
                    e.alive ? "true" : "false",
                    json_string(e.snap.device).c_str(), json_string(e.snap.address).c_str(), e.snap.time,
                    now - e.snap.time, json_counters(e.snap.counters).c_str());
        if (!device_only) {
            std::printf(",\n   \"peers\": [");
            const auto peers = peers_of(e.snap);
            for (size_t p = 0; p < peers.size(); ++p)
                std::printf("%s{\"peer\": %s, \"qps\": %u, \"qps_rts\": %u, \"counters\": %s}", p ? ", " : "",
                            json_string(peers[p].addr).c_str(), peers[p].qps, peers[p].qps_rts,
                            json_counters(peers[p].sums).c_str());
            std::printf("],\n   \"qps\": [");
            for (size_t q = 0; q < e.snap.qps.size(); ++q) {
                const QpSnapshot& s = e.snap.qps[q];
                std::printf("%s{\"kind\": %s, \"qpn\": %u, \"dest_qpn\": %u, \"peer\": %s, \"state\": %s, "
                            "\"counters\": %s}",
                            q ? ", " : "", json_string(s.kind).c_str(), s.qpn, s.dest_qpn, json_string(s.peer).c_str(),
                            json_string(s.state).c_str(), json_counters(s.counters).c_str());
            }
            std::printf("]");
        }
        std::printf("}");
    }
    std::printf("%s]}\n", entries.empty() ? "" : "\n");
}

// "NAME TOTAL" per comma-separated item of `names`; an item a|b sums both counters.
void print_sums(const std::vector<Entry>& entries, const std::string& names) {
    std::stringstream items(names);
    for (std::string item; std::getline(items, item, ',');) {
        if (item.empty())
            continue;
        uint64_t total = 0;
        std::stringstream alts(item);
        for (std::string name; std::getline(alts, name, '|');)
            for (const Entry& e : entries)
                for (const auto& [k, v] : e.snap.counters)
                    if (k == name)
                        total += v;
        std::printf("%s %llu\n", item.c_str(), static_cast<unsigned long long>(total));
    }
}

void print_text(const std::vector<Entry>& entries, double now, bool device_only) {
    for (const Entry& e : entries) {
        std::printf("%s  pid %ld (%s)  device %s  address %s  updated %.1f s ago\n", e.snap.transport.c_str(),
                    e.snap.pid, e.alive ? "running" : "exited", e.snap.device.c_str(), e.snap.address.c_str(),
                    now - e.snap.time);
        size_t w = 0;
        for (const auto& [k, v] : e.snap.counters) w = std::max(w, k.size());
        for (const auto& [k, v] : e.snap.counters)
            std::printf("  %-*s %llu\n", int(w), k.c_str(), static_cast<unsigned long long>(v));
        if (!device_only) {
            for (const Peer& p : peers_of(e.snap))
                std::printf("  peer %s  qps=%u (rts %u)%s\n", p.addr.c_str(), p.qps, p.qps_rts,
                            nonzero_text(p.sums).c_str());
            for (const QpSnapshot& q : e.snap.qps) {
                if (q.kind == "peer")
                    continue;   // ud_roce: a section per peer, shown on its peer line above
                if (q.state == "closed")
                    std::printf("  closed qps -> %s%s\n", q.peer.c_str(), nonzero_text(q.counters).c_str());
                else
                    std::printf("  qp 0x%x -> %s qp 0x%x  %s%s\n", q.qpn, q.peer.c_str(), q.dest_qpn,
                                q.state.c_str(), nonzero_text(q.counters).c_str());
            }
        }
        std::printf("\n");
    }
}

} // namespace

int counters_main(int argc, char** argv) {
    std::string dir, sums;
    bool json = false, live_only = false, device_only = false;
    for (int i = 2; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "-h" || a == "--help") return usage(stdout);
        if (a == "--json") json = true;
        else if (a == "--live") live_only = true;
        else if (a == "--device") device_only = true;
        else if (a == "--sum" && i + 1 < argc && argv[i + 1][0] != '-' && argv[i + 1][0] != '\0') sums = argv[++i];
        else if (a[0] == '-' || !dir.empty()) {
            std::fprintf(stderr, "roce_doctor counters: unexpected argument '%s'\n", a.c_str());
            return usage(stderr);
        } else dir = a;
    }
    if (!sums.empty() && (json || live_only)) {
        // (a sum is what a script checks after the job: exited processes count)
        std::fprintf(stderr, "roce_doctor counters: --sum goes with neither --json nor --live\n");
        return usage(stderr);
    }
    if (dir.empty()) {
        for (const char* var : {"UCX_RC_ROCE_STATS_DIR", "UCX_UD_ROCE_STATS_DIR"})
            if (const char* env = std::getenv(var); env != nullptr && *env != '\0' && dir.empty())
                dir = env;
        if (dir.empty()) {
            std::fprintf(stderr, "roce_doctor counters: no DIR given and neither UCX_RC_ROCE_STATS_DIR nor "
                                 "UCX_UD_ROCE_STATS_DIR is set\n");
            return 2;
        }
    }
    DIR* d = ::opendir(dir.c_str());
    if (d == nullptr) {
        std::fprintf(stderr, "error: cannot open %s: %s\n", dir.c_str(), std::strerror(errno));
        return 1;
    }
    std::vector<std::string> names;
    while (const dirent* e = ::readdir(d))
        if (is_counter_file_name(e->d_name)) names.emplace_back(e->d_name);
    ::closedir(d);
    std::sort(names.begin(), names.end());
    std::vector<Entry> entries;
    for (const auto& n : names) {
        Entry e{dir + "/" + n, {}, false};
        std::string err;
        if (read_counter_file(e.file, e.snap, err) != Status::ok) {
            std::fprintf(stderr, "warning: %s\n", err.c_str());
            continue;
        }
        e.alive = pid_alive(e.snap.pid);
        if (live_only && !e.alive) continue;
        entries.push_back(std::move(e));
    }
    timespec ts{};
    clock_gettime(CLOCK_REALTIME, &ts);
    const double now = double(ts.tv_sec) + ts.tv_nsec / 1e9;
    if (!sums.empty()) {
        print_sums(entries, sums);
        return 0;
    }
    if (json) {
        print_json(dir, entries, now, device_only);
        return 0;
    }
    if (entries.empty()) {
        std::printf("no counter files in %s (UCX_RC_ROCE_STATS_DIR=%s or UCX_UD_ROCE_STATS_DIR=%s on the "
                    "processes?)\n", dir.c_str(), dir.c_str(), dir.c_str());
        return 0;
    }
    print_text(entries, now, device_only);
    return 0;
}

} // namespace roce::doctor
