// SPDX-License-Identifier: Apache-2.0
// Writes the LRCN toy task's data as HDF5 files for Caffe's HDF5Data layer.
//
// Each sample is a "sentence" over the symbols 1..20 (0 is both the start and the end symbol)
// and an "image" that describes it: w_i = 1 + (a - 1 + i * k) mod 20 for i < L, with the start a
// in 1..20, the step k in {1, 2, 3, 5} and the length L in 4..9 drawn at random. The image is
// the one-hot codes of a, k and L (30 values) plus Gaussian noise. A net sees the image and the
// sentence so far and predicts the next symbol: it must read the step from the image (or the
// first two symbols) and count to know when the sentence ends, which needs the recurrence.
//
// The layout is LRCN's (CaffeOnSpark's data/lrcn_cos.prototxt): time-major batches of T = 10
// steps by N streams, one sentence per stream per batch, the input starting with the start
// symbol, the target shifted by one and ending with the end symbol, padded with target -1
// (ignored) and cont 0; cont is 0 at the start and 1 inside a sentence.
//   <prefix>_sentences.h5: cont_sentence, input_sentence, target_sentence, each (B * T, N)
//   <prefix>_images.h5:    data (B * N, 30)
// so HDF5Data with batch_size T serves (T, N) and with batch_size N serves (N, 30).
//
// Usage: make_sequences <output dir> <train batches> <test batches> [streams N, default 16]
#include <hdf5.h>

#include <cstdio>
#include <cstdlib>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

constexpr int kSymbols = 20;
constexpr int kSteps = 10;  // T: the longest sentence (9) plus the end symbol
constexpr int kImage = 30;  // 20 (start) + 4 (step) + 6 (length)
constexpr int kStepChoices[] = {1, 2, 3, 5};

void WriteDataset(hid_t file, const char* name, const std::vector<float>& values, hsize_t rows,
                  hsize_t cols) {
  const hsize_t dims[2] = {rows, cols};
  const hid_t space = H5Screate_simple(2, dims, nullptr);
  const hid_t set =
      H5Dcreate2(file, name, H5T_IEEE_F32LE, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  if (set < 0 || H5Dwrite(set, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data()) < 0)
    throw std::runtime_error(std::string("cannot write dataset ") + name);
  H5Dclose(set);
  H5Sclose(space);
}

void WriteSplit(const std::string& dir, const std::string& prefix, int batches, int streams,
                std::mt19937* rng) {
  const size_t rows = static_cast<size_t>(batches) * kSteps;
  std::vector<float> cont(rows * streams, 0.0f), input(rows * streams, 0.0f),
      target(rows * streams, -1.0f), image(static_cast<size_t>(batches) * streams * kImage);
  std::uniform_int_distribution<int> start(1, kSymbols), step(0, 3), length(4, 9);
  std::normal_distribution<float> noise(0.0f, 0.1f);
  for (int b = 0; b < batches; ++b) {
    for (int n = 0; n < streams; ++n) {
      const int a = start(*rng), k = step(*rng), len = length(*rng);
      float* img = &image[(static_cast<size_t>(b) * streams + n) * kImage];
      for (int i = 0; i < kImage; ++i) img[i] = noise(*rng);
      img[a - 1] += 1.0f;
      img[kSymbols + k] += 1.0f;
      img[kSymbols + 4 + (len - 4)] += 1.0f;
      auto at = [&](int t) { return (static_cast<size_t>(b) * kSteps + t) * streams + n; };
      int previous = 0;  // the start symbol
      for (int t = 0; t <= len; ++t) {
        const int next = t < len ? 1 + (a - 1 + t * kStepChoices[k]) % kSymbols : 0;
        cont[at(t)] = t == 0 ? 0.0f : 1.0f;
        input[at(t)] = static_cast<float>(previous);
        target[at(t)] = static_cast<float>(next);
        previous = next;
      }
    }
  }
  const std::string sentences = dir + "/" + prefix + "_sentences.h5";
  const std::string images = dir + "/" + prefix + "_images.h5";
  hid_t file = H5Fcreate(sentences.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  if (file < 0) throw std::runtime_error("cannot create " + sentences);
  WriteDataset(file, "cont_sentence", cont, rows, streams);
  WriteDataset(file, "input_sentence", input, rows, streams);
  WriteDataset(file, "target_sentence", target, rows, streams);
  H5Fclose(file);
  file = H5Fcreate(images.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  if (file < 0) throw std::runtime_error("cannot create " + images);
  WriteDataset(file, "data", image, static_cast<hsize_t>(batches) * streams, kImage);
  H5Fclose(file);
  // HDF5Data reads a list of files.
  for (const std::string& h5 : {sentences, images}) {
    const std::string list = h5.substr(0, h5.size() - 3) + ".txt";
    FILE* out = std::fopen(list.c_str(), "w");
    if (out == nullptr || std::fprintf(out, "%s\n", h5.c_str()) < 0 || std::fclose(out) != 0)
      throw std::runtime_error("cannot write " + list);
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4 || argc > 5) {
    std::fprintf(stderr, "usage: %s <output dir> <train batches> <test batches> [streams]\n",
                 argv[0]);
    return 2;
  }
  try {
    const int streams = argc == 5 ? std::atoi(argv[4]) : 16;
    const int train = std::atoi(argv[2]), test = std::atoi(argv[3]);
    if (streams < 1 || train < 1 || test < 1) throw std::runtime_error("counts must be positive");
    std::mt19937 rng(1701);
    WriteSplit(argv[1], "train", train, streams, &rng);
    WriteSplit(argv[1], "test", test, streams, &rng);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "make_sequences: %s\n", e.what());
    return 1;
  }
  return 0;
}
