// SPDX-License-Identifier: Apache-2.0
#include "plot/training_log.hpp"

#include <charconv>
#include <cmath>
#include <limits>
#include <string_view>

#include "core/error.hpp"
#include "io/proto_io.hpp"

namespace cortado::plot {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

bool IsDigit(char c) { return c >= '0' && c <= '9'; }

// The number made of the `n` digits at s[at..), or -1 when one of them is not a digit.
int Digits(std::string_view s, size_t at, size_t n) {
  if (at + n > s.size()) return -1;
  int value = 0;
  for (size_t i = at; i < at + n; ++i) {
    if (!IsDigit(s[i])) return -1;
    value = value * 10 + (s[i] - '0');
  }
  return value;
}

// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's days_from_civil).
int64_t DaysFromCivil(int64_t y, int m, int d) {
  y -= m <= 2 ? 1 : 0;
  const int64_t era = (y >= 0 ? y : y - 399) / 400;
  const int64_t yoe = y - era * 400;
  const int64_t doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
  const int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + doe - 719468;
}

// "HH:MM:SS[.ffffff]" at s[at..): seconds since midnight, or NaN.
double TimeOfDay(std::string_view s, size_t at) {
  const int h = Digits(s, at, 2), m = Digits(s, at + 3, 2), sec = Digits(s, at + 6, 2);
  if (h < 0 || m < 0 || sec < 0 || s[at + 2] != ':' || s[at + 5] != ':' || h > 23 || m > 59 ||
      sec > 60) {
    return kNaN;
  }
  double t = h * 3600.0 + m * 60.0 + sec;
  size_t i = at + 8;
  if (i < s.size() && (s[i] == '.' || s[i] == ',')) {
    // As an integer over a power of ten: one rounding, not one per digit.
    int64_t digits = 0, scale = 1;
    for (++i; i < s.size() && IsDigit(s[i]) && scale < 1000000000; ++i, scale *= 10) {
      digits = digits * 10 + (s[i] - '0');
    }
    t += static_cast<double>(digits) / static_cast<double>(scale);
  }
  return t;
}

bool ValidDate(int month, int day) { return month >= 1 && month <= 12 && day >= 1 && day <= 31; }

// The time of a line from its prefix, in seconds on an absolute scale; NaN when it has none.
class LineClock {
 public:
  double TimeOf(std::string_view line) {
    // glog: "I1126 03:08:57.123456 ..." (level letter, mmdd, time). No year: the year is
    // guessed, and moves on when the date goes back (December to January).
    if (line.size() >= 14 && line[0] >= 'A' && line[0] <= 'Z' && line[5] == ' ') {
      const int month = Digits(line, 1, 2), day = Digits(line, 3, 2);
      const double tod = TimeOfDay(line, 6);
      if (month >= 0 && day >= 0 && ValidDate(month, day) && !std::isnan(tod)) {
        double t = At(glog_year_, month, day, tod);
        if (!std::isnan(last_glog_) && t < last_glog_ - 12 * 3600.0) {
          ++glog_year_;
          t = At(glog_year_, month, day, tod);
        }
        last_glog_ = t;
        return t;
      }
    }
    // log4j as Spark configures it: "24/11/26 03:08:57 INFO ...".
    if (line.size() >= 17 && line[2] == '/' && line[5] == '/' && line[8] == ' ') {
      const int year = Digits(line, 0, 2), month = Digits(line, 3, 2), day = Digits(line, 6, 2);
      const double tod = TimeOfDay(line, 9);
      if (year >= 0 && month >= 0 && day >= 0 && ValidDate(month, day) && !std::isnan(tod)) {
        return At(2000 + year, month, day, tod);
      }
    }
    // ISO 8601: "2024-11-26 03:08:57,123" or "[2024-11-26T03:08:57.123]".
    const size_t at = !line.empty() && line[0] == '[' ? 1 : 0;
    if (line.size() >= at + 19 && line[at + 4] == '-' && line[at + 7] == '-' &&
        (line[at + 10] == ' ' || line[at + 10] == 'T')) {
      const int year = Digits(line, at, 4), month = Digits(line, at + 5, 2),
                day = Digits(line, at + 8, 2);
      const double tod = TimeOfDay(line, at + 11);
      if (year >= 0 && month >= 0 && day >= 0 && ValidDate(month, day) && !std::isnan(tod)) {
        return At(year, month, day, tod);
      }
    }
    return kNaN;
  }

