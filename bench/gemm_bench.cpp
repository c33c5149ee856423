// Single-thread GEMM rates on the shapes tandem's CPU models run, measured in one run and
// interleaved over rounds so that noise hits every library alike:
//   tandem       tandem::sgemm, the path training takes (the default --gemm onednn: each
//                shape on the kernel blas.cpp routes it to)
//   openblas     the system's OpenBLAS as it comes (cblas_sgemm; its kernel by CPU model)
//   onednn       oneDNN's sgemm driver (dnnl_sgemm), every shape
//   onednn-mm    oneDNN's matmul primitive in fp32 (created once per shape)
//   blis         BLIS's cblas_sgemm, loaded with dlopen where libblis.so.4 is installed
//   tandem-bf16  tandem::sgemm with --precision bf16 (where the CPU has AVX512-BF16/AMX)
// Shapes (--shapes): `gpt`, the linear layers of gpt:layers=4,dim=256 at 8 x 128 tokens
// (forward, and the backward's weight and input gradients), the attention's products of
// one sequence and head (128 tokens, head 64; dense here, strided views of the fused qkv
// in the model), and 1024^3 and 2048^3 squares; `mlp`, the linear layers of MLPs of
// width 512 and 1024 at batches 16 to 256, whose batch is the short side of every
// product (forward NN, input gradient NT, weight gradient TN). Prints GFLOP/s (best of
// the rounds) and the ratio of tandem's path to the fastest fp32 library.
//
// Operands are placed as training places them: a layer's weight (the B of a forward NN
// and an input gradient NT) and its weight gradient (the C of a TN) 4 KB-aligned, as the
// model's flat parameters and gradients are (page-backed memory, core/page_array.h);
// activations 16 bytes past it, where glibc's malloc puts a large vector. Placement
// matters: on the Zen 3 VM oneDNN's AVX2 sgemm ran forward products of up to 512 rows
// through layers 512 or 1024 wide 40-50% slower with B 32-byte aligned than 16 bytes
// past, OpenBLAS alike either way (docs/PERFORMANCE.md, "Where the weights lie").
//
// --cold: every call's operands are another copy of them, 16 copies of 16 MB each, so
// that the weights come from memory as in a training step (a pass reads each layer's
// weights once) rather than from the cache a repeated call leaves them in.
//
//   gemm_bench [--rounds 5] [--seconds 0.15] [--shapes gpt|mlp] [--cold]
#include <cblas.h>
#include <dlfcn.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <oneapi/dnnl/dnnl.hpp>
#include <string>
#include <vector>

#include "compute/cpu/blas.h"
#include "core/clock.h"
#include "core/error.h"
#include "core/parse.h"
#include "report/machine.h"

using namespace tandem;

namespace {

// Which operand of a product is the model's parameter (Operands above).
enum class Param : std::uint8_t { kNone, kB, kC };

struct Shape {
  std::string what;
  bool ta, tb;
  int m, n, k;
  Param param = Param::kNone;

