# SPDX-License-Identifier: Apache-2.0
# Finds cuDNN: defines CUDNN_FOUND and the imported target CUDNN::cudnn.
find_path(CUDNN_INCLUDE_DIR cudnn.h
  HINTS ${CUDNN_ROOT} $ENV{CUDNN_ROOT} /usr/local/cuda
  PATH_SUFFIXES include include/x86_64-linux-gnu)
# libcudnn.so.9 alone: NVIDIA's wheels (CORTADO_NVIDIA_WHEELS).
find_library(CUDNN_LIBRARY NAMES cudnn libcudnn.so.9
  HINTS ${CUDNN_ROOT} $ENV{CUDNN_ROOT} /usr/local/cuda
  PATH_SUFFIXES lib64 lib lib/x86_64-linux-gnu)
include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(CUDNN DEFAULT_MSG CUDNN_LIBRARY CUDNN_INCLUDE_DIR)
if(CUDNN_FOUND AND NOT TARGET CUDNN::cudnn)
  add_library(CUDNN::cudnn UNKNOWN IMPORTED)
  set_target_properties(CUDNN::cudnn PROPERTIES
    IMPORTED_LOCATION ${CUDNN_LIBRARY} INTERFACE_INCLUDE_DIRECTORIES ${CUDNN_INCLUDE_DIR})
endif()
mark_as_advanced(CUDNN_INCLUDE_DIR CUDNN_LIBRARY)
