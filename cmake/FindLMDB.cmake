# SPDX-License-Identifier: Apache-2.0
# Finds LMDB (liblmdb): defines LMDB_FOUND and the imported target LMDB::lmdb.
find_path(LMDB_INCLUDE_DIR lmdb.h HINTS ${LMDB_ROOT} $ENV{LMDB_ROOT} PATH_SUFFIXES include)
find_library(LMDB_LIBRARY lmdb HINTS ${LMDB_ROOT} $ENV{LMDB_ROOT} PATH_SUFFIXES lib lib64)
include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(LMDB DEFAULT_MSG LMDB_LIBRARY LMDB_INCLUDE_DIR)
if(LMDB_FOUND AND NOT TARGET LMDB::lmdb)
  add_library(LMDB::lmdb UNKNOWN IMPORTED)
  set_target_properties(LMDB::lmdb PROPERTIES
    IMPORTED_LOCATION ${LMDB_LIBRARY} INTERFACE_INCLUDE_DIRECTORIES ${LMDB_INCLUDE_DIR})
endif()
mark_as_advanced(LMDB_INCLUDE_DIR LMDB_LIBRARY)
