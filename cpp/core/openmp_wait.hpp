// SPDX-License-Identifier: Apache-2.0
// OpenMP's idle threads in a program linked with libcortado.so (core/preload.cpp): OpenMP starts
// before Cortado can set how they wait, so such a program calls RestartForOpenMpWait first thing
// in main (the cortado tool and the test programs do). Context::OpenMpWait says what applies.
#pragma once

namespace cortado {

// Runs the program again (execv of /proc/self/exe with `argv`) with OMP_WAIT_POLICY=passive,
// where OpenMP started with its default (a spin of milliseconds) and the environment chose
// nothing itself (OMP_WAIT_POLICY, GOMP_SPINCOUNT). Returns, doing nothing, where nothing is to
// be done or the new start fails.
void RestartForOpenMpWait(char** argv);

}  // namespace cortado
