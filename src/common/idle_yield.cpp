#include "common/idle_yield.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

namespace roce {

bool cpus_oversubscribed() {
    static const long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    // "0.52 1.57 1.74 3/101 12345": the 4th field is runnable/total. Plain read(2): this runs on
    // a polling thread, no stdio buffers or allocation.
    const int fd = open("/proc/loadavg", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return false;
    char buf[128];
    const ssize_t n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n <= 0)
        return false;
    buf[n] = '\0';
    const char* p = buf;
    for (int field = 0; field < 3; ++field) {
        p = std::strchr(p, ' ');
        if (p == nullptr)
            return false;
        ++p;
    }
    char* end = nullptr;
    const long runnable = std::strtol(p, &end, 10);
    if (end == p || *end != '/')
        return false;
    return cpus > 0 && runnable >= 2 * cpus;
}

bool IdleYield::should_yield(unsigned events, Clock clock) {
    if (events != 0 || after_ns_ == 0) {
        empty_ = 0;
        yield_ = false;
        return false;
    }
    // The clock (a helper call per read in a TCG guest) is read once per quiet_polls empty polls;
    // the polls in between repeat the last decision.
    if (++empty_ % quiet_polls != 0)
        return yield_;
    const uint64_t now = clock();
    if (empty_ == quiet_polls) {
        idle_since_ = now;
        return yield_ = false;
    }
    if (now < idle_since_ || now - idle_since_ < after_ns_)
        return yield_ = false;
    if (now >= next_probe_) {
        streak_ = probe_() ? streak_ + 1 : 0;
        next_probe_ = now + probe_interval_ns;
    }
    return yield_ = streak_ >= crowded_probes;
}

} // namespace roce
