// SPDX-License-Identifier: Apache-2.0
// Helpers for the data tests: a temporary directory, LMDB databases written with the LMDB C API
// (independently of the code under test), and small Datum records.
#pragma once

#include <gtest/gtest.h>
#include <lmdb.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "proto/caffe.pb.h"

namespace cortado::testing {

// A fresh directory under the system temp dir, removed with its contents on destruction.
class TempDir {
 public:
  TempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "cortado_data_XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) ADD_FAILURE() << "mkdtemp failed";
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// Writes `records` (key, value) into a new LMDB at directory `path` with the C API.
inline void WriteLmdb(const std::string& path,
                      const std::vector<std::pair<std::string, std::string>>& records) {
  std::filesystem::create_directories(path);
  MDB_env* env = nullptr;
  ASSERT_EQ(mdb_env_create(&env), MDB_SUCCESS);
  ASSERT_EQ(mdb_env_set_mapsize(env, size_t{1} << 24), MDB_SUCCESS);
  ASSERT_EQ(mdb_env_open(env, path.c_str(), 0, 0664), MDB_SUCCESS);
  MDB_txn* txn = nullptr;
  ASSERT_EQ(mdb_txn_begin(env, nullptr, 0, &txn), MDB_SUCCESS);
  MDB_dbi dbi = 0;
  ASSERT_EQ(mdb_dbi_open(txn, nullptr, 0, &dbi), MDB_SUCCESS);
  for (const auto& record : records) {
    MDB_val key{record.first.size(), const_cast<char*>(record.first.data())};
    MDB_val value{record.second.size(), const_cast<char*>(record.second.data())};
    ASSERT_EQ(mdb_put(txn, dbi, &key, &value, 0), MDB_SUCCESS);
  }
  ASSERT_EQ(mdb_txn_commit(txn), MDB_SUCCESS);
  mdb_env_close(env);
}

// Reads every (key, value) of the LMDB at `path` in key order with the C API.
inline std::vector<std::pair<std::string, std::string>> ReadLmdb(const std::string& path) {
  std::vector<std::pair<std::string, std::string>> records;
  MDB_env* env = nullptr;
  EXPECT_EQ(mdb_env_create(&env), MDB_SUCCESS);
  if (mdb_env_open(env, path.c_str(), MDB_RDONLY, 0664) != MDB_SUCCESS) {
    ADD_FAILURE() << "cannot open LMDB " << path;
    mdb_env_close(env);
    return records;
  }
  MDB_txn* txn = nullptr;
  EXPECT_EQ(mdb_txn_begin(env, nullptr, MDB_RDONLY, &txn), MDB_SUCCESS);
  MDB_dbi dbi = 0;
  EXPECT_EQ(mdb_dbi_open(txn, nullptr, 0, &dbi), MDB_SUCCESS);
  MDB_cursor* cursor = nullptr;
  EXPECT_EQ(mdb_cursor_open(txn, dbi, &cursor), MDB_SUCCESS);
  MDB_val key, value;
  for (int rc = mdb_cursor_get(cursor, &key, &value, MDB_FIRST); rc == MDB_SUCCESS;
       rc = mdb_cursor_get(cursor, &key, &value, MDB_NEXT)) {
    records.emplace_back(std::string(static_cast<char*>(key.mv_data), key.mv_size),
                         std::string(static_cast<char*>(value.mv_data), value.mv_size));
  }
  mdb_cursor_close(cursor);
  mdb_txn_abort(txn);
  mdb_env_close(env);
  return records;
}

// A raw uint8 datum of shape c x h x w whose byte j is first + j.
inline caffe::Datum ByteDatum(int c, int h, int w, int first, int label) {
  caffe::Datum datum;
  datum.set_channels(c);
  datum.set_height(h);
  datum.set_width(w);
  std::string bytes(static_cast<size_t>(c) * h * w, '\0');
  for (size_t j = 0; j < bytes.size(); ++j) bytes[j] = static_cast<char>((first + j) & 0xff);
  datum.set_data(bytes);
  datum.set_label(label);
  return datum;
}

inline std::string Key(int i) {
  char key[16];
  std::snprintf(key, sizeof(key), "%08d", i);
  return key;
}

}  // namespace cortado::testing
