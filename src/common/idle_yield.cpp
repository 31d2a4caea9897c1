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
    return cpus > 0 && runnable >= cpus + 2;
}

bool IdleYield::should_yield(unsigned events, uint64_t now) {
    if (events != 0 || after_ns_ == 0) {
        idle_since_ = 0;
        return false;
    }
    if (idle_since_ == 0) {
        idle_since_ = now != 0 ? now : 1;
        return false;
    }
    if (now < idle_since_ || now - idle_since_ < after_ns_)
        return false;
    if (now >= next_probe_) {
        crowded_ = probe_();
        next_probe_ = now + probe_interval_ns;
    }
    return crowded_;
}

} // namespace roce
