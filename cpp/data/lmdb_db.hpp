// SPDX-License-Identifier: Apache-2.0
// Thin RAII wrappers over the LMDB C API for the data layers and converters: a reader that walks
// the records of a database in key order (wrapping around, with positioning by record index) and
// a writer that batches puts into transactions and grows the map when it fills.
//
// Every LMDB return code is checked; failures throw cortado::Error naming the owner (the layer or
// tool using the database), the database path, the operation and mdb_strerror's text.
// Neither class is thread-safe, but a reader may move between threads (it opens the
// environment with MDB_NOTLS), as long as one thread uses it at a time.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

struct MDB_env;
struct MDB_txn;
struct MDB_cursor;

namespace cortado {

class LmdbReader {
 public:
  // Opens the database directory `path` read-only. Throws kNotFound when the path does not
  // exist, kIo when LMDB cannot open it (not a database, corrupt), kInvalidArgument when empty.
  LmdbReader(const std::string& path, std::string owner);
  ~LmdbReader();
  LmdbReader(const LmdbReader&) = delete;
  LmdbReader& operator=(const LmdbReader&) = delete;

  // Number of records.
  int64_t size() const { return size_; }
  const std::string& path() const { return path_; }

  // Makes record `index` (0-based, in key order, taken modulo size()) the next one Next returns.
  // Moving forward steps the cursor; moving back restarts from the first record.
  void SeekTo(int64_t index);
  // Index of the record the next Next() returns.
  int64_t position() const { return next_; }
  // Returns the next record's value (valid until the next call) and, if `key` is non-null, its
  // key; after the last record comes the first again.
  std::string_view Next(std::string* key = nullptr);

 private:
  void Open();
  // Opens the environment and its main database (the first reader of a path in the process).
  void OpenEnv(MDB_env** env, unsigned int* dbi) const;
  void Close() noexcept;
  void MoveCursorTo(int64_t index);
  [[noreturn]] void Fail(const char* operation, int rc) const;

  std::string path_;
  std::string owner_;
  MDB_env* env_ = nullptr;  // shared by every reader of this database in the process
  std::string env_key_;
  MDB_txn* txn_ = nullptr;
  MDB_cursor* cursor_ = nullptr;
  unsigned int dbi_ = 0;
  int64_t size_ = 0;
  int64_t next_ = 0;        // record the next Next() returns
  int64_t cursor_at_ = -1;  // record the cursor is on; -1 before the first positioning
  std::string_view key_, value_;
};

class LmdbWriter {
 public:
  // Creates the directory `path` (which must not exist yet) and a new database in it.
  LmdbWriter(const std::string& path, std::string owner, size_t initial_map_size = size_t{1} << 26);
  ~LmdbWriter();  // aborts uncommitted puts; never throws
  LmdbWriter(const LmdbWriter&) = delete;
  LmdbWriter& operator=(const LmdbWriter&) = delete;

  // Queues a record; every `records_per_commit` puts are committed.
  void Put(std::string key, std::string value);
  // Commits queued records and flushes the database to disk.
  void Commit();

  static constexpr size_t kRecordsPerCommit = 1000;

 private:
  void WritePending();
  [[noreturn]] void Fail(const char* operation, int rc) const;

  std::string path_;
  std::string owner_;
  MDB_env* env_ = nullptr;
  size_t map_size_;
  std::vector<std::pair<std::string, std::string>> pending_;
};

}  // namespace cortado
