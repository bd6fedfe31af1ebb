// SPDX-License-Identifier: Apache-2.0
// io.cortado.jni.NativeImage: image bytes into a feed layer's planar float samples.
#include <jni.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "core/logging.hpp"
#include "data/image_codec.hpp"
#include "io_cortado_jni_NativeImage.h"
#include "jni/jni_util.hpp"

namespace {

// NativeImage's crop modes: an image larger than the layer is cut to its size at the centre
// (Caffe's transformer in TEST) or at a random place drawn from the seed (in TRAIN).
constexpr int kNoCrop = 0;
constexpr int kCentreCrop = 1;
constexpr int kRandomCrop = 2;

// `image` as channels x height x width floats, resized to `height` x `width` when `resize`, else
// cropped to it when `crop` is not kNoCrop and the image is at least as large on both sides;
// another size is an error naming `what`.
jfloatArray ToSamples(JNIEnv* env, const cortado::DecodedImage& decoded, int height, int width,
                      bool resize, int crop, int64_t seed, const std::string& what) {
  const cortado::DecodedImage* image = &decoded;
  cortado::DecodedImage changed;
  if (crop != kNoCrop && crop != kCentreCrop && crop != kRandomCrop) {
    CORTADO_THROW(kInvalidArgument, "{}: crop mode {} is not 0, 1 or 2", what, crop);
  }
  if (decoded.height != height || decoded.width != width) {
    const bool larger = decoded.height >= height && decoded.width >= width;
    if (resize) {
      changed = cortado::ResizeImage(decoded, height, width);
    } else if (crop != kNoCrop && larger) {
      // Caffe's DataTransformer: offsets in [0, size - crop], uniform in TRAIN, halved in TEST.
      int top = (decoded.height - height) / 2;
      int left = (decoded.width - width) / 2;
      if (crop == kRandomCrop) {
        std::mt19937_64 engine(static_cast<uint64_t>(seed));
        top = std::uniform_int_distribution<int>(0, decoded.height - height)(engine);
        left = std::uniform_int_distribution<int>(0, decoded.width - width)(engine);
      }
      changed = cortado::CropImage(decoded, top, left, height, width);
    } else {
      CORTADO_THROW(kInvalidArgument, "{} is {} x {}; the layer takes {} x {} ({})", what,
                    decoded.height, decoded.width, height, width,
                    crop != kNoCrop ? "with crop_size, an image is cut to the layer's size when "
                                      "it is at least as large; resize it, or run with -resize"
                                    : "resize it, or run with -resize");
    }
    image = &changed;
  }
  const size_t n = image->pixels.size();
  std::vector<float> values(n);
  for (size_t i = 0; i < n; ++i) values[i] = static_cast<float>(image->pixels[i]);
  jfloatArray out = env->NewFloatArray(static_cast<jsize>(n));
  cortado::jni::CheckJavaException(env);
  env->SetFloatArrayRegion(out, 0, static_cast<jsize>(n), values.data());
  cortado::jni::CheckJavaException(env);
  return out;
}

void CheckShape(int channels, int height, int width, const std::string& what) {
  if ((channels != 1 && channels != 3) || height <= 0 || width <= 0) {
    CORTADO_THROW(kInvalidArgument,
                  "{}: images go to tops of 1 or 3 channels and a positive height and width, "
                  "not {} x {} x {}",
                  what, channels, height, width);
  }
}

}  // namespace

extern "C" {

JNIEXPORT jfloatArray JNICALL Java_io_cortado_jni_NativeImage_decode(
    JNIEnv* env, jclass, jbyteArray data, jint channels, jint height, jint width, jboolean resize,
    jint crop, jlong seed, jboolean skip_corrupt, jstring what) {
  return cortado::jni::Guard(env, jfloatArray{nullptr}, [&]() -> jfloatArray {
    const std::string name = cortado::jni::ToStdString(env, what, "what");
    CheckShape(channels, height, width, name);
    const std::string bytes = cortado::jni::ToBytes(env, data, "data");
    cortado::DecodedImage decoded;
    try {
      decoded = cortado::DecodeImage(
          bytes.data(), bytes.size(),
          channels == 1 ? cortado::ColorMode::kGray : cortado::ColorMode::kColor, name);
    } catch (const cortado::Error& e) {
      if (!skip_corrupt || e.code() != cortado::ErrorCode::kParse) throw;
      CORTADO_LOG_WARN("skipped: {}", e.what());
      return nullptr;
    }
    return ToSamples(env, decoded, height, width, resize, crop, seed, name);
  });
}

JNIEXPORT jfloatArray JNICALL Java_io_cortado_jni_NativeImage_fromInterleaved(
    JNIEnv* env, jclass, jbyteArray data, jint channels, jint src_height, jint src_width,
    jint height, jint width, jboolean resize, jint crop, jlong seed, jstring what) {
  return cortado::jni::Guard(env, jfloatArray{nullptr}, [&]() -> jfloatArray {
    const std::string name = cortado::jni::ToStdString(env, what, "what");
    CheckShape(channels, height, width, name);
    CheckShape(channels, src_height, src_width, name);
    const std::string bytes = cortado::jni::ToBytes(env, data, "data");
    const size_t plane = static_cast<size_t>(src_height) * static_cast<size_t>(src_width);
    if (bytes.size() != plane * static_cast<size_t>(channels)) {
      CORTADO_THROW(kInvalidArgument, "{}: {} x {} x {} pixels need {} bytes, not {}", name,
                    src_height, src_width, channels, plane * static_cast<size_t>(channels),
                    bytes.size());
    }
    cortado::DecodedImage image;
    image.channels = channels;
    image.height = src_height;
    image.width = src_width;
    image.pixels.resize(bytes.size());
    for (size_t p = 0; p < plane; ++p) {
      for (int c = 0; c < channels; ++c) {
        image.pixels[static_cast<size_t>(c) * plane + p] =
            static_cast<uint8_t>(bytes[p * static_cast<size_t>(channels) + static_cast<size_t>(c)]);
      }
    }
    return ToSamples(env, image, height, width, resize, crop, seed, name);
  });
}

}  // extern "C"
