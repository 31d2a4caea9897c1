#include "common/rc_device.hpp"

namespace roce {

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
