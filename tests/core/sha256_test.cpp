// SPDX-License-Identifier: Apache-2.0
// SHA-256 against the FIPS 180-4 examples (NIST's "abc", the two-block and 896-bit messages, one
// million 'a' fed in uneven pieces), HMAC-SHA256 against RFC 4231's test cases, and the helpers.
#include "core/sha256.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "core/error.hpp"

namespace cortado {
namespace {

TEST(Sha256Test, NistExamples) {
  EXPECT_EQ(ToHex(Sha256("")), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(ToHex(Sha256("abc")),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  // 448 bits: the padding needs a second block.
  EXPECT_EQ(ToHex(Sha256("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq")),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(
      ToHex(Sha256("abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjk"
                   "lmnopqklmnopqrlmnopqrsmnopqrstnopqrstu")),
      "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1");
}

TEST(Sha256Test, OneMillionAInUnevenPieces) {
  const std::string a(1000, 'a');
  Sha256Hasher hasher;
  size_t fed = 0;
  // Pieces of 1 to 997 bytes: some fill a partly filled block, some span several blocks.
  for (size_t piece = 1; fed < 1000000; piece = piece * 7 % 997 + 1) {
    const size_t n = std::min({piece, a.size(), 1000000 - fed});
    hasher.Update(a.data(), n);
    fed += n;
  }
  EXPECT_EQ(ToHex(hasher.Final()),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
  EXPECT_EQ(ToHex(Sha256(std::string(1000000, 'a'))),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(Sha256Test, EveryLengthAroundTheBlockAgreesWithOneUpdate) {
  // 55, 56 and 64 bytes are where the padding changes; byte-at-a-time must match one Update.
  for (size_t length = 0; length <= 130; ++length) {
    std::string message(length, '\0');
    for (size_t i = 0; i < length; ++i) message[i] = static_cast<char>(i * 37 + 11);
    Sha256Hasher hasher;
    for (char c : message) hasher.Update(&c, 1);
    EXPECT_EQ(ToHex(hasher.Final()), ToHex(Sha256(message))) << length << " bytes";
  }
}

TEST(Sha256Test, UseAfterFinalIsAnError) {
  Sha256Hasher hasher;
  hasher.Update("abc");
  hasher.Final();
  EXPECT_THROW(hasher.Final(), Error);
  EXPECT_THROW(hasher.Update("x"), Error);
}

TEST(HmacSha256Test, Rfc4231TestCases) {
  // Case 1: a 20-byte key.
  EXPECT_EQ(ToHex(HmacSha256(std::string(20, '\x0b'), "Hi There")),
            "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
  // Case 2: a key shorter than the output.
  EXPECT_EQ(ToHex(HmacSha256("Jefe", "what do ya want for nothing?")),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  // Case 3: 50 bytes of 0xdd under 20 bytes of 0xaa.
  EXPECT_EQ(ToHex(HmacSha256(std::string(20, '\xaa'), std::string(50, '\xdd'))),
            "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe");
  // Case 4: the key 0x01 ... 0x19.
  std::string key4;
  for (int i = 1; i <= 25; ++i) key4.push_back(static_cast<char>(i));
  EXPECT_EQ(ToHex(HmacSha256(key4, std::string(50, '\xcd'))),
            "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b");
  // Cases 6 and 7: a 131-byte key, longer than the block, is hashed first.
  const std::string key131(131, '\xaa');
  EXPECT_EQ(ToHex(HmacSha256(key131, "Test Using Larger Than Block-Size Key - Hash Key First")),
            "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
  EXPECT_EQ(ToHex(HmacSha256(key131,
                             "This is a test using a larger than block-size key and a larger "
                             "than block-size data. The key needs to be hashed before being used "
                             "by the HMAC algorithm.")),
            "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2");
}

TEST(Sha256HelpersTest, HexAndConstantTimeCompare) {
  const unsigned char bytes[] = {0x00, 0x0f, 0xa5, 0xff};
  EXPECT_EQ(ToHex(bytes, sizeof(bytes)), "000fa5ff");
  EXPECT_EQ(ToHex(bytes, 0), "");
  const Sha256Digest a = Sha256("a");
  Sha256Digest b = a;
  EXPECT_TRUE(ConstantTimeEqual(a.data(), b.data(), a.size()));
  for (size_t i : {size_t{0}, size_t{17}, size_t{31}}) {
    b = a;
    b[i] ^= 0x01;
    EXPECT_FALSE(ConstantTimeEqual(a.data(), b.data(), a.size())) << "byte " << i;
  }
  EXPECT_TRUE(ConstantTimeEqual(a.data(), b.data(), 0));
}

}  // namespace
}  // namespace cortado
