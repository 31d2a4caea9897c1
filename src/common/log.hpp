// Minimal logging for the core. The sink is replaceable so uct/ can route messages into UCX's
// log; errors are logged once, where first detected.
#pragma once
#include <cstdarg>

namespace roce {

enum class LogLevel : int { error = 0, warn = 1, info = 2, debug = 3 };

using LogSink = void (*)(LogLevel, const char* msg);

void set_log_sink(LogSink sink);
void set_log_level(LogLevel level);   // default: warn, or UCX_RC_ROCE_LOG_LEVEL / ROCE_LOG_LEVEL
bool log_enabled(LogLevel level);
void log(LogLevel level, const char* fmt, ...) __attribute__((format(printf, 2, 3)));

} // namespace roce

#define ROCE_LOG(lvl, ...) \
    do { if (::roce::log_enabled(::roce::LogLevel::lvl)) ::roce::log(::roce::LogLevel::lvl, __VA_ARGS__); } while (0)
#define ROCE_ERROR(...) ROCE_LOG(error, __VA_ARGS__)
#define ROCE_WARN(...)  ROCE_LOG(warn, __VA_ARGS__)
#define ROCE_INFO(...)  ROCE_LOG(info, __VA_ARGS__)
#define ROCE_DEBUG(...) ROCE_LOG(debug, __VA_ARGS__)
