#include "sw/class_sockets.hpp"

#include "common/log.hpp"

namespace roce::sw {

uint8_t ClassSockets::get(uint8_t tos, uint8_t priority) {
    if (tos == main_.traffic_class() && priority == main_.class_priority())
        return 0;
    for (size_t i = 0; i < socks_.size(); ++i)
        if (socks_[i]->traffic_class() == tos && socks_[i]->class_priority() == priority)
            return uint8_t(i + 1);
    if (refused_)
        return 0;
    if (socks_.size() >= max) {
        // Logged once: from here on new classes leave from the main socket.
        ROCE_WARN("%s: %zu traffic classes in use, no socket for ToS %u priority %u: peers in it are sent "
                  "to from the device's socket (priority %u; rc_roce keeps their ToS, ud_roce uses the "
                  "device's)", main_.local().to_string().c_str(), socks_.size(), unsigned(tos),
                  unsigned(priority), unsigned(main_.class_priority()));
        refused_ = true;
        return 0;
    }
    auto s = std::make_unique<UdpSocket>();
    if (s->open_sibling(main_, tos, priority) != Status::ok) {   // logged there
        ROCE_WARN("%s: peers whose class differs from the device's are sent to from its socket "
                  "(priority %u; rc_roce keeps their ToS, ud_roce uses the device's)",
                  main_.local().to_string().c_str(), unsigned(main_.class_priority()));
        refused_ = true;
        return 0;
    }
    ROCE_DEBUG("%s: class socket %zu: ToS %u priority %u", main_.local().to_string().c_str(), socks_.size() + 1,
               unsigned(tos), unsigned(priority));
    socks_.push_back(std::move(s));
    return uint8_t(socks_.size());
}

std::vector<int> ClassSockets::fds() const {
    std::vector<int> v{main_.fd()};
    for (const auto& s : socks_)
        v.push_back(s->fd());
    return v;
}

} // namespace roce::sw
