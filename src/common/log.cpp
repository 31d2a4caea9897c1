#include "common/log.hpp"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace roce {
namespace {

void stderr_sink(LogLevel level, const char* msg) {
    static const char* const names[] = {"ERROR", "WARN", "INFO", "DEBUG"};
    std::fprintf(stderr, "[uct-roce] %s %s\n", names[static_cast<int>(level)], msg);
}

int initial_level() {
    for (const char* var : {"UCX_RC_ROCE_LOG_LEVEL", "ROCE_LOG_LEVEL"}) {
        const char* v = std::getenv(var);
        if (v == nullptr) continue;
        if (!strcasecmp(v, "error")) return 0;
        if (!strcasecmp(v, "warn")) return 1;
        if (!strcasecmp(v, "info")) return 2;
        if (!strcasecmp(v, "debug")) return 3;
    }
    return static_cast<int>(LogLevel::warn);
}

std::atomic<LogSink> g_sink{stderr_sink};
std::atomic<int> g_level{initial_level()};

} // namespace

void set_log_sink(LogSink sink) { g_sink.store(sink ? sink : stderr_sink); }
void set_log_level(LogLevel level) { g_level.store(static_cast<int>(level)); }
bool log_enabled(LogLevel level) { return static_cast<int>(level) <= g_level.load(std::memory_order_relaxed); }

void log(LogLevel level, const char* fmt, ...) {
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    std::vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    g_sink.load()(level, buf);
}

} // namespace roce
