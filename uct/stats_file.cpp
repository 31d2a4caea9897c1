// Live counter files of the interfaces (see stats_file.hpp).
#include "stats_file.hpp"

#include <ctime>
#include <unistd.h>

#include <ucs/debug/log.h>

namespace roce::uct {

namespace {
constexpr double interval_s = 1.0;
}

void StatsFile::open(const char* dir, const char* transport, const std::string& device, uint16_t port) {
    if (dir == nullptr || dir[0] == '\0')
        return;
    dir_ = dir;
    transport_ = transport;
    device_ = device;
    file_ = counter_file_name(static_cast<long>(getpid()), device, port, transport);
}

void StatsFile::write(CounterSnapshot snap) {
    if (!enabled())
        return;
    next_ = ucs_get_time() + ucs_time_from_sec(interval_s);
    snap.pid = static_cast<long>(getpid());
    snap.device = device_;
    snap.transport = transport_;
    timespec ts{};
    clock_gettime(CLOCK_REALTIME, &ts);
    snap.time = static_cast<double>(ts.tv_sec) + ts.tv_nsec / 1e9;
    std::string err;
    if (write_counter_file(dir_, file_, snap, err) != Status::ok) {
        ucs_warn("%s: STATS_DIR: %s; counters are no longer written", transport_.c_str(), err.c_str());
        dir_.clear();
    }
}

} // namespace roce::uct
