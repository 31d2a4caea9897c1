#include "sw/class_sockets.hpp"

#include <algorithm>

#include "common/log.hpp"

namespace roce::sw {

uint8_t ClassSockets::get(uint8_t tos, uint8_t priority) {
    if (tos == main_.traffic_class() && priority == main_.class_priority())
        return 0;
    for (size_t i = 0; i < socks_.size(); ++i) {
        if (socks_[i]->traffic_class() == tos && socks_[i]->class_priority() == priority) {
            ++users_[i];
            return uint8_t(i + 1);
        }
    }
    if (refused_)
        return 0;
    size_t slot = socks_.size();
    if (slot >= max) {
        slot = size_t(std::find(users_.begin(), users_.end(), 0u) - users_.begin());   // one nobody uses
        if (slot == socks_.size()) {
            if (!warned_full_)   // once: from here on classes without a socket leave from the main one
                ROCE_WARN("%s: %zu traffic classes in use, no socket for ToS %u priority %u: peers in it are "
                          "sent to from the device's socket (priority %u; rc_roce keeps their ToS, ud_roce uses "
                          "the device's)", main_.local().to_string().c_str(), socks_.size(), unsigned(tos),
                          unsigned(priority), unsigned(main_.class_priority()));
            warned_full_ = true;
            return 0;
        }
    }
    auto s = std::make_unique<UdpSocket>();
    if (s->open_sibling(main_, tos, priority) != Status::ok) {   // logged there
        ROCE_WARN("%s: peers whose class differs from the device's are sent to from its socket "
                  "(priority %u; rc_roce keeps their ToS, ud_roce uses the device's)",
                  main_.local().to_string().c_str(), unsigned(main_.class_priority()));
        refused_ = true;
        return 0;
    }
    ROCE_DEBUG("%s: class socket %zu: ToS %u priority %u", main_.local().to_string().c_str(), slot + 1,
               unsigned(tos), unsigned(priority));
    if (slot == socks_.size()) {
        socks_.push_back(std::move(s));
        users_.push_back(1);
    } else {
        socks_[slot] = std::move(s);   // the unused sibling in another class closes
        users_[slot] = 1;
    }
    return uint8_t(slot + 1);
}

void ClassSockets::release(uint8_t id) {
    if (id != 0 && id <= users_.size() && users_[id - 1u] != 0)
        --users_[id - 1u];
}

std::vector<int> ClassSockets::fds() const {
    std::vector<int> v{main_.fd()};
    for (const auto& s : socks_)
        v.push_back(s->fd());
    return v;
}

} // namespace roce::sw
