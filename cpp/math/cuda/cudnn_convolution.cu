// SPDX-License-Identifier: Apache-2.0
// 2-D convolution on cuDNN behind math::ConvolutionPlan (math/convolution.hpp).
//
// Each pass (forward, data gradient, filter gradient) picks its algorithm by timing cuDNN's
// candidates on scratch tensors of the layer's shape and keeping the fastest whose workspace fits
// the limit, in strict float32 (FMA math), or with TF32 tensor cores allowed where the context
// allows them (Context::allow_tf32, the solver's `precision: TF32`). By default the candidates are
// those of cuDNN's cudnnFind*AlgorithmEx search. CORTADO_CUDNN_API=graph times the engine
// configurations of cuDNN's graph API instead (heuristics mode A, then the fallback list), leaving
// out engines in a precision not allowed (tensor cores without TF32, float16 inputs); on an H100
// that matched the legacy search on ResNet-50 and lost a third on CaffeNet, whose best algorithms
// (FFT, Winograd) the heuristics do not rank high (bench/RESULTS.md). A graph plan assumes 16-byte
// aligned pointers (every tensor Cortado allocates is); a call with others runs the legacy
// algorithm. Plans are cached per context and shape and math, so the repeated shapes of a deep net
// are searched once.
//
// The search times the candidates in a scratch workspace of its own, freed when the search ends:
// CORTADO_CUDNN_SEARCH_SCALE (default 8) times the bytes of the layer's input, output and
// filters, at least 8 MiB and at most CORTADO_CUDNN_WORKSPACE_MB (default 1024), so a small net
// does not set aside a gigabyte. A scale of 0 searches every shape with the whole limit. The
// passes then share the context's workspace, as large as the largest algorithm chosen needs.
//
// Mixed precision (Context::half_compute, the solver's `precision: FLOAT16 | BFLOAT16`): each
// pass copies its float32 NCHW operands into NHWC float16/bfloat16 ones in the context's half
// scratch, runs cuDNN's legacy API on tensor cores with float32 sums, and copies the result back
// into float32 (the filter gradient is added to the float32 one). Half plans always come from
// the graph API (whose engines declare their numerics: tensor cores allowed, reductions in
// reduced precision and down-converted inputs not), searched on half tensors and cached under
// their own key; a pass it finds no engine for falls back to the legacy search.
// Convolutions that do little arithmetic per element copied are the exception: they run in TF32
// on their float32 operands, since their copies cost more than the tensor cores save. The
// measure is 2 (C / group) K R S / (C + K), multiply-adds per input and output element of one
// position (C channels in, K out, an R x S filter); below 256 a convolution stays in TF32. On
// an H200 at batch 128 (bench/RESULTS.md), ResNet-50's res2 1x1 (64 -> 256, 102) took 0.150 /
// 0.274 ms forward / backward in TF32 and 0.300 / 0.524 in float16 with its copies, its 3x3
// (64 -> 64, 576) 0.430 / 0.688 against 0.158 / 0.309, and res4's 1x1 (1024 -> 256, 410) 0.080 /
// 0.287 against 0.085 / 0.194. CORTADO_HALF_CONVOLUTIONS=all runs every one in the half type.
//
// Half tensors (the *Half passes, for a Convolution layer whose blobs a net keeps in the half
// type): the layer's tensors are already NCHW float16/bfloat16, so there is no float32 copy to
// save and the convolution always computes in the half type; only the weights are copied in (and
// the filter gradient added to the float32 one), as above. CORTADO_HALF_CONV_LAYOUT picks how
// cuDNN sees the tensors: nhwc (the default) transposes them into NHWC copies in the half scratch
// and the results back (16-bit on both sides, the bias added on the way back); nchw gives cuDNN
// the tensors themselves, with NCHW descriptors and the bias added in place after. Plans are
// cached per layout as well (the engines differ), and the graph API's search leaves out the same
// engines as above.
#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/cuda.hpp"
#include "core/logging.hpp"
#include "math/convolution.hpp"
#include "math/gpu.hpp"

namespace cortado::math {

#if CORTADO_WITH_CUDNN
namespace {

// Whether a convolution of shape `s` runs in the half type under mixed precision (see the file
// comment): when it does at least 256 multiply-adds per element copied, or every one with
// CORTADO_HALF_CONVOLUTIONS=all.
// At least 256 multiply-adds per element a copy (or transpose) of its operands moves.
bool MuchWorkPerElement(const ConvolutionShape& s) {
  const double work = 2.0 * (s.channels / s.group) * s.num_output * s.kernel_h * s.kernel_w;
  return work >= 256.0 * (s.channels + s.num_output);
}
bool HalfPays(const ConvolutionShape& s) {
  const char* env = std::getenv("CORTADO_HALF_CONVOLUTIONS");
  if (env != nullptr && std::strcmp(env, "all") == 0) return true;
  return MuchWorkPerElement(s);
}

size_t WorkspaceLimit() {
  const char* env = std::getenv("CORTADO_CUDNN_WORKSPACE_MB");
  const long mb = env != nullptr ? std::strtol(env, nullptr, 10) : 1024;
  return static_cast<size_t>(mb > 0 ? mb : 0) << 20;
}

// The search's scratch workspace for a layer whose input, output and filters take
// `tensor_bytes` (see the file comment).
size_t SearchWorkspace(size_t tensor_bytes) {
  const size_t limit = WorkspaceLimit();
  const char* env = std::getenv("CORTADO_CUDNN_SEARCH_SCALE");
  const long scale = env != nullptr ? std::strtol(env, nullptr, 10) : 8;
  if (scale <= 0) return limit;
  constexpr size_t kFloor = size_t{8} << 20;
  return std::min(limit, std::max(kFloor, static_cast<size_t>(scale) * tensor_bytes));
}

// How many engine configurations each pass times at most (CORTADO_CUDNN_CANDIDATES, default
// 12): heuristics rank them, and the tail is rarely faster.
size_t MaxCandidates() {
  const char* env = std::getenv("CORTADO_CUDNN_CANDIDATES");
  const long n = env != nullptr ? std::strtol(env, nullptr, 10) : 12;
  return static_cast<size_t>(n > 0 ? n : 1);
}

bool UseGraphApi() {
  const char* env = std::getenv("CORTADO_CUDNN_API");
  return env != nullptr && std::strcmp(env, "graph") == 0;
}

// Device scratch freed on scope exit (the tensors the algorithm search writes into).
class Scratch {
 public:
  explicit Scratch(size_t bytes)
      : ptr_(cuda::Malloc(bytes, "the cuDNN algorithm search")), bytes_(bytes) {}
  ~Scratch() { cuda::Free(ptr_, bytes_); }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  float* get() const { return static_cast<float*>(ptr_); }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

// One descriptor of cuDNN's graph API, destroyed with its owner.
class Descriptor {
 public:
  explicit Descriptor(cudnnBackendDescriptorType_t type) {
    CORTADO_CUDNN_CHECK(cudnnBackendCreateDescriptor(type, &desc_));
  }
  ~Descriptor() {
    if (desc_ != nullptr) cudnnBackendDestroyDescriptor(desc_);
  }
  Descriptor(Descriptor&& other) noexcept : desc_(std::exchange(other.desc_, nullptr)) {}
  Descriptor& operator=(Descriptor&& other) noexcept {
    std::swap(desc_, other.desc_);
    return *this;
  }
  Descriptor(const Descriptor&) = delete;
  Descriptor& operator=(const Descriptor&) = delete;

