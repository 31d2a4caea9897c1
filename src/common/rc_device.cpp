#include "common/rc_device.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <cstring>
#include <iterator>

namespace roce {

std::string WireAddr::to_string() const {
    char buf[INET6_ADDRSTRLEN] = "?";
    if (family == AF_INET)
        inet_ntop(AF_INET, ip, buf, sizeof(buf));
    else if (family == AF_INET6)
        inet_ntop(AF_INET6, ip, buf, sizeof(buf));
    std::string s = family == AF_INET6 ? "[" + std::string(buf) + "]" : std::string(buf);
    return s + ":" + std::to_string(port);
}

bool WireAddr::is_loopback() const {
    if (family == AF_INET)
        return ip[0] == 127;
    in6_addr a;   // copied: ip[] has no in6_addr alignment (UBSan: misaligned access)
    std::memcpy(&a, ip, sizeof(a));
    return family == AF_INET6 && IN6_IS_ADDR_LOOPBACK(&a);
}

const char* to_string(QpState s) {
    switch (s) {
    case QpState::reset: return "reset";
    case QpState::connecting: return "connecting";
    case QpState::rts: return "rts";
    case QpState::error: return "error";
    }
    return "?";
}

std::string RcDevice::stats_text() const {
    std::string out;
    for (const auto& [name, value] : counters()) {
        if (!out.empty())
            out += ' ';
        out += name;
        out += '=';
        out += std::to_string(value);
    }
    return out;
}

unsigned RcDevice::progress_round(ProgressSink& sink, size_t max_recv) {
    unsigned count = progress();
    Completion buf[64];
    size_t n;
    do {
        n = poll_completions(buf, std::size(buf));
        for (size_t i = 0; i < n; ++i)
            sink.completion(buf[i]);
        count += unsigned(n);
    } while (n == std::size(buf));
    return count + unsigned(poll_recv([&sink](const RecvMessage& m) { sink.message(m); }, max_recv));
}

} // namespace roce
