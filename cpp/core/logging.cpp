// SPDX-License-Identifier: Apache-2.0
#include "core/logging.hpp"

#include <spdlog/sinks/stdout_sinks.h>

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <mutex>

namespace cortado {
namespace {

std::shared_ptr<spdlog::logger> MakeLogger(const std::string& name) {
  auto sink = std::make_shared<spdlog::sinks::stderr_sink_mt>();
  auto logger = std::make_shared<spdlog::logger>(name, sink);
  // glog's prefix: severity letter, mmdd, time with microseconds, thread, file:line.
  logger->set_pattern("%L%m%d %H:%M:%S.%f %t %s:%#] %v");
  logger->set_level(spdlog::level::info);
  if (const char* level = std::getenv("CORTADO_LOG_LEVEL")) {
    logger->set_level(spdlog::level::from_str(level));
  }
  logger->flush_on(spdlog::level::info);
  return logger;
}

std::mutex& LoggerMutex() {
  static std::mutex mutex;
  return mutex;
}

std::shared_ptr<spdlog::logger>& LoggerSlot() {
  static std::shared_ptr<spdlog::logger> logger = MakeLogger("cortado");
  return logger;
}

// The logger of quiet threads: the process logger's sink, at WARN or above.
std::shared_ptr<spdlog::logger>& QuietLoggerSlot() {
  static std::shared_ptr<spdlog::logger> logger = LoggerSlot()->clone("quiet");
  return logger;
}

thread_local bool thread_quiet = false;

}  // namespace

spdlog::logger* Logger() {
  if (!thread_quiet) return LoggerSlot().get();
  spdlog::logger* quiet = QuietLoggerSlot().get();
  quiet->set_level(std::max(LoggerSlot()->level(), spdlog::level::warn));
  return quiet;
}

void SetThreadQuiet(bool quiet) { thread_quiet = quiet; }

void SetLogLevel(const std::string& level) {
  LoggerSlot()->set_level(spdlog::level::from_str(level));
}

void SetLoggerName(const std::string& name) {
  std::lock_guard<std::mutex> lock(LoggerMutex());
  auto old = LoggerSlot();
  auto renamed = old->clone(name);
  LoggerSlot() = renamed;
}

}  // namespace cortado
