// The live counter file of one interface (UCX_RC_ROCE_STATS_DIR / UCX_UD_ROCE_STATS_DIR, format in
// common/counters_file.hpp): rewritten from progress about once a second (the time test is
// ucs_get_time, no system call) and at close. A failed write warns once and turns the file off.
#pragma once

#include <string>
#include <vector>

#include <ucs/time/time.h>

#include "common/counters_file.hpp"

namespace roce::uct {

class StatsFile {
public:
    // Off when dir is null or empty.
    void open(const char* dir, const char* transport, const std::string& device, uint16_t port);
    bool enabled() const { return !dir_.empty(); }
    bool due() const { return enabled() && ucs_get_time() >= next_; }
    // Writes the snapshot (pid, device, transport and time are filled in here).
    void write(CounterSnapshot snap);

private:
    std::string dir_, file_, transport_, device_;
    ucs_time_t next_ = 0;
};

} // namespace roce::uct