 private:
  static double At(int year, int month, int day, double tod) {
    // Days from 2000 rather than 1970: smaller numbers keep more of the microseconds.
    return static_cast<double>(DaysFromCivil(year, month, day) - DaysFromCivil(2000, 1, 1)) *
               86400.0 +
           tod;
  }

  // A leap year, so that 29 February exists; a log across 28 February of another year shows a
  // day more than it took (glog does not say the year).
  int glog_year_ = 2000;
  double last_glog_ = kNaN;
};

// The number at the start of `s` (Caffe prints nan, -nan, inf as well), or nullopt-like false.
// std::from_chars, not strtod: the locale (which a JVM sets) must not change the decimal point.
bool ParseNumber(std::string_view s, double* value, size_t* used = nullptr) {
  size_t start = 0;
  if (!s.empty() && s[0] == '+') start = 1;
  const char* first = s.data() + start;
  const auto [end, ec] = std::from_chars(first, s.data() + s.size(), *value);
  if (ec != std::errc() && ec != std::errc::result_out_of_range) return false;
  if (used != nullptr) *used = static_cast<size_t>(end - s.data());
  return true;
}

bool StartsWith(std::string_view s, std::string_view prefix) {
  return s.substr(0, prefix.size()) == prefix;
}

// "#K: name = value[ (* w = x loss)]" after "Train/Test net output ": the output, or false.
bool ParseOutput(std::string_view s, NamedValue* out) {
  if (s.empty() || s[0] != '#') return false;
  const size_t colon = s.find(": ");
  const size_t eq = s.find(" = ", colon == std::string_view::npos ? 0 : colon);
  if (colon == std::string_view::npos || eq == std::string_view::npos || eq <= colon + 2) {
    return false;
  }
  out->name = std::string(s.substr(colon + 2, eq - colon - 2));
  size_t used = 0;
  if (!ParseNumber(s.substr(eq + 3), &out->value, &used)) return false;
  const std::string_view rest = s.substr(eq + 3 + used);
  out->is_loss =
      rest.find("(* ") != std::string_view::npos && rest.find(" loss)") != std::string_view::npos;
  return true;
}

class Parser {
 public:
  explicit Parser(TrainingLog* log) : log_(log) {}

  void Line(std::string_view line) {
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    const double time = clock_.TimeOf(line);
    if (size_t at = line.find("Test net output "); at != std::string_view::npos) {
      NamedValue value;
      if (!ParseOutput(line.substr(at + 16), &value)) return;
      if (current_test_ < 0) {
        // Outputs with no "Testing net" line before them (a log cut short): parse_log.py puts
        // them at the last iteration seen.
        current_test_ = static_cast<int>(log_->tests.size());
        log_->tests.push_back(TestRecord{last_iteration_, time, 0, {}});
      }
      log_->tests[static_cast<size_t>(current_test_)].outputs.push_back(std::move(value));
      return;
    }
    if (size_t at = line.find("Train net output "); at != std::string_view::npos) {
      NamedValue value;
      if (ParseOutput(line.substr(at + 17), &value) && !log_->train.empty()) {
        log_->train.back().outputs.push_back(std::move(value));
      }
      return;
    }
    for (size_t at = line.find("Iteration "); at != std::string_view::npos;
         at = line.find("Iteration ", at + 1)) {
      if (IterationMessage(line.substr(at + 10), time)) return;
    }
  }

