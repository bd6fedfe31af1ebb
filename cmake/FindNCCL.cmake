# SPDX-License-Identifier: Apache-2.0
# Finds NCCL: defines NCCL_FOUND and the imported target NCCL::nccl.
find_path(NCCL_INCLUDE_DIR nccl.h
  HINTS ${NCCL_ROOT} $ENV{NCCL_ROOT} /usr/local/cuda
  PATH_SUFFIXES include include/x86_64-linux-gnu)
# libnccl.so.2 alone: NVIDIA's wheels (CORTADO_NVIDIA_WHEELS).
find_library(NCCL_LIBRARY NAMES nccl libnccl.so.2
  HINTS ${NCCL_ROOT} $ENV{NCCL_ROOT} /usr/local/cuda
  PATH_SUFFIXES lib64 lib lib/x86_64-linux-gnu)
include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(NCCL DEFAULT_MSG NCCL_LIBRARY NCCL_INCLUDE_DIR)
if(NCCL_FOUND AND NOT TARGET NCCL::nccl)
  add_library(NCCL::nccl UNKNOWN IMPORTED)
  set_target_properties(NCCL::nccl PROPERTIES
    IMPORTED_LOCATION ${NCCL_LIBRARY} INTERFACE_INCLUDE_DIRECTORIES ${NCCL_INCLUDE_DIR})
endif()
mark_as_advanced(NCCL_INCLUDE_DIR NCCL_LIBRARY)