  // Row-major leading dimensions of op(A) [m x k] and op(B) [k x n] stored dense.
  int lda() const { return ta ? m : k; }
  int ldb() const { return tb ? k : n; }
};

using CblasSgemm = void (*)(CBLAS_ORDER, CBLAS_TRANSPOSE, CBLAS_TRANSPOSE, int, int, int, float,
                            const float*, int, const float*, int, float, float*, int);

struct Library {
  std::string name;
  bool fp32 = true;  // competes for "fastest fp32"
  std::function<void(const Shape&, const float*, const float*, float*)> run;
  std::vector<double> best;  // per shape, GFLOP/s
};

// GFLOP/s of `call` repeated for at least `seconds`.
double rate(const Shape& s, double seconds, const std::function<void()>& call) {
  call();  // warm: first-call setup, caches
  int calls = 0;
  const std::int64_t t0 = now_ns();
  std::int64_t t = t0;
  do {
    call();
    ++calls;
    t = now_ns();
  } while (static_cast<double>(t - t0) < seconds * 1e9);
  return 2.0 * s.m * s.n * s.k * calls / static_cast<double>(t - t0);
}

std::vector<Shape> gpt_shapes() {
  const int N = 8 * 128, D = 256, F = 4 * D, V = 256, T = 128, H = 64;
  return {{"qkv fwd", false, false, N, 3 * D, D, Param::kB},
          {"qkv dW", true, false, D, 3 * D, N, Param::kC},
          {"qkv dX", false, true, N, D, 3 * D, Param::kB},
          {"proj fwd", false, false, N, D, D, Param::kB},
          {"proj dW", true, false, D, D, N, Param::kC},
          {"up fwd", false, false, N, F, D, Param::kB},
          {"up dW", true, false, D, F, N, Param::kC},
          {"up dX", false, true, N, D, F, Param::kB},
          {"down fwd", false, false, N, D, F, Param::kB},
          {"down dW", true, false, F, D, N, Param::kC},
          {"down dX", false, true, N, F, D, Param::kB},
          {"head fwd", false, true, N, V, D, Param::kB},
          {"attn scores", false, true, T, T, H},
          {"attn pv/dQ", false, false, T, H, T},
          {"attn dV/dK", true, false, T, H, T},
          {"square 1024", false, false, 1024, 1024, 1024},
          {"square 2048", false, false, 2048, 2048, 2048}};
}

std::vector<Shape> mlp_shapes() {
  std::vector<Shape> out;
  for (const int d : {512, 1024}) {
    for (const int batch : {16, 32, 64, 128, 256}) {
      const std::string at = " b" + std::to_string(batch) + " " + std::to_string(d);
      out.push_back({"fwd" + at, false, false, batch, d, d, Param::kB});
      out.push_back({"dX" + at, false, true, batch, d, d, Param::kB});
      out.push_back({"dW" + at, true, false, d, d, batch, Param::kC});
    }
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  int rounds = 5;
  double seconds = 0.15;
  std::string set = "gpt";
  bool cold = false;
  const auto refuse = [](const std::string& line) {
    std::fprintf(stderr, "gemm_bench: %s\n", line.c_str());
    return 2;
  };
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--cold") {
      cold = true;
      continue;
    }
    if (flag == "--help" || flag == "-h") {
      std::printf(
          "gemm_bench [--rounds N (1..1000, default 5)] [--seconds S (> 0, <= 60, default "
          "0.15)] [--shapes gpt|mlp] [--cold]\n");
      return 0;
    }
    if (flag != "--rounds" && flag != "--seconds" && flag != "--shapes") {
      return refuse("unknown flag " + flag + " (--rounds, --seconds, --shapes, --cold; --help)");
    }
    if (i + 1 >= argc) return refuse(flag + ": needs a value");
    const std::string value = argv[++i];
    try {
      if (flag == "--rounds") rounds = static_cast<int>(parse_int_in(value, flag, 1, 1000));
      if (flag == "--seconds") seconds = parse_double_in(value, flag, {0, 60, true});
    } catch (const UsageError& e) {
      return refuse(e.what());
    }
    if (flag == "--shapes") set = value;
  }
  if (set != "gpt" && set != "mlp") return refuse("--shapes " + set + ": expected gpt or mlp");
  set_blas_threads(1);
  const std::vector<Shape> shapes = set == "gpt" ? gpt_shapes() : mlp_shapes();

