# SPDX-License-Identifier: Apache-2.0
# Finds oneDNN (libdnnl) without its CMake package, which on Debian also demands OpenCL.
# Defines OneDNN_FOUND and the imported target DNNL::dnnl.
find_path(ONEDNN_INCLUDE_DIR dnnl.hpp)
find_library(ONEDNN_LIBRARY dnnl)
include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(OneDNN DEFAULT_MSG ONEDNN_LIBRARY ONEDNN_INCLUDE_DIR)
if(OneDNN_FOUND AND NOT TARGET DNNL::dnnl)
  add_library(DNNL::dnnl UNKNOWN IMPORTED)
  set_target_properties(DNNL::dnnl PROPERTIES
    IMPORTED_LOCATION ${ONEDNN_LIBRARY} INTERFACE_INCLUDE_DIRECTORIES ${ONEDNN_INCLUDE_DIR})
endif()
mark_as_advanced(ONEDNN_INCLUDE_DIR ONEDNN_LIBRARY)
