// SPDX-License-Identifier: Apache-2.0
#include "core/logging.hpp"

#include <spdlog/sinks/stdout_sinks.h>

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

}  // namespace

spdlog::logger* Logger() { return LoggerSlot().get(); }

void SetLogLevel(const std::string& level) { Logger()->set_level(spdlog::level::from_str(level)); }

void SetLoggerName(const std::string& name) {
  std::lock_guard<std::mutex> lock(LoggerMutex());
  auto old = LoggerSlot();
  auto renamed = old->clone(name);
  LoggerSlot() = renamed;
}

}  // namespace cortado
