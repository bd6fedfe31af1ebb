// SPDX-License-Identifier: Apache-2.0
// SHA-256 (FIPS 180-4) and HMAC-SHA256 (RFC 2104), for proving knowledge of a shared secret
// without sending it (the tcp ring's handshake) and for the digests of snapshot files
// (solvers/snapshot.hpp). Small and portable, not fast: a few hundred MB/s on one core, enough
// for snapshots, which are written far apart, but not for per-iteration data.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace cortado {

using Sha256Digest = std::array<uint8_t, 32>;

// An incremental SHA-256: Update any number of times, then Final once. Not thread-safe.
class Sha256Hasher {
 public:
  Sha256Hasher();

  // Appends `bytes` bytes at `data` to the message.
  void Update(const void* data, size_t bytes);
  void Update(std::string_view data) { Update(data.data(), data.size()); }
  // Pads the message and returns its digest; the hasher must not be used afterwards (a second
  // Final or Update is a kInternal error).
  Sha256Digest Final();

 private:
  void Compress(const uint8_t* block);

  std::array<uint32_t, 8> state_;
  std::array<uint8_t, 64> buffer_;
  size_t buffered_ = 0;    // bytes in buffer_
  uint64_t length_ = 0;    // message bytes so far
  bool finished_ = false;  // Final was called
};

// The SHA-256 digest of `data`.
Sha256Digest Sha256(std::string_view data);

// HMAC-SHA256 of `message` under `key` (any length; a key longer than 64 bytes is hashed first,
// as RFC 2104 says).
Sha256Digest HmacSha256(std::string_view key, std::string_view message);

// Lower-case hex of `bytes` bytes at `data` ("ba7816bf...").
std::string ToHex(const void* data, size_t bytes);
inline std::string ToHex(const Sha256Digest& digest) { return ToHex(digest.data(), digest.size()); }

// Whether the `bytes` bytes at `a` and `b` are equal, in a time that depends on `bytes` only
// (not on where they first differ), for comparing MACs.
bool ConstantTimeEqual(const void* a, const void* b, size_t bytes);

}  // namespace cortado