  cudnnBackendDescriptor_t get() const { return desc_; }

  template <typename T>
  Descriptor& Set(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type,
                  const T* values, int64_t count = 1) {
    CORTADO_CUDNN_CHECK(cudnnBackendSetAttribute(desc_, name, type, count, values));
    return *this;
  }
  Descriptor& Set(cudnnBackendAttributeName_t name, const Descriptor& value) {
    cudnnBackendDescriptor_t d = value.get();
    return Set(name, CUDNN_TYPE_BACKEND_DESCRIPTOR, &d);
  }
  Descriptor& Finalize() {
    CORTADO_CUDNN_CHECK(cudnnBackendFinalize(desc_));
    return *this;
  }
  // Finalizing an execution plan fails for engines that do not support the graph: not an error.
  bool TryFinalize() { return cudnnBackendFinalize(desc_) == CUDNN_STATUS_SUCCESS; }

 private:
  cudnnBackendDescriptor_t desc_ = nullptr;
};

// The tensors of a convolution pass: input x, filter w, output y.
enum : int64_t { kX = 1, kW = 2, kY = 3 };

// A packed 4-D tensor of logical dims [N, C, H, W] (filters [K, C, R, S]) of `type`, NCHW or
// NHWC (the layout of the mixed-precision copies).
Descriptor PackedTensor(int64_t uid, const std::vector<int64_t>& dims, cudnnDataType_t type,
                        bool nhwc) {
  std::vector<int64_t> strides(dims.size(), 1);
  if (!nhwc) {
    for (int i = static_cast<int>(dims.size()) - 2; i >= 0; --i) {
      strides[i] = strides[i + 1] * dims[i + 1];
    }
  } else {
    strides[1] = 1;
    strides[3] = dims[1];
    strides[2] = dims[3] * dims[1];
    strides[0] = dims[2] * dims[3] * dims[1];
  }
  const int64_t alignment = 16;
  Descriptor t(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  t.Set(CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, &type)
      .Set(CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, dims.data(),
           static_cast<int64_t>(dims.size()))
      .Set(CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, strides.data(),
           static_cast<int64_t>(strides.size()))
      .Set(CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, &uid)
      .Set(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, &alignment)
      .Finalize();
  return t;
}

enum class Pass { kForward, kData, kFilter };

const char* PassName(Pass pass) {
  switch (pass) {
    case Pass::kForward:
      return "forward";
    case Pass::kData:
      return "data gradient";
    default:
      return "filter gradient";
  }
}

// A finalized execution plan for one pass, with the descriptors it was built from.
struct GraphPass {
  std::vector<Descriptor> parts;  // tensors, convolution, operation, graph, engine config
  std::unique_ptr<Descriptor> plan;
  int64_t workspace = 0;
  int64_t engine = -1;  // cuDNN's global engine index, for logs
  float ms = 0.0f;      // its time in the search
};

// The operation graph of one pass: y = conv(x, w) forward, dx from dy, or dw += from x and dy.
Descriptor* BuildGraph(GraphPass& out, cudnnHandle_t handle, const ConvolutionShape& s, Pass pass,
                       cudnnDataType_t type, bool nhwc) {
  const std::vector<int64_t> x_dims = {s.num, s.channels, s.height, s.width};
  const std::vector<int64_t> w_dims = {s.num_output, s.channels / s.group, s.kernel_h, s.kernel_w};
  const std::vector<int64_t> y_dims = {s.num, s.num_output, s.output_h(), s.output_w()};
  out.parts.push_back(PackedTensor(kX, x_dims, type, nhwc));
  out.parts.push_back(PackedTensor(kW, w_dims, type, nhwc));
  out.parts.push_back(PackedTensor(kY, y_dims, type, nhwc));
  const Descriptor& x = out.parts[0];
  const Descriptor& w = out.parts[1];
  const Descriptor& y = out.parts[2];

  const cudnnDataType_t compute = CUDNN_DATA_FLOAT;
  const cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
  const int64_t spatial = 2;
  const int64_t pad[2] = {s.pad_h, s.pad_w};
  const int64_t stride[2] = {s.stride_h, s.stride_w};
  const int64_t dilation[2] = {s.dilation_h, s.dilation_w};
  Descriptor conv(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR);
  conv.Set(CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, &compute)
      .Set(CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, &mode)
      .Set(CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, &spatial)
      .Set(CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, pad, 2)
      .Set(CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, pad, 2)
      .Set(CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, stride, 2)
      .Set(CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, dilation, 2)
      .Finalize();
  out.parts.push_back(std::move(conv));
  const Descriptor& conv_desc = out.parts.back();

  // The float32 filter gradient accumulates (beta 1), as every layer's parameter gradient
  // does; a half one is written into scratch and added to the float32 one afterwards.
  const float alpha = 1.0f;
  const float beta = pass == Pass::kFilter && type == CUDNN_DATA_FLOAT ? 1.0f : 0.0f;
  switch (pass) {
    case Pass::kForward: {
      Descriptor op(CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR);
      op.Set(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, x)
          .Set(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W, w)
          .Set(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y, y)
          .Set(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC, conv_desc)
          .Set(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA, CUDNN_TYPE_FLOAT, &alpha)
          .Set(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA, CUDNN_TYPE_FLOAT, &beta)
          .Finalize();
      out.parts.push_back(std::move(op));
      break;
    }
    case Pass::kData: {
      Descriptor op(CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR);
      op.Set(CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX, x)
          .Set(CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W, w)
          .Set(CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY, y)
          .Set(CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC, conv_desc)
          .Set(CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA, CUDNN_TYPE_FLOAT, &alpha)
          .Set(CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA, CUDNN_TYPE_FLOAT, &beta)
          .Finalize();
      out.parts.push_back(std::move(op));
      break;
    }
    case Pass::kFilter: {
      Descriptor op(CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR);
      op.Set(CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X, x)
          .Set(CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW, w)
          .Set(CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY, y)
          .Set(CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC, conv_desc)
          .Set(CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA, CUDNN_TYPE_FLOAT, &alpha)
          .Set(CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA, CUDNN_TYPE_FLOAT, &beta)
          .Finalize();
      out.parts.push_back(std::move(op));
      break;
    }
  }
  cudnnBackendDescriptor_t op = out.parts.back().get();
  Descriptor graph(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  graph.Set(CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, &op)
      .Set(CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, &handle)
      .Finalize();
  out.parts.push_back(std::move(graph));
  return &out.parts.back();
}

// The engine configurations heuristics `mode` proposes for `graph`, best first.
std::vector<Descriptor> EngineConfigs(const Descriptor& graph, cudnnBackendHeurMode_t mode) {
  Descriptor heur(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
  heur.Set(CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, graph)
      .Set(CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, &mode);
  std::vector<Descriptor> configs;
  if (!heur.TryFinalize()) return configs;
  int64_t count = 0;
  CORTADO_CUDNN_CHECK(cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                               CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count, nullptr));
  std::vector<cudnnBackendDescriptor_t> raw;
  for (int64_t i = 0; i < count; ++i) {
    configs.emplace_back(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
    raw.push_back(configs.back().get());
  }
  int64_t returned = 0;
  CORTADO_CUDNN_CHECK(cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                               CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &returned,
                                               raw.data()));
  configs.erase(configs.begin() + returned, configs.end());
  return configs;
}

// The global index of a configuration's engine, or -1 when the engine computes in a precision
// not allowed: tensor cores (TF32 on float32 data) unless `tf32` (true for half data), and never
// down-converted inputs or reduced-precision reductions.
int64_t AllowedEngine(const Descriptor& config, bool tf32) {
  Descriptor engine(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
  int64_t n = 0;
  cudnnBackendDescriptor_t raw = engine.get();
  CORTADO_CUDNN_CHECK(cudnnBackendGetAttribute(config.get(), CUDNN_ATTR_ENGINECFG_ENGINE,
                                               CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n, &raw));
  cudnnBackendNumericalNote_t notes[CUDNN_NUMERICAL_NOTE_TYPE_COUNT];
  CORTADO_CUDNN_CHECK(cudnnBackendGetAttribute(engine.get(), CUDNN_ATTR_ENGINE_NUMERICAL_NOTE,
                                               CUDNN_TYPE_NUMERICAL_NOTE,
                                               CUDNN_NUMERICAL_NOTE_TYPE_COUNT, &n, notes));
  for (int64_t i = 0; i < n; ++i) {
    if ((notes[i] == CUDNN_NUMERICAL_NOTE_TENSOR_CORE && !tf32) ||
        notes[i] == CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS ||
        notes[i] == CUDNN_NUMERICAL_NOTE_REDUCED_PRECISION_REDUCTION) {
      return -1;
    }
  }
  int64_t index = 0;
  CORTADO_CUDNN_CHECK(cudnnBackendGetAttribute(engine.get(), CUDNN_ATTR_ENGINE_GLOBAL_INDEX,
                                               CUDNN_TYPE_INT64, 1, &n, &index));
  return index;
}

void Execute(cudnnHandle_t handle, const Descriptor& plan, void* x, void* w, void* y,
             void* workspace) {
  const int64_t uids[3] = {kX, kW, kY};
  void* pointers[3] = {x, w, y};
  Descriptor pack(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
  pack.Set(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, uids, 3)
      .Set(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, pointers, 3)
      .Set(CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, &workspace)
      .Finalize();
  CORTADO_CUDNN_CHECK(cudnnBackendExecute(handle, plan.get(), pack.get()));
}

// Times the engine configurations cuDNN proposes for one pass and returns the fastest, or
// nullptr when none runs within the workspace limit.
std::shared_ptr<GraphPass> SearchGraphPass(cudnnHandle_t handle, cudaStream_t stream,
                                           const ConvolutionShape& s, Pass pass, void* x, void* w,
                                           void* y, void* workspace, size_t limit, bool tf32,
                                           cudnnDataType_t type, bool nhwc) {
  const size_t max_candidates = MaxCandidates();
  constexpr int kRuns = 3;
  auto spec = std::make_shared<GraphPass>();
  Descriptor* graph = BuildGraph(*spec, handle, s, pass, type, nhwc);

  std::vector<Descriptor> candidates;
  std::vector<int64_t> engines;
  for (cudnnBackendHeurMode_t mode : {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK}) {
    for (Descriptor& config : EngineConfigs(*graph, mode)) {
      if (candidates.size() >= max_candidates) break;
      const int64_t engine = AllowedEngine(config, tf32);
      if (engine < 0) continue;
      // The fallback list repeats engines heuristics already proposed, with default knobs.
      bool seen = false;
      if (mode == CUDNN_HEUR_MODE_FALLBACK) {
        for (int64_t e : engines) seen = seen || e == engine;
      }
      if (seen) continue;
      candidates.push_back(std::move(config));
      engines.push_back(engine);
    }
  }

  cudaEvent_t start = nullptr, stop = nullptr;
  CORTADO_CUDA_CHECK(cudaEventCreate(&start));
  CORTADO_CUDA_CHECK(cudaEventCreate(&stop));
  std::shared_ptr<GraphPass> best;
  int ran = 0;
  for (size_t i = 0; i < candidates.size(); ++i) {
    auto plan = std::make_unique<Descriptor>(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
    cudnnBackendDescriptor_t config = candidates[i].get();
    plan->Set(CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, &handle)
        .Set(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, &config);
    if (!plan->TryFinalize()) continue;
    int64_t bytes = 0, n = 0;
    CORTADO_CUDNN_CHECK(cudnnBackendGetAttribute(
        plan->get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &n, &bytes));
    if (bytes < 0 || static_cast<size_t>(bytes) > limit) continue;
    // A configuration that fails to run is skipped, not an error: the next one may run.
    try {
      Execute(handle, *plan, x, w, y, workspace);  // warm-up
      CORTADO_CUDA_CHECK(cudaEventRecord(start, stream));
      for (int r = 0; r < kRuns; ++r) Execute(handle, *plan, x, w, y, workspace);
      CORTADO_CUDA_CHECK(cudaEventRecord(stop, stream));
      CORTADO_CUDA_CHECK(cudaEventSynchronize(stop));
    } catch (const Error& e) {
      CORTADO_LOG_DEBUG("cuDNN engine {} for the {} pass: {}", engines[i], PassName(pass),
                        e.what());
      cudaGetLastError();
      continue;
    }
    float ms = 0.0f;
    CORTADO_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    ++ran;
    if (best == nullptr || ms < best->ms) {
      if (best == nullptr) best = spec;
      best->plan = std::move(plan);
      best->workspace = bytes;
      best->engine = engines[i];
      best->ms = ms;
      // The configuration must outlive its plan.
      best->parts.push_back(std::move(candidates[i]));
    }
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  CORTADO_LOG_DEBUG(
      "cuDNN {} pass of {}x{}x{}x{} -> {} k{}: {} of {} candidates ran, best {}", PassName(pass),
      s.num, s.channels, s.height, s.width, s.num_output, s.kernel_h, ran, candidates.size(),
      best == nullptr ? std::string("none")
                      : fmt::format("engine {} at {:.3f} ms", best->engine, best->ms / kRuns));
  return best;
}

// The plans of the three passes of one shape (either API), shared by every layer of that shape
// in a context.
struct Plans {
  bool graph = false;
  std::shared_ptr<GraphPass> forward, data, filter;
  cudnnConvolutionFwdAlgo_t forward_algo = CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM;
  cudnnConvolutionBwdDataAlgo_t data_algo = CUDNN_CONVOLUTION_BWD_DATA_ALGO_0;
  cudnnConvolutionBwdFilterAlgo_t filter_algo = CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0;
  size_t forward_bytes = 0, data_bytes = 0, filter_bytes = 0;
};

std::string ShapeKey(const ConvolutionShape& s) {
  return fmt::format("cudnn-conv {} {} {} {} {} {} {} {} {} {} {} {} {} {}", s.num, s.channels,
                     s.height, s.width, s.num_output, s.kernel_h, s.kernel_w, s.pad_h, s.pad_w,
                     s.stride_h, s.stride_w, s.dilation_h, s.dilation_w, s.group);
}

std::string Describe(const Plans& p) {
  const auto engine = [](const std::shared_ptr<GraphPass>& pass, int algo) {
    return pass != nullptr ? fmt::format("engine {}", pass->engine) : fmt::format("algo {}", algo);
  };
  return fmt::format("cuDNN{} fwd {} bwd-data {} bwd-filter {}", p.graph ? " graph" : "",
                     engine(p.forward, static_cast<int>(p.forward_algo)),
                     engine(p.data, static_cast<int>(p.data_algo)),
                     engine(p.filter, static_cast<int>(p.filter_algo)));
}

bool Aligned(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

class CudnnConvolution final : public ConvolutionPlan {
 public:
  CudnnConvolution(Context& ctx, const ConvolutionShape& s, HalfType half_tensors,
                   HalfTensorLayouts layouts)
      : ctx_(ctx), shape_(s), half_tensors_(half_tensors != HalfType::kNone) {
    auto& res = cuda::Get(ctx_);
    handle_ = res.cudnn;
    half_ = ctx.half_compute();
    tf32_ = ctx.allow_tf32();
    if (half_tensors_) {
      // The tensors are in the half type already: no copies to weigh against the tensor cores.
      half_ = half_tensors;
      const HalfConvLayout layout = HalfTensorConvLayout();
      nhwc_ = layout == HalfConvLayout::kNhwc ||
              (layout == HalfConvLayout::kAuto && MuchWorkPerElement(s));
      // Tensors kept in NHWC are read and written as they are (no copy either way).
      if (layouts.src_nhwc || layouts.dst_nhwc) nhwc_ = true;
      src_nhwc_ = layouts.src_nhwc;
      dst_nhwc_ = layouts.dst_nhwc;
    } else if (half_ != Context::HalfType::kNone && !HalfPays(s)) {
      half_ = Context::HalfType::kNone;
      tf32_ = true;
    } else {
      nhwc_ = half_ != Context::HalfType::kNone;
    }
    // Under mixed precision the convolution itself sees NHWC float16/bfloat16 copies of its
    // operands (tensor cores' layout; or the half tensors themselves in NCHW) and sums in
    // float32; with float32 tensors the bias stays on the float32 NCHW output.
    const cudnnDataType_t type = half_ == Context::HalfType::kFloat16    ? CUDNN_DATA_HALF
                                 : half_ == Context::HalfType::kBFloat16 ? CUDNN_DATA_BFLOAT16
                                                                         : CUDNN_DATA_FLOAT;
    data_type_ = type;
    const cudnnTensorFormat_t format = nhwc_ ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW;
    CORTADO_CUDNN_CHECK(cudnnCreateTensorDescriptor(&src_));
    CORTADO_CUDNN_CHECK(cudnnCreateTensorDescriptor(&dst_));
    CORTADO_CUDNN_CHECK(cudnnCreateTensorDescriptor(&float_dst_));
    CORTADO_CUDNN_CHECK(cudnnCreateTensorDescriptor(&bias_));
    CORTADO_CUDNN_CHECK(cudnnCreateFilterDescriptor(&filter_));
    CORTADO_CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&conv_));
    CORTADO_CUDNN_CHECK(
        cudnnSetTensor4dDescriptor(src_, format, type, s.num, s.channels, s.height, s.width));
    CORTADO_CUDNN_CHECK(cudnnSetTensor4dDescriptor(dst_, format, type, s.num, s.num_output,
                                                   s.output_h(), s.output_w()));
    CORTADO_CUDNN_CHECK(cudnnSetTensor4dDescriptor(float_dst_, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT,
                                                   s.num, s.num_output, s.output_h(),
                                                   s.output_w()));
    CORTADO_CUDNN_CHECK(cudnnSetTensor4dDescriptor(bias_, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1,
                                                   s.num_output, 1, 1));
    CORTADO_CUDNN_CHECK(cudnnSetFilter4dDescriptor(filter_, type, format, s.num_output,
                                                   s.channels / s.group, s.kernel_h, s.kernel_w));
    CORTADO_CUDNN_CHECK(cudnnSetConvolution2dDescriptor(conv_, s.pad_h, s.pad_w, s.stride_h,
                                                        s.stride_w, s.dilation_h, s.dilation_w,
                                                        CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
    CORTADO_CUDNN_CHECK(cudnnSetConvolutionGroupCount(conv_, s.group));
    // DEFAULT math lets cuDNN use TF32 tensor cores on float32 data; FMA math forbids them.
    // Half operands take tensor-core math.
    CORTADO_CUDNN_CHECK(cudnnSetConvolutionMathType(conv_, half_ != Context::HalfType::kNone
                                                               ? CUDNN_TENSOR_OP_MATH
                                                           : tf32_ ? CUDNN_DEFAULT_MATH
                                                                   : CUDNN_FMA_MATH));
    // Half operands always take the graph API, whose engines say how they sum: those that
    // reduce in reduced precision are left out. (The legacy search cannot tell them apart; its
    // fastest float16 filter-gradient algorithm on an H200 was off by a tenth on sums near 1.)
    plans_ = FindPlans(UseGraphApi() || half_ != Context::HalfType::kNone);
  }

  ~CudnnConvolution() override {
    cudnnDestroyConvolutionDescriptor(conv_);
    cudnnDestroyFilterDescriptor(filter_);
    cudnnDestroyTensorDescriptor(bias_);
    cudnnDestroyTensorDescriptor(float_dst_);
    cudnnDestroyTensorDescriptor(dst_);
    cudnnDestroyTensorDescriptor(src_);
  }

  void Forward(const float* src, const float* weights, const float* bias, float* dst) override {
    CheckTensors(false);
    const float one = 1.0f, zero = 0.0f;
    if (half_ != Context::HalfType::kNone) {
      HalfOperands h = Operands();
      ToHalf(Slot::kSrc, src, h.src);
      ToHalf(Slot::kFilter, weights, h.filter);
      if (const GraphPass* pass = plans_->forward.get()) {
        Execute(handle_, *pass->plan, h.src, h.filter, h.dst,
                cuda::Get(ctx_).Workspace(pass->workspace));
      } else {
        const Plans& legacy = Legacy();
        void* workspace = cuda::Get(ctx_).Workspace(legacy.forward_bytes);
        CORTADO_CUDNN_CHECK(cudnnConvolutionForward(handle_, &one, src_, h.src, filter_, h.filter,
                                                    conv_, legacy.forward_algo, workspace,
                                                    legacy.forward_bytes, &zero, dst_, h.dst));
      }
      FromHalf(Slot::kDst, h.dst, 0.0f, dst);
    } else if (const GraphPass* pass = GraphFor(plans_->forward.get(), src, weights, dst)) {
      Execute(handle_, *pass->plan, const_cast<float*>(src), const_cast<float*>(weights), dst,
              cuda::Get(ctx_).Workspace(pass->workspace));
    } else {
      const Plans& legacy = Legacy();
      void* workspace = cuda::Get(ctx_).Workspace(legacy.forward_bytes);
      CORTADO_CUDNN_CHECK(cudnnConvolutionForward(handle_, &one, src_, src, filter_, weights, conv_,
                                                  legacy.forward_algo, workspace,
                                                  legacy.forward_bytes, &zero, dst_, dst));
    }
    if (shape_.bias && bias != nullptr) {
      CORTADO_CUDNN_CHECK(cudnnAddTensor(handle_, &one, bias_, bias, &one, float_dst_, dst));
    }
  }

  void BackwardData(const float* diff_dst, const float* weights, float* diff_src) override {
    CheckTensors(false);
    const float one = 1.0f, zero = 0.0f;
    if (half_ != Context::HalfType::kNone) {
      // A layer asks for the filter gradient first, then the data gradient of the same output
      // gradient: its copy is still in the scratch unless another call used the scratch since:
      // once here, by Operands (the same size, so the same place).
      HalfOperands h = Operands();
      const bool reuse = diff_dst == dst_copied_from_ &&
                         cuda::Get(ctx_).half_scratch_calls() == dst_copied_at_ + 1;
      if (!reuse) ToHalf(Slot::kDst, diff_dst, h.dst);
      dst_copied_from_ = nullptr;
      ToHalf(Slot::kFilter, weights, h.filter);
      if (const GraphPass* pass = plans_->data.get()) {
        Execute(handle_, *pass->plan, h.src, h.filter, h.dst,
                cuda::Get(ctx_).Workspace(pass->workspace));
      } else {
        const Plans& legacy = Legacy();
        void* workspace = cuda::Get(ctx_).Workspace(legacy.data_bytes);
        CORTADO_CUDNN_CHECK(cudnnConvolutionBackwardData(handle_, &one, filter_, h.filter, dst_,
                                                         h.dst, conv_, legacy.data_algo, workspace,
                                                         legacy.data_bytes, &zero, src_, h.src));
      }
      FromHalf(Slot::kSrc, h.src, 0.0f, diff_src);
      return;
    }
    if (const GraphPass* pass = GraphFor(plans_->data.get(), diff_src, weights, diff_dst)) {
      Execute(handle_, *pass->plan, diff_src, const_cast<float*>(weights),
              const_cast<float*>(diff_dst), cuda::Get(ctx_).Workspace(pass->workspace));
      return;
    }
    const Plans& legacy = Legacy();
    void* workspace = cuda::Get(ctx_).Workspace(legacy.data_bytes);
    CORTADO_CUDNN_CHECK(cudnnConvolutionBackwardData(handle_, &one, filter_, weights, dst_,
                                                     diff_dst, conv_, legacy.data_algo, workspace,
                                                     legacy.data_bytes, &zero, src_, diff_src));
  }

  void BackwardWeights(const float* src, const float* diff_dst, float* diff_weights,
                       float* diff_bias) override {
    CheckTensors(false);
    const float one = 1.0f, zero = 0.0f;
    if (diff_weights != nullptr && half_ != Context::HalfType::kNone) {
      // The filter gradient comes out in the half type, then is added to the float32 one.
      HalfOperands h = Operands();
      ToHalf(Slot::kSrc, src, h.src);
      ToHalf(Slot::kDst, diff_dst, h.dst);
      dst_copied_from_ = diff_dst;
      dst_copied_at_ = cuda::Get(ctx_).half_scratch_calls();
      if (const GraphPass* pass = plans_->filter.get()) {
        Execute(handle_, *pass->plan, h.src, h.filter, h.dst,
                cuda::Get(ctx_).Workspace(pass->workspace));
      } else {
        const Plans& legacy = Legacy();
        void* workspace = cuda::Get(ctx_).Workspace(legacy.filter_bytes);
        CORTADO_CUDNN_CHECK(cudnnConvolutionBackwardFilter(
            handle_, &one, src_, h.src, dst_, h.dst, conv_, legacy.filter_algo, workspace,
            legacy.filter_bytes, &zero, filter_, h.filter));
      }
      FromHalf(Slot::kFilter, h.filter, 1.0f, diff_weights);
    } else if (diff_weights != nullptr) {
      if (const GraphPass* pass = GraphFor(plans_->filter.get(), src, diff_weights, diff_dst)) {
        Execute(handle_, *pass->plan, const_cast<float*>(src), diff_weights,
                const_cast<float*>(diff_dst), cuda::Get(ctx_).Workspace(pass->workspace));
      } else {
        const Plans& legacy = Legacy();
        void* workspace = cuda::Get(ctx_).Workspace(legacy.filter_bytes);
        CORTADO_CUDNN_CHECK(cudnnConvolutionBackwardFilter(
            handle_, &one, src_, src, dst_, diff_dst, conv_, legacy.filter_algo, workspace,
            legacy.filter_bytes, &one, filter_, diff_weights));
      }
    }
    if (shape_.bias && diff_bias != nullptr) {
      CORTADO_CUDNN_CHECK(cudnnConvolutionBackwardBias(handle_, &one, float_dst_, diff_dst, &one,
                                                       bias_, diff_bias));
    }
  }

  void ForwardHalf(const void* src, const float* weights, const float* bias, void* dst) override {
    CheckTensors(true);
    const ConvolutionShape& s = shape_;
    if (!shape_.bias) bias = nullptr;
    if (nhwc_) {
      HalfOperands h = Operands();
      void* x = const_cast<void*>(src);
      if (!src_nhwc_) {
        gpu::HalfNchwToNhwc(ctx_, half_, s.num, s.channels, s.height * s.width, src, h.src);
        x = h.src;
      }
      ToHalf(Slot::kFilter, weights, h.filter);
      const int out_hw = s.output_h() * s.output_w();
      if (dst_nhwc_) {
        RunHalf(Pass::kForward, x, h.filter, dst);
        // [N * H * W][K]: the bias of channel k on every row.
        if (bias != nullptr) {
          gpu::AddChannelBiasHalfNhwc(ctx_, half_, int64_t{s.num} * out_hw, s.num_output, bias,
                                      dst);
        }
        return;
      }
      RunHalf(Pass::kForward, x, h.filter, h.dst);
      gpu::HalfNhwcToNchw(ctx_, half_, s.num, s.num_output, out_hw, h.dst, bias, dst);
      return;
    }
    void* filter = HalfFilter();
    gpu::ToHalf(ctx_, half_, FilterCount(), weights, filter);
    RunHalf(Pass::kForward, const_cast<void*>(src), filter, dst);
    if (bias != nullptr) {
      gpu::AddChannelBiasHalf(ctx_, half_, s.num, s.num_output, s.output_h() * s.output_w(), bias,
                              dst);
    }
  }

  void BackwardDataHalf(const void* diff_dst, const float* weights, void* diff_src) override {
    CheckTensors(true);
    const ConvolutionShape& s = shape_;
    if (nhwc_) {
      // The filter-gradient call before left this output gradient's NHWC copy in the scratch,
      // unless the scratch was asked for since: once here, by Operands (the same size, so the
      // same place).
      HalfOperands h = Operands();
      void* dy = const_cast<void*>(diff_dst);
      if (!dst_nhwc_) {
        const bool reuse = diff_dst == dst_copied_from_ &&
                           cuda::Get(ctx_).half_scratch_calls() == dst_copied_at_ + 1;
        if (!reuse) {
          gpu::HalfNchwToNhwc(ctx_, half_, s.num, s.num_output, s.output_h() * s.output_w(),
                              diff_dst, h.dst);
        }
        dy = h.dst;
      }
      dst_copied_from_ = nullptr;
      ToHalf(Slot::kFilter, weights, h.filter);
      RunHalf(Pass::kData, src_nhwc_ ? diff_src : h.src, h.filter, dy);
      if (!src_nhwc_) {
        gpu::HalfNhwcToNchw(ctx_, half_, s.num, s.channels, s.height * s.width, h.src, nullptr,
                            diff_src);
      }
      return;
    }
    void* filter = HalfFilter();
    gpu::ToHalf(ctx_, half_, FilterCount(), weights, filter);
    RunHalf(Pass::kData, diff_src, filter, const_cast<void*>(diff_dst));
  }

  void BackwardWeightsHalf(const void* src, const void* diff_dst, float* diff_weights,
                           float* diff_bias) override {
    CheckTensors(true);
    const ConvolutionShape& s = shape_;
    if (diff_weights != nullptr && nhwc_) {
      HalfOperands h = Operands();
      void* x = const_cast<void*>(src);
      void* dy = const_cast<void*>(diff_dst);
      if (!src_nhwc_) {
        gpu::HalfNchwToNhwc(ctx_, half_, s.num, s.channels, s.height * s.width, src, h.src);
        x = h.src;
      }
      if (!dst_nhwc_) {
        gpu::HalfNchwToNhwc(ctx_, half_, s.num, s.num_output, s.output_h() * s.output_w(), diff_dst,
                            h.dst);
        dy = h.dst;
        dst_copied_from_ = diff_dst;
        dst_copied_at_ = cuda::Get(ctx_).half_scratch_calls();
      }
      RunHalf(Pass::kFilter, x, h.filter, dy);
      FromHalf(Slot::kFilter, h.filter, 1.0f, diff_weights);
    } else if (diff_weights != nullptr) {
      // The filter gradient comes out in the half type ([K, C, R, S] as the float32 one), then
      // is added to the float32 one.
      void* filter = HalfFilter();
      RunHalf(Pass::kFilter, const_cast<void*>(src), filter, const_cast<void*>(diff_dst));
      gpu::FromHalfNhwc(ctx_, half_, 1, 1, static_cast<int>(FilterCount()), filter, 1.0f,
                        diff_weights);
    }
    if (shape_.bias && diff_bias != nullptr) {
      const int out_hw = s.output_h() * s.output_w();
      if (dst_nhwc_) {
        gpu::SumChannelsHalfNhwc(ctx_, half_, int64_t{s.num} * out_hw, s.num_output, diff_dst,
                                 diff_bias);
      } else {
        gpu::SumChannelsHalf(ctx_, half_, s.num, s.num_output, out_hw, diff_dst, diff_bias);
      }
    }
  }

  std::string Name() const override {
    if (!half_tensors_) return Describe(*plans_);
    return fmt::format("{} on {} tensors in {}", Describe(*plans_), HalfTypeName(half_),
                       !nhwc_                   ? "NCHW"
                       : src_nhwc_ && dst_nhwc_ ? "NHWC"
                       : src_nhwc_              ? "NHWC (output copied to NCHW)"
                       : dst_nhwc_              ? "NHWC (input copied from NCHW)"
                                                : "NHWC copies");
  }

 private:
  // The float32 passes for a plan made for float32 tensors, the *Half ones for one made for half
  // tensors: their descriptors differ.
  void CheckTensors(bool half) const {
    CORTADO_CHECK(half == half_tensors_, "cuDNN convolution made for {} tensors called with {}",
                  half_tensors_ ? "half" : "float32", half ? "half" : "float32");
  }

  // One pass on half operands, overwriting its output (a filter gradient is added to the float32
  // one afterwards): the graph plan, or the legacy algorithm where the pass has none or the
  // pointers lack the plan's alignment.
  void RunHalf(Pass pass, void* x, void* w, void* y) {
    const float one = 1.0f, zero = 0.0f;
    const GraphPass* graph = pass == Pass::kForward ? plans_->forward.get()
                             : pass == Pass::kData  ? plans_->data.get()
                                                    : plans_->filter.get();
    if (const GraphPass* p = GraphFor(graph, x, w, y)) {
      Execute(handle_, *p->plan, x, w, y, cuda::Get(ctx_).Workspace(p->workspace));
      return;
    }
    const Plans& legacy = Legacy();
    switch (pass) {
      case Pass::kForward: {
        void* workspace = cuda::Get(ctx_).Workspace(legacy.forward_bytes);
        CORTADO_CUDNN_CHECK(cudnnConvolutionForward(handle_, &one, src_, x, filter_, w, conv_,
                                                    legacy.forward_algo, workspace,
                                                    legacy.forward_bytes, &zero, dst_, y));
        return;
      }
      case Pass::kData: {
        void* workspace = cuda::Get(ctx_).Workspace(legacy.data_bytes);
        CORTADO_CUDNN_CHECK(cudnnConvolutionBackwardData(handle_, &one, filter_, w, dst_, y, conv_,
                                                         legacy.data_algo, workspace,
                                                         legacy.data_bytes, &zero, src_, x));
        return;
      }
      case Pass::kFilter: {
        void* workspace = cuda::Get(ctx_).Workspace(legacy.filter_bytes);
        CORTADO_CUDNN_CHECK(cudnnConvolutionBackwardFilter(handle_, &one, src_, x, dst_, y, conv_,
                                                           legacy.filter_algo, workspace,
                                                           legacy.filter_bytes, &zero, filter_, w));
        return;
      }
    }
  }

  size_t FilterCount() const {
    const ConvolutionShape& s = shape_;
    return static_cast<size_t>(s.num_output) * (s.channels / s.group) * s.kernel_h * s.kernel_w;
  }
  // Half tensors in NCHW: the half scratch holds only the filter (the weights, or the filter
  // gradient), [K, C, R, S] as the float32 one.
  void* HalfFilter() { return cuda::Get(ctx_).HalfScratch(HalfBytes(Slot::kFilter)); }
  // The graph plan for a call, or nullptr to run the legacy algorithm: no plan for this pass,
  // or pointers the plan's 16-byte alignment does not hold for.
  static const GraphPass* GraphFor(const GraphPass* pass, const void* x, const void* w,
                                   const void* y) {
    return pass != nullptr && Aligned(x) && Aligned(w) && Aligned(y) ? pass : nullptr;
  }

  // Mixed precision: where the half copies of the three operands live (the context's half
  // scratch, each part on a 256-byte boundary), and the copies in and out.
  enum class Slot { kSrc, kFilter, kDst };
  struct HalfOperands {
    void* src;
    void* filter;
    void* dst;
  };
  static size_t Rounded(size_t bytes) { return (bytes + 255) / 256 * 256; }
  // n, c and h*w of an operand as a [n, c, hw] array.
  void Dims(Slot slot, int* n, int* c, int* hw) const {
    const ConvolutionShape& s = shape_;
    switch (slot) {
      case Slot::kSrc:
        *n = s.num, *c = s.channels, *hw = s.height * s.width;
        return;
      case Slot::kFilter:
        *n = s.num_output, *c = s.channels / s.group, *hw = s.kernel_h * s.kernel_w;
        return;
      default:
        *n = s.num, *c = s.num_output, *hw = s.output_h() * s.output_w();
    }
  }
  size_t HalfBytes(Slot slot) const {
    int n = 0, c = 0, hw = 0;
    Dims(slot, &n, &c, &hw);
    return Rounded(static_cast<size_t>(n) * c * hw * 2);
  }
  HalfOperands Operands() {
    const size_t src = HalfBytes(Slot::kSrc), filter = HalfBytes(Slot::kFilter);
    char* base =
        static_cast<char*>(cuda::Get(ctx_).HalfScratch(src + filter + HalfBytes(Slot::kDst)));
    return {base, base + src, base + src + filter};
  }
  void ToHalf(Slot slot, const float* from, void* to) {
    int n = 0, c = 0, hw = 0;
    Dims(slot, &n, &c, &hw);
    gpu::ToHalfNhwc(ctx_, half_, n, c, hw, from, to);
  }
  void FromHalf(Slot slot, const void* from, float beta, float* to) {
    int n = 0, c = 0, hw = 0;
    Dims(slot, &n, &c, &hw);
    gpu::FromHalfNhwc(ctx_, half_, n, c, hw, from, beta, to);
  }

  // The plans of this shape in this context: found in the context's cache, else searched.
  std::shared_ptr<const Plans> FindPlans(bool graph) {
    auto& cache = cuda::Get(ctx_).plans;
    // Half operands' plans are for their layout, whoever's tensors they come from.
    const std::string key = ShapeKey(shape_) + (graph ? " graph" : " legacy") +
                            (half_ == Context::HalfType::kFloat16    ? " float16"
                             : half_ == Context::HalfType::kBFloat16 ? " bfloat16"
                             : tf32_                                 ? " tf32"
                                                                     : "") +
                            (half_ == Context::HalfType::kNone ? ""
                             : nhwc_                           ? " nhwc"
                                                               : " nchw");
    if (auto it = cache.find(key); it != cache.end()) {
      return std::static_pointer_cast<const Plans>(it->second);
    }
    auto plans = std::make_shared<Plans>();
    Search(*plans, graph);
    cache.emplace(key, plans);
    CORTADO_LOG_DEBUG("convolution {}x{}x{}x{} -> {}{}: {}", shape_.num, shape_.channels,
                      shape_.height, shape_.width, shape_.num_output,
                      tf32_ ? " (TF32 allowed)" : "", Describe(*plans));
    return plans;
  }

  // The legacy algorithms, searched the first time a call needs them.
  const Plans& Legacy() {
    if (!plans_->graph) return *plans_;
    if (legacy_ == nullptr) legacy_ = FindPlans(false);
    return *legacy_;
  }

  // Times cuDNN's candidates for each pass on scratch tensors of this shape and keeps the
  // fastest whose workspace fits the limit. A pass the graph API finds nothing for keeps the
  // legacy algorithm, searched when first run.
  void Search(Plans& plans, bool graph) {
    const ConvolutionShape& s = shape_;
    const size_t src_count = static_cast<size_t>(s.num) * s.channels * s.height * s.width;
    const size_t dst_count =
        static_cast<size_t>(s.num) * s.num_output * s.output_h() * s.output_w();
    const size_t filter_count =
        static_cast<size_t>(s.num_output) * (s.channels / s.group) * s.kernel_h * s.kernel_w;
    const size_t element = half_ != Context::HalfType::kNone ? 2 : sizeof(float);
    const size_t limit = SearchWorkspace((src_count + dst_count + filter_count) * element);
    const bool tf32 = tf32_;
    cudaStream_t stream = cuda::Get(ctx_).stream;
    Scratch src(src_count * element), dst(dst_count * element), filter(filter_count * element);
    // Random-free but non-zero contents: zeros can favour algorithms unrealistically.
    CORTADO_CUDA_CHECK(cudaMemsetAsync(src.get(), 0x3c, src_count * element, stream));
    CORTADO_CUDA_CHECK(cudaMemsetAsync(dst.get(), 0x3c, dst_count * element, stream));
    CORTADO_CUDA_CHECK(cudaMemsetAsync(filter.get(), 0x3c, filter_count * element, stream));
    CORTADO_LOG_DEBUG("convolution {}x{}x{}x{} -> {}: searching with {:.1f} MiB of workspace",
                      s.num, s.channels, s.height, s.width, s.num_output,
                      static_cast<double>(limit) / (1 << 20));
    Scratch search_space(limit);
    void* workspace = search_space.get();

    if (graph) {
      plans.graph = true;
      // Half operands run on tensor cores; their engines must still keep float32 sums.
      const bool tensor_cores = tf32 || half_ != Context::HalfType::kNone;
      plans.forward = SearchGraphPass(handle_, stream, s, Pass::kForward, src.get(), filter.get(),
                                      dst.get(), workspace, limit, tensor_cores, data_type_, nhwc_);
      plans.data = SearchGraphPass(handle_, stream, s, Pass::kData, src.get(), filter.get(),
                                   dst.get(), workspace, limit, tensor_cores, data_type_, nhwc_);
      plans.filter = SearchGraphPass(handle_, stream, s, Pass::kFilter, src.get(), filter.get(),
                                     dst.get(), workspace, limit, tensor_cores, data_type_, nhwc_);
      CORTADO_CUDA_CHECK(cudaStreamSynchronize(stream));
      return;
    }

    constexpr int kCandidates = 8;
    int found = 0;
    cudnnConvolutionFwdAlgoPerf_t fwd[kCandidates];
    CORTADO_CUDNN_CHECK(cudnnFindConvolutionForwardAlgorithmEx(
        handle_, src_, src.get(), filter_, filter.get(), conv_, dst_, dst.get(), kCandidates,
        &found, fwd, workspace, limit));
    for (int i = 0; i < found; ++i) {
      if (fwd[i].status == CUDNN_STATUS_SUCCESS && fwd[i].memory <= limit) {
        plans.forward_algo = fwd[i].algo;
        plans.forward_bytes = fwd[i].memory;
        break;
      }
    }
    cudnnConvolutionBwdDataAlgoPerf_t bwd_data[kCandidates];
    CORTADO_CUDNN_CHECK(cudnnFindConvolutionBackwardDataAlgorithmEx(
        handle_, filter_, filter.get(), dst_, dst.get(), conv_, src_, src.get(), kCandidates,
        &found, bwd_data, workspace, limit));
    for (int i = 0; i < found; ++i) {
      if (bwd_data[i].status == CUDNN_STATUS_SUCCESS && bwd_data[i].memory <= limit) {
        plans.data_algo = bwd_data[i].algo;
        plans.data_bytes = bwd_data[i].memory;
        break;
      }
    }
    cudnnConvolutionBwdFilterAlgoPerf_t bwd_filter[kCandidates];
    CORTADO_CUDNN_CHECK(cudnnFindConvolutionBackwardFilterAlgorithmEx(
        handle_, src_, src.get(), dst_, dst.get(), conv_, filter_, filter.get(), kCandidates,
        &found, bwd_filter, workspace, limit));
    for (int i = 0; i < found; ++i) {
      if (bwd_filter[i].status == CUDNN_STATUS_SUCCESS && bwd_filter[i].memory <= limit) {
        plans.filter_algo = bwd_filter[i].algo;
        plans.filter_bytes = bwd_filter[i].memory;
        break;
      }
    }
    CORTADO_CUDA_CHECK(cudaStreamSynchronize(stream));
  }

  Context& ctx_;
  ConvolutionShape shape_;
  cudnnHandle_t handle_ = nullptr;
  // Whether the plan is for half tensors (the *Half passes).
  bool half_tensors_ = false;
  // The half type this convolution computes in (kNone: float32 operands), and whether it may
  // use TF32 tensor cores.
  Context::HalfType half_ = Context::HalfType::kNone;
  bool tf32_ = false;
  // The layout cuDNN reads and writes: NHWC (the half copies) or NCHW (float32, or half tensors
  // with CORTADO_HALF_CONV_LAYOUT=nchw).
  bool nhwc_ = false;
  // Half tensors kept in NHWC themselves (HalfTensorLayouts): read and written without copies.
  bool src_nhwc_ = false, dst_nhwc_ = false;
  cudnnDataType_t data_type_ = CUDNN_DATA_FLOAT;
  // src_, dst_ and filter_ describe what cuDNN's convolution reads and writes: float32 NCHW, or
  // the half type in NHWC under mixed precision (or NCHW, half tensors as they are); float_dst_ is
  // always the float32 NCHW output, where the bias of float32 tensors is added and summed.
  cudnnTensorDescriptor_t src_ = nullptr, dst_ = nullptr, float_dst_ = nullptr, bias_ = nullptr;
  // The output gradient whose half copy the last filter-gradient call left in the scratch, and
  // the scratch's call count then (for the data-gradient call that follows).
  const void* dst_copied_from_ = nullptr;
  uint64_t dst_copied_at_ = 0;
  cudnnFilterDescriptor_t filter_ = nullptr;
  cudnnConvolutionDescriptor_t conv_ = nullptr;
  std::shared_ptr<const Plans> plans_;   // the chosen API's
  std::shared_ptr<const Plans> legacy_;  // the legacy algorithms, when a call needed them
};

}  // namespace

std::unique_ptr<ConvolutionPlan> MakeGpuConvolution(Context& ctx, const ConvolutionShape& shape,
                                                    HalfType half_tensors,
                                                    HalfTensorLayouts layouts) {
  return std::make_unique<CudnnConvolution>(ctx, shape, half_tensors, layouts);
}

#else

std::unique_ptr<ConvolutionPlan> MakeGpuConvolution(Context& /*ctx*/,
                                                    const ConvolutionShape& /*shape*/,
                                                    HalfType /*half_tensors*/,
                                                    HalfTensorLayouts /*layouts*/) {
  return nullptr;
}

#endif

namespace {

HalfConvLayout LayoutFromEnvironment() {
  const char* env = std::getenv("CORTADO_HALF_CONV_LAYOUT");
  if (env == nullptr || std::strcmp(env, "auto") == 0) return HalfConvLayout::kAuto;
  if (std::strcmp(env, "nhwc") == 0) return HalfConvLayout::kNhwc;
  if (std::strcmp(env, "nchw") == 0) return HalfConvLayout::kNchw;
  CORTADO_THROW(kInvalidArgument, "CORTADO_HALF_CONV_LAYOUT must be auto, nhwc or nchw, not '{}'",
                env);
}

// The environment's layout, read at the first use, until a test sets another.
std::atomic<HalfConvLayout>& LayoutInUse() {
  static std::atomic<HalfConvLayout> layout(LayoutFromEnvironment());
  return layout;
}

}  // namespace

HalfConvLayout HalfTensorConvLayout() { return LayoutInUse().load(); }

HalfConvLayout SetHalfTensorConvLayout(HalfConvLayout layout) {
  return LayoutInUse().exchange(layout);
}

}  // namespace cortado::math
