// SPDX-License-Identifier: Apache-2.0
// The bound on the host memory that tensors (SyncedMemory buffers) may hold together.
#pragma once

#include <cstddef>

namespace cortado {

// The most host memory all SyncedMemory buffers together may hold. A buffer that would take the
// total past it is refused with kOutOfMemory (naming the sizes) instead of being allocated, so
// that a net whose shapes ask for more than the machine has fails with an error rather than
// being killed by the kernel. Defaults to the machine's physical memory; 0 restores that.
void SetHostMemoryLimit(size_t bytes);
size_t HostMemoryLimit();

}  // namespace cortado
