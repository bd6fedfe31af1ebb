// SPDX-License-Identifier: Apache-2.0
// The tests' main: as the cortado tool, OpenMP's idle threads sleep soon (core/openmp_wait.hpp),
// so that the tests run as the tool does and CpuThreadsTest sees the setting applied.
#include <gtest/gtest.h>

#include "core/openmp_wait.hpp"

int main(int argc, char** argv) {
  cortado::RestartForOpenMpWait(argv);
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