  std::vector<Library> libs;
  libs.push_back({"tandem", true, [](const Shape& s, const float* a, const float* b, float* c) {
                    sgemm(s.ta, s.tb, s.m, s.n, s.k, 1.0f, a, s.lda(), b, s.ldb(), 0.0f, c, s.n);
                  }});
  libs.push_back({"openblas", true, [](const Shape& s, const float* a, const float* b, float* c) {
                    cblas_sgemm(CblasRowMajor, s.ta ? CblasTrans : CblasNoTrans,
                                s.tb ? CblasTrans : CblasNoTrans, s.m, s.n, s.k, 1.0f, a, s.lda(),
                                b, s.ldb(), 0.0f, c, s.n);
                  }});
  libs.push_back({"onednn", true, [](const Shape& s, const float* a, const float* b, float* c) {
                    dnnl_sgemm(s.ta ? 'T' : 'N', s.tb ? 'T' : 'N', s.m, s.n, s.k, 1.0f, a, s.lda(),
                               b, s.ldb(), 0.0f, c, s.n);
                  }});
  // oneDNN's matmul: one primitive per shape, built before timing.
  dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  dnnl::stream stream(engine);
  std::vector<dnnl::matmul> matmuls;
  std::vector<dnnl::matmul::primitive_desc> pds;
  for (const Shape& s : shapes) {
    using dnnl::memory;
    const memory::desc a({s.m, s.k}, memory::data_type::f32,
                         s.ta ? memory::dims{1, s.m} : memory::dims{s.k, 1});
    const memory::desc b({s.k, s.n}, memory::data_type::f32,
                         s.tb ? memory::dims{1, s.k} : memory::dims{s.n, 1});
    const memory::desc c({s.m, s.n}, memory::data_type::f32, memory::dims{s.n, 1});
    pds.emplace_back(dnnl::matmul::desc(a, b, c), engine);
    matmuls.emplace_back(pds.back());
  }
  libs.push_back({"onednn-mm", true, [&](const Shape& s, const float* a, const float* b, float* c) {
                    const std::size_t i = static_cast<std::size_t>(&s - shapes.data());
                    const dnnl::matmul::primitive_desc& pd = pds[i];
                    dnnl::memory am(pd.src_desc(), engine, const_cast<float*>(a));
                    dnnl::memory bm(pd.weights_desc(), engine, const_cast<float*>(b));
                    dnnl::memory cm(pd.dst_desc(), engine, c);
                    matmuls[i].execute(
                        stream, {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}});
                    stream.wait();
                  }});
  // BLIS in a namespace of its own (it exports cblas_sgemm too).
  if (void* blis = ::dlopen("libblis.so.4", RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND)) {
    if (auto fn = reinterpret_cast<CblasSgemm>(::dlsym(blis, "cblas_sgemm"))) {
      if (auto set_threads =
              reinterpret_cast<void (*)(long)>(::dlsym(blis, "bli_thread_set_num_threads"))) {
        set_threads(1);
      }
      libs.push_back({"blis", true, [fn](const Shape& s, const float* a, const float* b, float* c) {
                        fn(CblasRowMajor, s.ta ? CblasTrans : CblasNoTrans,
                           s.tb ? CblasTrans : CblasNoTrans, s.m, s.n, s.k, 1.0f, a, s.lda(), b,
                           s.ldb(), 0.0f, c, s.n);
                      }});
    }
  }
  const bool bf16 = cpu_precision_error(Precision::kBf16, GemmLibrary::kOneDnn).empty();
  if (bf16) {
    libs.push_back(
        {"tandem-bf16", false, [](const Shape& s, const float* a, const float* b, float* c) {
           set_gemm_precision(Precision::kBf16);
           sgemm(s.ta, s.tb, s.m, s.n, s.k, 1.0f, a, s.lda(), b, s.ldb(), 0.0f, c, s.n);
           set_gemm_precision(Precision::kFp32);
         }});
  }

  const nlohmann::json machine = machine_json();
  std::printf("gemm_bench: %s, 1 thread, best of %d interleaved rounds of %.2f s\n",
              machine["cpu"].get<std::string>().c_str(), rounds, seconds);
  std::printf("  tandem: %s\n  openblas as it comes: %s %s\n", blas_description().c_str(),
              openblas_get_config(), openblas_get_corename());
  if (bf16) {
    set_gemm_precision(Precision::kBf16);
    std::printf("  tandem-bf16: %s\n", blas_description().c_str());
    set_gemm_precision(Precision::kFp32);
  } else {
    std::printf("  tandem-bf16: not run (%s)\n",
                cpu_precision_error(Precision::kBf16, GemmLibrary::kOneDnn).c_str());
  }

  const std::size_t copies = cold ? 16 : 1, size = std::size_t{2048} * 2048;
  // Every copy 4 KB-aligned, with room for an activation's 16-byte offset (Operands above).
  constexpr std::size_t kActivation = 16 / sizeof(float);
  const std::size_t floats = copies * size + kActivation;
  const auto page_aligned = [&] {
    auto* p = static_cast<float*>(std::aligned_alloc(4096, floats * sizeof(float)));
    TANDEM_CHECK(p != nullptr);
    return std::unique_ptr<float, decltype(&std::free)>(p, &std::free);
  };
  const auto a = page_aligned(), b = page_aligned(), c = page_aligned();
  for (std::size_t i = 0; i < floats; ++i) {
    a.get()[i] = static_cast<float>(i % 17) / 17.0f - 0.5f;
    b.get()[i] = static_cast<float>(i % 13) / 13.0f - 0.5f;
  }
  if (cold) std::printf("  --cold: operands rotate over %zu copies of 16 MB\n", copies);
  for (Library& lib : libs) lib.best.assign(shapes.size(), 0);
  for (int round = 0; round < rounds; ++round) {
    for (std::size_t i = 0; i < shapes.size(); ++i) {
      const Shape& s = shapes[i];
      const std::size_t b_at = s.param == Param::kB ? 0 : kActivation;
      const std::size_t c_at = s.param == Param::kC ? 0 : kActivation;
      for (Library& lib : libs) {
        std::size_t next = 0;
        const double r = rate(s, seconds, [&] {
          const std::size_t at = (next++ % copies) * size;
          lib.run(s, a.get() + at + kActivation, b.get() + at + b_at, c.get() + at + c_at);
        });
        lib.best[i] = std::max(lib.best[i], r);
      }
    }
  }

  std::printf("\n%-14s %-3s %5s %5s %5s", "shape", "op", "m", "n", "k");
  for (const Library& lib : libs) std::printf(" %11s", lib.name.c_str());
  std::printf("  %-10s %8s %8s\n", "fastest", "tandem/f", "t/oblas");
  double worst = 1e9;
  std::vector<double> ratios, vs_openblas, bf16_ratios;
  for (std::size_t i = 0; i < shapes.size(); ++i) {
    const Shape& s = shapes[i];
    std::printf("%-14s %c%c  %5d %5d %5d", s.what.c_str(), s.ta ? 'T' : 'N', s.tb ? 'T' : 'N', s.m,
                s.n, s.k);
    const Library* fastest = nullptr;
    for (const Library& lib : libs) {
      std::printf(" %11.1f", lib.best[i]);
      if (lib.fp32 && (fastest == nullptr || lib.best[i] > fastest->best[i])) fastest = &lib;
    }
    const double ratio = libs[0].best[i] / fastest->best[i];
    const double oblas = libs[0].best[i] / libs[1].best[i];
    worst = std::min(worst, ratio);
    ratios.push_back(ratio);
    vs_openblas.push_back(oblas);
    if (bf16) bf16_ratios.push_back(libs.back().best[i] / libs[0].best[i]);
    std::printf("  %-10s %8.2f %8.2f\n", fastest->name.c_str(), ratio, oblas);
  }
  std::sort(vs_openblas.begin(), vs_openblas.end());
  std::printf("\ntandem / fastest fp32 library: worst %.2f (target >= 0.90)\n", worst);
  std::printf("tandem / OpenBLAS as it comes: %.2f .. %.2f\n", vs_openblas.front(),
              vs_openblas.back());
  if (bf16) {
    std::sort(bf16_ratios.begin(), bf16_ratios.end());
    std::printf("tandem bf16 / tandem fp32: %.2f .. %.2f\n", bf16_ratios.front(),
                bf16_ratios.back());
  }
  return 0;
}