 private:
  // The text after "Iteration ": true when it was one of the messages read.
  bool IterationMessage(std::string_view s, double time) {
    size_t digits = 0;
    while (digits < s.size() && IsDigit(s[digits])) ++digits;
    if (digits == 0 || digits > 18) return false;
    int64_t iteration = 0;
    std::from_chars(s.data(), s.data() + digits, iteration);
    s.remove_prefix(digits);
    if (StartsWith(s, ", Testing net (#")) {
      int net = 0;
      std::from_chars(s.data() + 16, s.data() + s.size(), net);
      current_test_ = static_cast<int>(log_->tests.size());
      log_->tests.push_back(TestRecord{iteration, time, net, {}});
      last_iteration_ = iteration;
      return true;
    }
    if (StartsWith(s, ", lr = ")) {
      double lr = 0.0;
      if (!ParseNumber(s.substr(7), &lr)) return false;
      TrainRecord* record = RecordAt(iteration, time);
      record->lr = lr;
      return true;
    }
    // "Iteration N, loss = X" or "Iteration N (speed...), loss = X".
    size_t loss_at = std::string_view::npos;
    if (StartsWith(s, ", loss = ")) {
      loss_at = 9;
    } else if (StartsWith(s, " (")) {
      const size_t close = s.find("), loss = ");
      if (close != std::string_view::npos) loss_at = close + 10;
    }
    if (loss_at == std::string_view::npos) return false;
    double loss = 0.0;
    if (!ParseNumber(s.substr(loss_at), &loss)) return false;
    TrainRecord* record = nullptr;
    // An lr line logged before its display line (not Caffe's order, but harmless) already made
    // the record.
    if (!log_->train.empty() && log_->train.back().iteration == iteration &&
        !log_->train.back().has_loss) {
      record = &log_->train.back();
    } else {
      log_->train.push_back(TrainRecord{iteration, time, kNaN, false, kNaN, {}});
      record = &log_->train.back();
    }
    record->loss = loss;
    record->has_loss = true;
    current_test_ = -1;
    last_iteration_ = iteration;
    return true;
  }

  // The latest record of `iteration` (the lr line follows its display line), or a new one.
  TrainRecord* RecordAt(int64_t iteration, double time) {
    if (log_->train.empty() || log_->train.back().iteration != iteration) {
      log_->train.push_back(TrainRecord{iteration, time, kNaN, false, kNaN, {}});
      current_test_ = -1;
      last_iteration_ = iteration;
    }
    return &log_->train.back();
  }

  TrainingLog* log_;
  LineClock clock_;
  int current_test_ = -1;
  int64_t last_iteration_ = 0;
};

}  // namespace

TrainingLog ParseTrainingLog(const std::string& text, const std::string& source) {
  TrainingLog log;
  log.source = source;
  Parser parser(&log);
  const std::string_view all(text);
  for (size_t start = 0; start < all.size();) {
    size_t end = all.find('\n', start);
    if (end == std::string_view::npos) end = all.size();
    parser.Line(all.substr(start, end - start));
    start = end + 1;
  }
  if (log.train.empty()) {
    CORTADO_THROW(kParse, "{} has no training iterations: is it a Caffe training log?", source);
  }
  // Time 0 is the first record's time: the first in the log of the training and test records.
  double base = kNaN;
  for (const TrainRecord& r : log.train) {
    if (!std::isnan(r.seconds)) {
      base = r.seconds;
      break;
    }
  }
  // Test records are not ordered against training ones: the earlier first time wins.
  for (const TestRecord& r : log.tests) {
    if (!std::isnan(r.seconds)) {
      if (std::isnan(base) || r.seconds < base) base = r.seconds;
      break;
    }
  }
  log.has_time = !std::isnan(base);
  for (TrainRecord& r : log.train) r.seconds -= base;
  for (TestRecord& r : log.tests) r.seconds -= base;
  return log;
}

TrainingLog ReadTrainingLog(const std::string& path) {
  return ParseTrainingLog(io::ReadFile(path), path);
}

}  // namespace cortado::plot
