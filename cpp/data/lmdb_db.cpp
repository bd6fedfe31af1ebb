// SPDX-License-Identifier: Apache-2.0
#include "data/lmdb_db.hpp"

#include <lmdb.h>

#include <cerrno>
#include <filesystem>
#include <map>
#include <mutex>
#include <string>
#include <system_error>

#include "core/error.hpp"
#include "core/logging.hpp"

namespace cortado {

// ---- LmdbReader --------------------------------------------------------------------------

LmdbReader::LmdbReader(const std::string& path, std::string owner)
    : path_(path), owner_(std::move(owner)) {
  std::error_code ec;
  if (!std::filesystem::exists(path_, ec)) {
    CORTADO_THROW(kNotFound, "{}: LMDB database '{}' does not exist", owner_, path_);
  }
  try {
    Open();
  } catch (...) {
    Close();  // a throwing constructor runs no destructor
    throw;
  }
}

namespace {

// LMDB allows one environment per database per process: a second mdb_env_open of the same files
// in one process takes the lock table over as if it were the only user (the first one's readers
// can then pick an older snapshot of the database, even an empty one), and closing either drops
// the other's locks. Readers of one database in one process (several replicas' Data layers, the
// Spark tasks of one executor) therefore share an environment: opened by the first, closed by
// the last.
struct SharedEnv {
  MDB_env* env = nullptr;
  unsigned int dbi = 0;
  int users = 0;
};

std::mutex& EnvMutex() {
  static std::mutex mutex;
  return mutex;
}

std::map<std::string, SharedEnv>& Envs() {
  static std::map<std::string, SharedEnv> envs;
  return envs;
}

std::string EnvKey(const std::string& path) {
  std::error_code ec;
  const std::filesystem::path canonical = std::filesystem::canonical(path, ec);
  return ec ? path : canonical.string();
}

}  // namespace

void LmdbReader::Open() {
  {
    std::lock_guard<std::mutex> lock(EnvMutex());
    env_key_ = EnvKey(path_);
    auto it = Envs().find(env_key_);
    if (it == Envs().end()) {
      SharedEnv shared;
      OpenEnv(&shared.env, &shared.dbi);
      it = Envs().emplace(env_key_, shared).first;
    }
    ++it->second.users;
    env_ = it->second.env;
    dbi_ = it->second.dbi;
  }
  int rc = mdb_txn_begin(env_, nullptr, MDB_RDONLY, &txn_);
  if (rc != MDB_SUCCESS) Fail("mdb_txn_begin", rc);
  MDB_stat stat;
  rc = mdb_stat(txn_, dbi_, &stat);
  if (rc != MDB_SUCCESS) Fail("mdb_stat", rc);
  size_ = static_cast<int64_t>(stat.ms_entries);
  rc = mdb_cursor_open(txn_, dbi_, &cursor_);
  if (rc != MDB_SUCCESS) Fail("mdb_cursor_open", rc);
  if (size_ == 0) {
    CORTADO_THROW(kInvalidArgument, "{}: LMDB database '{}' has no records", owner_, path_);
  }
}

void LmdbReader::OpenEnv(MDB_env** env_out, unsigned int* dbi_out) const {
  // MDB_NOTLS: read transactions are not tied to threads (the prefetch thread reads through a
  // transaction begun here, and several readers of the process share the environment).
  unsigned int flags = MDB_RDONLY | MDB_NOTLS;
  MDB_env* env = nullptr;
  for (int attempt = 0;; ++attempt) {
    int rc = mdb_env_create(&env);
    if (rc != MDB_SUCCESS) Fail("mdb_env_create", rc);
    rc = mdb_env_open(env, path_.c_str(), flags, 0664);
    if (rc == MDB_SUCCESS) break;
    mdb_env_close(env);  // a failed open still needs its handle closed
    env = nullptr;
    // A read-only directory cannot hold the lock file; read without locking (as Caffe can).
    if (rc == EACCES && attempt == 0) {
      CORTADO_LOG_WARN("{}: no permission to lock LMDB '{}'; reading it without locks", owner_,
                       path_);
      flags |= MDB_NOLOCK;
      continue;
    }
    Fail("mdb_env_open", rc);
  }
  // The main database's handle, opened once for every reader of the environment.
  MDB_txn* txn = nullptr;
  int rc = mdb_txn_begin(env, nullptr, MDB_RDONLY, &txn);
  MDB_dbi dbi = 0;
  if (rc == MDB_SUCCESS) rc = mdb_dbi_open(txn, nullptr, 0, &dbi);
  if (rc == MDB_SUCCESS) rc = mdb_txn_commit(txn);
  if (rc != MDB_SUCCESS) {
    if (txn != nullptr) mdb_txn_abort(txn);
    mdb_env_close(env);
    Fail("opening the main database", rc);
  }
  *env_out = env;
  *dbi_out = dbi;
}

LmdbReader::~LmdbReader() { Close(); }

void LmdbReader::Close() noexcept {
  if (cursor_ != nullptr) mdb_cursor_close(cursor_);
  if (txn_ != nullptr) mdb_txn_abort(txn_);
  if (env_ != nullptr) {
    std::lock_guard<std::mutex> lock(EnvMutex());
    auto it = Envs().find(env_key_);
    if (it != Envs().end() && --it->second.users == 0) {
      mdb_env_close(it->second.env);
      Envs().erase(it);
    }
  }
  cursor_ = nullptr;
  txn_ = nullptr;
  env_ = nullptr;
}

void LmdbReader::Fail(const char* operation, int rc) const {
  CORTADO_THROW(kIo, "{}: LMDB database '{}': {} failed: {}", owner_, path_, operation,
                mdb_strerror(rc));
}

void LmdbReader::SeekTo(int64_t index) {
  CORTADO_CHECK_GE(index, 0);
  next_ = index % size_;
}

void LmdbReader::MoveCursorTo(int64_t index) {
  MDB_val key, value;
  if (cursor_at_ < 0 || index < cursor_at_) {
    const int rc = mdb_cursor_get(cursor_, &key, &value, MDB_FIRST);
    if (rc != MDB_SUCCESS) Fail("mdb_cursor_get(MDB_FIRST)", rc);
    cursor_at_ = 0;
  }
  while (cursor_at_ < index) {
    const int rc = mdb_cursor_get(cursor_, &key, &value, MDB_NEXT);
    if (rc == MDB_NOTFOUND) {
      CORTADO_THROW(kIo, "{}: LMDB database '{}' ended after {} records; its statistics say {}",
                    owner_, path_, cursor_at_ + 1, size_);
    }
    if (rc != MDB_SUCCESS) Fail("mdb_cursor_get(MDB_NEXT)", rc);
    ++cursor_at_;
  }
  const int rc = mdb_cursor_get(cursor_, &key, &value, MDB_GET_CURRENT);
  if (rc != MDB_SUCCESS) Fail("mdb_cursor_get(MDB_GET_CURRENT)", rc);
  key_ = std::string_view(static_cast<const char*>(key.mv_data), key.mv_size);
  value_ = std::string_view(static_cast<const char*>(value.mv_data), value.mv_size);
}

std::string_view LmdbReader::Next(std::string* key) {
  MoveCursorTo(next_);
  next_ = (next_ + 1) % size_;
  if (key != nullptr) key->assign(key_.data(), key_.size());
  return value_;
}

// ---- LmdbWriter --------------------------------------------------------------------------

LmdbWriter::LmdbWriter(const std::string& path, std::string owner, size_t initial_map_size)
    : path_(path), owner_(std::move(owner)), map_size_(initial_map_size) {
  std::error_code ec;
  if (std::filesystem::exists(path_, ec)) {
    CORTADO_THROW(kInvalidArgument, "{}: '{}' already exists", owner_, path_);
  }
  if (!std::filesystem::create_directories(path_, ec) || ec) {
    CORTADO_THROW(kIo, "{}: cannot create directory '{}': {}", owner_, path_, ec.message());
  }
  int rc = mdb_env_create(&env_);
  if (rc != MDB_SUCCESS) Fail("mdb_env_create", rc);
  rc = mdb_env_set_mapsize(env_, map_size_);
  if (rc == MDB_SUCCESS) rc = mdb_env_open(env_, path_.c_str(), 0, 0664);
  if (rc != MDB_SUCCESS) {
    mdb_env_close(env_);  // a throwing constructor runs no destructor
    env_ = nullptr;
    Fail("mdb_env_open", rc);
  }
}

LmdbWriter::~LmdbWriter() {
  if (env_ != nullptr) mdb_env_close(env_);
}

void LmdbWriter::Fail(const char* operation, int rc) const {
  CORTADO_THROW(kIo, "{}: LMDB database '{}': {} failed: {}", owner_, path_, operation,
                mdb_strerror(rc));
}

void LmdbWriter::Put(std::string key, std::string value) {
  pending_.emplace_back(std::move(key), std::move(value));
  if (pending_.size() >= kRecordsPerCommit) WritePending();
}

void LmdbWriter::Commit() {
  WritePending();
  const int rc = mdb_env_sync(env_, 1);
  if (rc != MDB_SUCCESS) Fail("mdb_env_sync", rc);
}

void LmdbWriter::WritePending() {
  if (pending_.empty()) return;
  // Writes all pending records in one transaction; when the map is full, grows it and retries
  // (the records are still in memory, so nothing is lost).
  for (;;) {
    MDB_txn* txn = nullptr;
    int rc = mdb_txn_begin(env_, nullptr, 0, &txn);
    if (rc != MDB_SUCCESS) Fail("mdb_txn_begin", rc);
    MDB_dbi dbi = 0;
    rc = mdb_dbi_open(txn, nullptr, 0, &dbi);
    for (size_t i = 0; rc == MDB_SUCCESS && i < pending_.size(); ++i) {
      MDB_val key{pending_[i].first.size(), pending_[i].first.data()};
      MDB_val value{pending_[i].second.size(), pending_[i].second.data()};
      rc = mdb_put(txn, dbi, &key, &value, 0);
    }
    if (rc == MDB_SUCCESS) {
      rc = mdb_txn_commit(txn);  // frees the transaction, committed or not
      txn = nullptr;
    }
    if (rc == MDB_SUCCESS) break;
    if (txn != nullptr) mdb_txn_abort(txn);
    if (rc != MDB_MAP_FULL) Fail("writing records", rc);
    map_size_ *= 2;
    rc = mdb_env_set_mapsize(env_, map_size_);
    if (rc != MDB_SUCCESS) Fail("mdb_env_set_mapsize", rc);
  }
  pending_.clear();
}

}  // namespace cortado
