// SPDX-License-Identifier: Apache-2.0
// One spdlog logger per process, writing to stderr with glog's line prefix
// (`I1122 17:25:08.123456 1234 net.cpp:42] ...`), so Caffe's log tools parse our logs.
// The level comes from CORTADO_LOG_LEVEL (trace, debug, info, warn, error, off) or SetLogLevel.
#pragma once

#ifndef SPDLOG_ACTIVE_LEVEL
#define SPDLOG_ACTIVE_LEVEL SPDLOG_LEVEL_DEBUG
#endif
#include <spdlog/spdlog.h>

#include <string>

namespace cortado {

// The process logger; thread-safe.
spdlog::logger* Logger();
// "trace", "debug", "info", "warn", "error" or "off".
void SetLogLevel(const std::string& level);
// Renames the logger (for example "rank 3"); call before other threads log.
void SetLoggerName(const std::string& name);
// Quiet threads drop INFO and DEBUG lines (warnings and errors still go out): the data-parallel
// trainer makes its non-root replicas quiet so that only the root replica logs training.
// Affects the calling thread only.
void SetThreadQuiet(bool quiet);

}  // namespace cortado

#define CORTADO_LOG_DEBUG(...) SPDLOG_LOGGER_DEBUG(::cortado::Logger(), __VA_ARGS__)
#define CORTADO_LOG_INFO(...) SPDLOG_LOGGER_INFO(::cortado::Logger(), __VA_ARGS__)
#define CORTADO_LOG_WARN(...) SPDLOG_LOGGER_WARN(::cortado::Logger(), __VA_ARGS__)
#define CORTADO_LOG_ERROR(...) SPDLOG_LOGGER_ERROR(::cortado::Logger(), __VA_ARGS__)
// Logs a warning the first time this line is reached in the process.
#define CORTADO_LOG_WARN_ONCE(...)                                              \
  do {                                                                          \
    static std::once_flag cortado_warn_once_;                                   \
    std::call_once(cortado_warn_once_, [&] { CORTADO_LOG_WARN(__VA_ARGS__); }); \
  } while (0)
