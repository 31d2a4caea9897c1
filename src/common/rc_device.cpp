#include "common/rc_device.hpp"

namespace roce {

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

} // namespace roce
