// Live counter files: naming, atomic write, parsing (see counters_file.hpp).
#include "common/counters_file.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <unistd.h>

namespace roce {

std::string counter_file_name(long pid, const std::string& device, uint16_t port, const std::string& transport) {
    return transport + "." + std::to_string(pid) + "." + device + "." + std::to_string(port);
}

bool is_counter_file_name(const std::string& n) {
    const bool rc = n.rfind("rc_roce.", 0) == 0, ud = n.rfind("ud_roce.", 0) == 0;
    const auto pid_end = n.find('.', 8), port_dot = n.rfind('.');
    auto digits = [&](size_t from, size_t to) {
        return to > from && std::all_of(n.begin() + long(from), n.begin() + long(to),
                                        [](char c) { return c >= '0' && c <= '9'; });
    };
    return (rc || ud) && pid_end != std::string::npos && port_dot > pid_end + 1 && digits(8, pid_end) &&
           digits(port_dot + 1, n.size());
}

Status write_counter_file(const std::string& dir, const std::string& name, const CounterSnapshot& snap,
                          std::string& err) {
    const std::string path = dir + "/" + name;
    const std::string tmp = dir + "/." + name + ".tmp";
    FILE* f = std::fopen(tmp.c_str(), "w");
    if (!f) {
        err = "cannot create " + tmp + ": " + std::strerror(errno);
        return Status::io_error;
    }
    std::fprintf(f, "# %s pid=%ld device=%s address=%s time=%.3f\n", snap.transport.c_str(), snap.pid,
                 snap.device.c_str(), snap.address.c_str(), snap.time);
    for (const auto& [k, v] : snap.counters)
        std::fprintf(f, "%s %llu\n", k.c_str(), static_cast<unsigned long long>(v));
    for (const auto& q : snap.qps) {
        std::fprintf(f, "# %s qpn=0x%x dest_qpn=0x%x peer=%s state=%s\n", q.kind.c_str(), q.qpn, q.dest_qpn,
                     q.peer.c_str(), q.state.c_str());
        for (const auto& [k, v] : q.counters)
            std::fprintf(f, "%s %llu\n", k.c_str(), static_cast<unsigned long long>(v));
    }
    const bool write_ok = !std::ferror(f);
    if (std::fclose(f) != 0 || !write_ok) {
        err = "cannot write " + tmp + ": " + std::strerror(errno);
        ::unlink(tmp.c_str());
        return Status::io_error;
    }
    if (std::rename(tmp.c_str(), path.c_str()) != 0) {
        err = "cannot rename " + tmp + " to " + path + ": " + std::strerror(errno);
        ::unlink(tmp.c_str());
        return Status::io_error;
    }
    return Status::ok;
}

Status read_counter_file(const std::string& path, CounterSnapshot& out, std::string& err) {
    std::ifstream in(path);
    if (!in) {
        err = "cannot open " + path;
        return Status::io_error;
    }
    std::string line;
    if (!std::getline(in, line) || (line.rfind("# rc_roce ", 0) != 0 && line.rfind("# ud_roce ", 0) != 0)) {
        err = path + ": not a counter file (no '# rc_roce' or '# ud_roce' header)";
        return Status::invalid_param;
    }
    out = CounterSnapshot{};
    out.transport = line.substr(2, 7);
    std::istringstream hdr(line.substr(10));
    std::string word;
    while (hdr >> word) {
        const auto eq = word.find('=');
        if (eq == std::string::npos)
            continue;
        const std::string k = word.substr(0, eq), v = word.substr(eq + 1);
        if (k == "pid") out.pid = std::strtol(v.c_str(), nullptr, 10);
        else if (k == "device") out.device = v;
        else if (k == "address") out.address = v;
        else if (k == "time") out.time = std::strtod(v.c_str(), nullptr);
    }
    if (out.pid <= 0) {
        err = path + ": header without a pid";
        return Status::invalid_param;
    }
    auto* into = &out.counters;   // the device's counters, then each QP section's
    while (std::getline(in, line)) {
        const bool qp = line.rfind("# qp ", 0) == 0, peer = line.rfind("# peer ", 0) == 0;
        if (qp || peer) {
            QpSnapshot q;
            q.kind = qp ? "qp" : "peer";
            std::istringstream words(line.substr(qp ? 5 : 7));
            while (words >> word) {
                const auto eq = word.find('=');
                if (eq == std::string::npos)
                    continue;
                const std::string k = word.substr(0, eq), v = word.substr(eq + 1);
                if (k == "qpn") q.qpn = uint32_t(std::strtoul(v.c_str(), nullptr, 0));
                else if (k == "dest_qpn") q.dest_qpn = uint32_t(std::strtoul(v.c_str(), nullptr, 0));
                else if (k == "peer") q.peer = v;
                else if (k == "state") q.state = v;
            }
            out.qps.push_back(std::move(q));
            into = &out.qps.back().counters;
            continue;
        }
        std::istringstream l(line);
        std::string name;
        unsigned long long v;
        if (l >> name >> v)
            into->emplace_back(name, v);
    }
    return Status::ok;
}

} // namespace roce
