// SPDX-License-Identifier: Apache-2.0
// SHA-256 as FIPS 180-4 section 6.2 gives it (constants from section 4.2.2, initial hash value
// from 5.3.3); HMAC as RFC 2104 section 2.
#include "core/sha256.hpp"

#include <algorithm>
#include <cstring>

#include "core/error.hpp"

namespace cortado {
namespace {

constexpr uint32_t kRoundConstants[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

constexpr size_t kBlockBytes = 64;

inline uint32_t Rotr(uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }

}  // namespace

Sha256Hasher::Sha256Hasher()
    : state_{0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
             0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19},
      buffer_{} {}

void Sha256Hasher::Compress(const uint8_t* block) {
  uint32_t w[64];
  for (int t = 0; t < 16; ++t) {
    w[t] = (uint32_t{block[4 * t]} << 24) | (uint32_t{block[4 * t + 1]} << 16) |
           (uint32_t{block[4 * t + 2]} << 8) | uint32_t{block[4 * t + 3]};
  }
  for (int t = 16; t < 64; ++t) {
    const uint32_t s0 = Rotr(w[t - 15], 7) ^ Rotr(w[t - 15], 18) ^ (w[t - 15] >> 3);
    const uint32_t s1 = Rotr(w[t - 2], 17) ^ Rotr(w[t - 2], 19) ^ (w[t - 2] >> 10);
    w[t] = w[t - 16] + s0 + w[t - 7] + s1;
  }
  uint32_t a = state_[0], b = state_[1], c = state_[2], d = state_[3];
  uint32_t e = state_[4], f = state_[5], g = state_[6], h = state_[7];
  for (int t = 0; t < 64; ++t) {
    const uint32_t sum1 = Rotr(e, 6) ^ Rotr(e, 11) ^ Rotr(e, 25);
    const uint32_t choose = (e & f) ^ (~e & g);
    const uint32_t t1 = h + sum1 + choose + kRoundConstants[t] + w[t];
    const uint32_t sum0 = Rotr(a, 2) ^ Rotr(a, 13) ^ Rotr(a, 22);
    const uint32_t majority = (a & b) ^ (a & c) ^ (b & c);
    const uint32_t t2 = sum0 + majority;
    h = g;
    g = f;
    f = e;
    e = d + t1;
    d = c;
    c = b;
    b = a;
    a = t1 + t2;
  }
  state_[0] += a;
  state_[1] += b;
  state_[2] += c;
  state_[3] += d;
  state_[4] += e;
  state_[5] += f;
  state_[6] += g;
  state_[7] += h;
}

void Sha256Hasher::Update(const void* data, size_t bytes) {
  CORTADO_CHECK(!finished_, "Sha256Hasher::Update after Final");
  const auto* p = static_cast<const uint8_t*>(data);
  length_ += bytes;
  if (buffered_ > 0) {
    const size_t take = std::min(bytes, kBlockBytes - buffered_);
    std::memcpy(buffer_.data() + buffered_, p, take);
    buffered_ += take;
    p += take;
    bytes -= take;
    if (buffered_ < kBlockBytes) return;
    Compress(buffer_.data());
    buffered_ = 0;
  }
  for (; bytes >= kBlockBytes; bytes -= kBlockBytes, p += kBlockBytes) Compress(p);
  if (bytes > 0) {
    std::memcpy(buffer_.data(), p, bytes);
    buffered_ = bytes;
  }
}

Sha256Digest Sha256Hasher::Final() {
  CORTADO_CHECK(!finished_, "Sha256Hasher::Final called twice");
  // FIPS 180-4 5.1.1: a 1 bit, zeros up to 56 bytes mod 64, then the length in bits (64-bit
  // big-endian).
  const uint64_t bits = length_ * 8;
  buffer_[buffered_++] = 0x80;
  if (buffered_ > kBlockBytes - 8) {
    std::memset(buffer_.data() + buffered_, 0, kBlockBytes - buffered_);
    Compress(buffer_.data());
    buffered_ = 0;
  }
  std::memset(buffer_.data() + buffered_, 0, kBlockBytes - 8 - buffered_);
  for (int i = 0; i < 8; ++i) buffer_[56 + i] = static_cast<uint8_t>(bits >> (56 - 8 * i));
  Compress(buffer_.data());
  finished_ = true;
  Sha256Digest digest;
  for (int i = 0; i < 8; ++i) {
    for (int j = 0; j < 4; ++j) digest[4 * i + j] = static_cast<uint8_t>(state_[i] >> (24 - 8 * j));
  }
  return digest;
}

Sha256Digest Sha256(std::string_view data) {
  Sha256Hasher hasher;
  hasher.Update(data);
  return hasher.Final();
}

Sha256Digest HmacSha256(std::string_view key, std::string_view message) {
  // K0: the key, hashed when longer than a block, padded with zeros to a block.
  uint8_t k0[kBlockBytes] = {};
  if (key.size() > kBlockBytes) {
    const Sha256Digest hashed = Sha256(key);
    std::memcpy(k0, hashed.data(), hashed.size());
  } else {
    std::memcpy(k0, key.data(), key.size());
  }
  uint8_t pad[kBlockBytes];
  for (size_t i = 0; i < kBlockBytes; ++i) pad[i] = k0[i] ^ 0x36;
  Sha256Hasher inner;
  inner.Update(pad, sizeof(pad));
  inner.Update(message);
  const Sha256Digest inner_digest = inner.Final();
  for (size_t i = 0; i < kBlockBytes; ++i) pad[i] = k0[i] ^ 0x5c;
  Sha256Hasher outer;
  outer.Update(pad, sizeof(pad));
  outer.Update(inner_digest.data(), inner_digest.size());
  return outer.Final();
}

std::string ToHex(const void* data, size_t bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  const auto* p = static_cast<const uint8_t*>(data);
  std::string hex(2 * bytes, '\0');
  for (size_t i = 0; i < bytes; ++i) {
    hex[2 * i] = kDigits[p[i] >> 4];
    hex[2 * i + 1] = kDigits[p[i] & 0xf];
  }
  return hex;
}

bool ConstantTimeEqual(const void* a, const void* b, size_t bytes) {
  // Every byte is read whatever the others hold; volatile keeps the compiler from stopping
  // early once the result is known.
  const volatile uint8_t* x = static_cast<const volatile uint8_t*>(a);
  const volatile uint8_t* y = static_cast<const volatile uint8_t*>(b);
  uint8_t difference = 0;
  for (size_t i = 0; i < bytes; ++i) difference |= static_cast<uint8_t>(x[i] ^ y[i]);
  return difference == 0;
}

}  // namespace cortado
