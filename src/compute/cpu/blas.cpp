#include "compute/cpu/blas.h"

#include <cblas.h>

#include <atomic>
#include <bit>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <set>
#include <sstream>
#include <string>
#include <unordered_map>
#include <vector>

#include "compute/cpu/dispatch.h"
#include "core/error.h"
#include "core/half.h"

#if TANDEM_HAVE_ONEDNN
#include <omp.h>

#include <oneapi/dnnl/dnnl.hpp>
#endif

namespace tandem {
namespace {

std::atomic<GemmLibrary> g_library{default_gemm_library()};
std::atomic<Precision> g_precision{Precision::kFp32};
std::atomic<int> g_threads{0};  // 0: never set, the libraries' own defaults

// ---- What the CPU offers and what a kernel uses, as comparable tiers ----

// Vector tiers of fp32 kernels: a kernel below the CPU's tier leaves speed unused.
enum class Tier : int { kPortable = 0, kSse = 1, kAvx = 2, kAvx2 = 3, kAvx512 = 4 };

std::string_view tier_name(Tier tier) {
  switch (tier) {
    case Tier::kPortable:
      return "portable";
    case Tier::kSse:
      return "SSE";
    case Tier::kAvx:
      return "AVX";
    case Tier::kAvx2:
      return "AVX2";
    case Tier::kAvx512:
      return "AVX-512";
  }
  return "?";
}

struct CpuFeatures {
  std::string best;  // in oneDNN's ISA names
  Tier tier = Tier::kPortable;
  bool bf16 = false;  // AVX512-BF16 or AMX-BF16: bf16 dot products in hardware
};

CpuFeatures cpu_features() {
  CpuFeatures f;
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
  const bool avx512_bf16 = avx512 && __builtin_cpu_supports("avx512bf16");
  const bool amx =
      avx512_bf16 && __builtin_cpu_supports("amx-tile") && __builtin_cpu_supports("amx-bf16");
  f.bf16 = avx512_bf16 || amx;
  if (amx) {
    f.best = "avx512_core_amx";
  } else if (avx512_bf16) {
    f.best = "avx512_core_bf16";
  } else if (avx512) {
    f.best = "avx512_core";
  } else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
    f.best = "avx2";
  } else if (__builtin_cpu_supports("avx")) {
    f.best = "avx";
  } else if (__builtin_cpu_supports("sse4.1")) {
    f.best = "sse41";
  } else {
    f.best = "sse2";
  }
  f.tier = avx512                           ? Tier::kAvx512
           : __builtin_cpu_supports("avx2") ? Tier::kAvx2
           : __builtin_cpu_supports("avx")  ? Tier::kAvx
                                            : Tier::kSse;
#else
  f.best = "portable";
#endif
  return f;
}

// ---- OpenBLAS ----

std::string openblas_version() {
  // openblas_get_config() reads like "OpenBLAS 0.3.21 DYNAMIC_ARCH NO_AFFINITY Haswell
  // MAX_THREADS=64"; the name and version are its first two words.
  std::istringstream config(openblas_get_config() ? openblas_get_config() : "OpenBLAS");
  std::string name, version;
  config >> name >> version;
  std::string out = name.empty() ? "OpenBLAS" : name;
  if (!version.empty()) out += " " + version;
  return out;
}

std::string openblas_threading() {
  switch (openblas_get_parallel()) {
    case 0:
      return "sequential";
    case 1:
      return "pthreads";
    case 2:
      return "OpenMP";
    default:
      return "unknown threading";
  }
}

// The tier of an OpenBLAS DYNAMIC_ARCH core. Anything not named here is one of its
// generic or pre-AVX cores (Prescott, Core2, Nehalem, Atom, ...).
Tier openblas_core_tier(std::string_view core) {
  for (std::string_view c : {"SkylakeX", "Cooperlake", "SapphireRapids"}) {
    if (core == c) return Tier::kAvx512;
  }
  for (std::string_view c : {"Haswell", "Zen", "Excavator", "Steamroller"}) {
    if (core == c) return Tier::kAvx2;
  }
  for (std::string_view c : {"Sandybridge", "Bulldozer", "Piledriver"}) {
    if (core == c) return Tier::kAvx;
  }
  return Tier::kSse;
}

#if TANDEM_HAVE_ONEDNN

// ---- oneDNN ----

// OpenMP's thread count is a per-thread setting (each rank thread that calls a GEMM has
// its own, and its own pool of workers): apply the process-wide bound to the calling
// thread before its first GEMM and whenever it changes.
void apply_omp_threads() {
  thread_local int applied = 0;
  const int t = g_threads.load(std::memory_order_relaxed);
  if (t > 0 && t != applied) {
    omp_set_num_threads(t);
    applied = t;
  }
}

std::string_view onednn_isa_name(dnnl_cpu_isa_t isa) {
  switch (isa) {
    case dnnl_cpu_isa_sse41:
      return "sse41";
    case dnnl_cpu_isa_avx:
      return "avx";
    case dnnl_cpu_isa_avx2:
      return "avx2";
    case dnnl_cpu_isa_avx2_vnni:
      return "avx2_vnni";
    case dnnl_cpu_isa_avx512_mic:
    case dnnl_cpu_isa_avx512_mic_4ops:
      return "avx512_mic";
    case dnnl_cpu_isa_avx512_core:
      return "avx512_core";
    case dnnl_cpu_isa_avx512_core_vnni:
      return "avx512_core_vnni";
    case dnnl_cpu_isa_avx512_core_bf16:
      return "avx512_core_bf16";
    case dnnl_cpu_isa_avx512_core_amx:
      return "avx512_core_amx";
    default:
      return "none";
  }
}

bool isa_at_least(dnnl_cpu_isa_t have, dnnl_cpu_isa_t want) {
  // oneDNN's ISA values are bit sets, each containing the ones below it.
  return (static_cast<unsigned>(have) & static_cast<unsigned>(want)) == static_cast<unsigned>(want);
}

// The ISA of the jit sgemm kernels oneDNN's gemm driver picks (it has them for
// AVX-512, AVX2, AVX and SSE4.1, and a reference loop below that).
std::pair<std::string, Tier> onednn_sgemm_kernel() {
  const dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
  if (isa_at_least(isa, dnnl_cpu_isa_avx512_core)) return {"avx512_core", Tier::kAvx512};
  if (isa_at_least(isa, dnnl_cpu_isa_avx2)) return {"avx2", Tier::kAvx2};
  if (isa_at_least(isa, dnnl_cpu_isa_avx)) return {"avx", Tier::kAvx};
  if (isa_at_least(isa, dnnl_cpu_isa_sse41)) return {"sse41", Tier::kSse};
  return {"ref", Tier::kPortable};
}

bool onednn_bf16_in_hardware() {
  return isa_at_least(dnnl_get_effective_cpu_isa(), dnnl_cpu_isa_avx512_core_bf16);
}

dnnl::engine& cpu_engine() {
  static dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

// One product shape on oneDNN's matmul primitive (bf16 always; fp32 for the shapes where
// it beats the sgemm driver, see onednn_fp32_uses_matmul): its primitive and memory objects,
// created once per thread (oneDNN primitives are not free to build; a step issues the
// same few shapes again and again).
struct Matmul {
  dnnl::matmul primitive;
  dnnl::memory a, b, c;
  std::string impl;
};

struct MatmulKey {
  bool bf16, ta, tb;
  int m, n, k, lda, ldb, ldc;  // bf16: lda and ldb of the dense bf16 copies
  float alpha, beta;
  bool operator==(const MatmulKey&) const = default;
};

struct MatmulKeyHash {
  std::size_t operator()(const MatmulKey& key) const {
    std::size_t h = key.bf16 * 4u + key.ta * 2u + key.tb;
    for (std::uint64_t v : {std::uint64_t(key.m), std::uint64_t(key.n), std::uint64_t(key.k),
                            std::uint64_t(key.lda), std::uint64_t(key.ldb), std::uint64_t(key.ldc),
                            std::uint64_t(std::bit_cast<std::uint32_t>(key.alpha)),
                            std::uint64_t(std::bit_cast<std::uint32_t>(key.beta))}) {
      h = h * 0x9E3779B97F4A7C15ull + v;
    }
    return h;
  }
};

Matmul make_matmul(const MatmulKey& key) {
  using dnnl::memory;
  const memory::dim m = key.m, n = key.n, k = key.k;
  const memory::data_type in = key.bf16 ? memory::data_type::bf16 : memory::data_type::f32;
  // Row-major A [m, k] (or, transposed, stored [k, m]) with its leading dimension; B likewise.
  const memory::dims a_strides = key.ta ? memory::dims{1, key.lda} : memory::dims{key.lda, 1};
  const memory::dims b_strides = key.tb ? memory::dims{1, key.ldb} : memory::dims{key.ldb, 1};
  const memory::desc a_md({m, k}, in, a_strides);
  const memory::desc b_md({k, n}, in, b_strides);
  const memory::desc c_md({m, n}, memory::data_type::f32, memory::dims{key.ldc, 1});
  dnnl::primitive_attr attr;
  if (key.alpha != 1.0f) attr.set_output_scales(0, {key.alpha});
  if (key.beta != 0.0f) {
    dnnl::post_ops ops;
    ops.append_sum(key.beta);
    attr.set_post_ops(ops);
  }
  dnnl::engine& engine = cpu_engine();
  const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_md, b_md, c_md), attr, engine);
  return {.primitive = dnnl::matmul(pd),
          .a = memory(a_md, engine, DNNL_MEMORY_NONE),
          .b = memory(b_md, engine, DNNL_MEMORY_NONE),
          .c = memory(c_md, engine, DNNL_MEMORY_NONE),
          .impl = pd.impl_info_str()};
}

// The kernels (oneDNN's implementation names) of every matmul this process has run, per
// input precision: oneDNN picks one per shape (brgemm for large ones, its gemm driver for
// small), so the report lists them all.
struct UsedKernels {
  std::mutex mutex;
  std::set<std::string> fp32, bf16;
};
UsedKernels& used_kernels() {
  static UsedKernels used;
  return used;
}

std::string used_kernel_list(bool bf16) {
  UsedKernels& used = used_kernels();
  const std::lock_guard lock(used.mutex);
  std::string out;
  for (const std::string& name : bf16 ? used.bf16 : used.fp32) {
    out += (out.empty() ? "" : ", ") + name;
  }
  return out;
}

Matmul& cached_matmul(const MatmulKey& key) {
  thread_local std::unordered_map<MatmulKey, std::unique_ptr<Matmul>, MatmulKeyHash> cache;
  auto [it, fresh] = cache.try_emplace(key);
  if (fresh) {
    it->second = std::make_unique<Matmul>(make_matmul(key));
    UsedKernels& used = used_kernels();
    const std::lock_guard lock(used.mutex);
    (key.bf16 ? used.bf16 : used.fp32).insert(it->second->impl);
  }
  return *it->second;
}

void run_matmul(Matmul& g, const void* a, const void* b, float* c) {
  g.a.set_data_handle(const_cast<void*>(a));
  g.b.set_data_handle(const_cast<void*>(b));
  g.c.set_data_handle(c);
  thread_local dnnl::stream stream(cpu_engine());
  g.primitive.execute(stream, {{DNNL_ARG_SRC, g.a}, {DNNL_ARG_WEIGHTS, g.b}, {DNNL_ARG_DST, g.c}});
  stream.wait();
}

// rows x cols of a row-major matrix with leading dimension ld, as dense bf16.
void pack_bf16(std::vector<std::uint16_t>& out, const float* in, int rows, int cols, int ld) {
  out.resize(static_cast<std::size_t>(rows) * cols);
  for (std::ptrdiff_t r = 0; r < rows; ++r) {
    to_bf16(out.data() + r * cols, in + r * ld, cols);
  }
}

void bf16_gemm_run(bool ta, bool tb, int m, int n, int k, float alpha, const float* a, int lda,
                   const float* b, int ldb, float beta, float* c, int ldc) {
  thread_local std::vector<std::uint16_t> a16, b16;
  pack_bf16(a16, a, ta ? k : m, ta ? m : k, lda);
  pack_bf16(b16, b, tb ? n : k, tb ? k : n, ldb);
  run_matmul(cached_matmul({true, ta, tb, m, n, k, ta ? m : k, tb ? k : n, ldc, alpha, beta}),
             a16.data(), b16.data(), c);
}

std::string onednn_version() {
  const dnnl_version_t* v = dnnl_version();
  return "oneDNN " + std::to_string(v->major) + "." + std::to_string(v->minor) + "." +
         std::to_string(v->patch);
}

#endif  // TANDEM_HAVE_ONEDNN

}  // namespace

// Where oneDNN 2.6's sgemm driver falls behind its own matmul primitive
// (docs/PERFORMANCE.md, "CPU compute at the machine's peak"; gemm_bench --shapes gpt and
// --shapes mlp measure both):
// - a transposed operand, a tall and narrow result and a long reduction, as the weight
//   gradient of a transformer MLP's down projection (A^T [1024 x 1024] . B [1024 x 256]):
//   111-117 GFLOP/s against 138-144 on the Xeon;
// - a short left operand times a transposed right one, as a small batch's input gradient
//   (dY [64 x 1024] . W^T): 170 against 218 on the AMD EPYC, 81 against 140 at 16 rows;
// - a short reduction into a small result, as the weight gradient of a small batch
//   through a narrow layer (X^T [512 x 64] . dY [64 x 512]): 200 against 249 there.
// A fixed rule, so that the same shape always takes the same kernel and the bits repeat.
bool onednn_fp32_uses_matmul(bool ta, bool tb, int m, int n, int k) {
  if (ta != tb && m >= 4 * n && k >= 1024) return true;
  if (!ta && tb && m <= 128) return true;
  return ta && !tb && k <= 64 && m <= 512 && n <= 512;
}

// Where oneDNN 2.6's AVX2 sgemm (and its matmul primitive) fall behind OpenBLAS's kernels
// for the same CPU (docs/PERFORMANCE.md, "An AVX2 CPU"; gemm_bench on an AMD EPYC of
// family 25, Zen 3, with OpenBLAS's Zen kernels; the ranges are of four runs, where one
// kernel measured twice in a run differs by up to 20%):
// - a weight gradient (A^T . B) reducing 64 or more rows into a result of 2^16 to 2^18
//   elements: a transformer MLP's down projection (1024 x 256 x 1024) 58-70 against
//   28-34 GFLOP/s, a width-512 layer at batch 128 65-71 against 45-53; smaller results
//   (an attention head's 128 x 64) and larger ones (a width-1024 layer) run as fast on
//   oneDNN or faster;
// - a forward pass (A . B) of at most 16 rows: 44-59 against 19-24 GFLOP/s at width 1024;
// - a forward pass of 128 rows or more through weights of 2^20 elements or more: 63-79
//   against 54-65 at width 1024, and the 1024^3 and 2048^3 squares by 5-15%;
// - a forward pass of at most 512 rows through weights of 2^16 elements or more whose rows
//   are a multiple of 512 wide (2 KB apart), where the weights lie as the model keeps
//   them, 32-byte aligned (its flat parameters are page-backed): 59-79 against 33-55
//   GFLOP/s for MLPs of width 512 and 1024 at batches 32-256. With B 16 bytes past an
//   alignment oneDNN ran them as fast as OpenBLAS, so a benchmark whose operands malloc
//   placed saw none of it; with rows 768 wide, aligned or not, it kept up. The attention's
//   products (an activation's B of 2^13 elements) stay, and so do a transformer's 1024-row
//   forward passes, which oneDNN ran as fast or faster with aligned weights.
// Only where oneDNN runs its AVX2 kernels (the CPU's best, or as far as ONEDNN_MAX_CPU_ISA
// lets it) and OpenBLAS kernels of that tier (it knows the CPU model): with AVX-512,
// oneDNN led on every shape measured (with operands where malloc put them; the model's
// aligned weights were not measured on those CPUs), and an OpenBLAS on generic kernels
// leads on none.
bool avx2_fp32_uses_openblas(bool ta, bool tb, int m, int n, int k) {
  const auto area = [](int x, int y) { return static_cast<std::int64_t>(x) * y; };
  if (ta && !tb) return k >= 64 && area(m, n) >= (1 << 16) && area(m, n) <= (1 << 18);
  if (!ta && !tb) {
    return m <= 16 || (m >= 128 && area(n, k) >= (1 << 20)) ||
           (m <= 512 && n % 512 == 0 && area(n, k) >= (1 << 16));
  }
  return false;
}

bool fp32_routes_to_openblas() {
  static const bool routes = [] {
#if TANDEM_HAVE_ONEDNN && (defined(__x86_64__) || defined(__i386__))
    const char* core = openblas_get_corename();
    return onednn_sgemm_kernel().second == Tier::kAvx2 && core != nullptr &&
           openblas_core_tier(core) == Tier::kAvx2;
#else
    return false;
#endif
  }();
  return routes;
}

std::string cpu_loops_isa() {
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && \
    !defined(TANDEM_NO_CPU_CLONES)
  // The same tests GCC's resolvers make for the target_clones of dispatch.h.
  __builtin_cpu_init();
  if (__builtin_cpu_supports("x86-64-v4")) return "x86-64-v4 (AVX-512)";
  if (__builtin_cpu_supports("x86-64-v3")) return "x86-64-v3 (AVX2)";
  return "x86-64 (SSE2)";
#else
  return "portable";
#endif
}

std::string_view to_string(GemmLibrary library) {
  return library == GemmLibrary::kOneDnn ? "onednn" : "openblas";
}

bool gemm_library_built(GemmLibrary library) {
  return library == GemmLibrary::kOpenBlas || TANDEM_HAVE_ONEDNN;
}

GemmLibrary default_gemm_library() {
  return TANDEM_HAVE_ONEDNN ? GemmLibrary::kOneDnn : GemmLibrary::kOpenBlas;
}

GemmLibrary parse_gemm_library(std::string_view text) {
  GemmLibrary library;
  if (text == "onednn") {
    library = GemmLibrary::kOneDnn;
  } else if (text == "openblas") {
    library = GemmLibrary::kOpenBlas;
  } else {
    throw UsageError("unknown GEMM library '" + std::string(text) +
                     "' (expected onednn or openblas)");
  }
  if (!gemm_library_built(library)) {
    throw UsageError(
        "this tandem was built without oneDNN (Debian: libdnnl-dev); only "
        "openblas is available");
  }
  return library;
}

void set_gemm_library(GemmLibrary library) {
  TANDEM_CHECK(gemm_library_built(library));
  g_library.store(library);
}

GemmLibrary gemm_library() { return g_library.load(); }

std::string cpu_precision_error(Precision precision, GemmLibrary library) {
  if (precision == Precision::kFp32) return {};
  if (precision != Precision::kBf16) {
    return std::string(to_string(precision)) + " runs on GPUs only (the CPU runs fp32 or bf16)";
  }
  if (library != GemmLibrary::kOneDnn) {
    return "bf16 GEMMs on the CPU run on oneDNN (--gemm onednn), not OpenBLAS";
  }
#if TANDEM_HAVE_ONEDNN
  if (!onednn_bf16_in_hardware()) {
    return "bf16 needs a CPU with AVX512-BF16 or AMX; this one offers " + cpu_features().best +
           " (oneDNN runs up to " + std::string(onednn_isa_name(dnnl_get_effective_cpu_isa())) +
           ")";
  }
#endif
  return {};
}

void set_gemm_precision(Precision precision) {
  if (const std::string why = cpu_precision_error(precision, gemm_library()); !why.empty()) {
    throw UsageError("--precision " + std::string(to_string(precision)) + ": " + why);
  }
  g_precision.store(precision);
}

Precision gemm_precision() { return g_precision.load(); }

void set_blas_threads(int threads) {
  if (threads < 1) {
    throw UsageError("BLAS threads must be >= 1 (got " + std::to_string(threads) + ")");
  }
  g_threads.store(threads);
  openblas_set_num_threads(threads);
}

int blas_threads() {
  const int t = g_threads.load();
  return t > 0 ? t : openblas_get_num_threads();
}

GemmReport gemm_report() {
  const CpuFeatures cpu = cpu_features();
  GemmReport r;
  r.cpu_isa = cpu.best;
  r.loops = cpu_loops_isa();
  r.threads = blas_threads();
  r.precision = gemm_precision();
  Tier tier = Tier::kPortable;
  if (gemm_library() == GemmLibrary::kOpenBlas) {
    r.library = openblas_version();
    r.threading = openblas_threading();
    const char* core = openblas_get_corename();
    r.kernel = core != nullptr && *core != '\0' ? core : "unknown";
#if defined(__x86_64__) || defined(__i386__)
    tier = openblas_core_tier(r.kernel);
#endif
    r.isa = std::string(tier_name(tier));
  } else {
#if TANDEM_HAVE_ONEDNN
    r.library = onednn_version();
    r.threading = "OpenMP";
    const auto [isa, sgemm_tier] = onednn_sgemm_kernel();
    tier = sgemm_tier;
    if (r.precision == Precision::kBf16) {
      // The library's own names for the kernels of the bf16 products run so far; before
      // any, the one a 256^3 product would run.
      r.kernel = used_kernel_list(true);
      if (r.kernel.empty()) {
        r.kernel = make_matmul({true, false, false, 256, 256, 256, 256, 256, 256, 1.0f, 0.0f}).impl;
      }
      r.isa = onednn_isa_name(dnnl_get_effective_cpu_isa());
    } else {
      // The sgemm driver's kernels, and the matmul kernels of the shapes routed there.
      r.kernel = "jit sgemm " + isa;
      if (const std::string matmul = used_kernel_list(false); !matmul.empty()) {
        r.kernel += ", matmul " + matmul;
      }
      if (fp32_routes_to_openblas()) {
        r.kernel +=
            ", OpenBLAS " + std::string(openblas_get_corename()) + " (the shapes routed there)";
      }
      r.isa = isa;
    }
#endif
  }
  if (cpu.tier >= Tier::kAvx2 && tier < cpu.tier) {
    r.warning =
        "GEMMs run " + r.library + " " + r.kernel + " kernels (" + std::string(tier_name(tier)) +
        ") on a CPU with " + std::string(tier_name(cpu.tier)) +
        ": compute runs below what this machine can do" +
        (gemm_library() == GemmLibrary::kOpenBlas && gemm_library_built(GemmLibrary::kOneDnn)
             ? " (--gemm onednn picks kernels by the CPU's features)"
             : "");
  }
  return r;
}

std::string blas_description() {
  const GemmReport r = gemm_report();
  return r.library + " (" + r.threading + ", " + std::to_string(r.threads) +
         (r.threads == 1 ? " thread, " : " threads, ") + std::string(to_string(r.precision)) +
         ", kernel " + r.kernel + "; CPU " + r.cpu_isa + ", loops " + r.loops + ")";
}

void sgemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a, int lda,
           const float* b, int ldb, float beta, float* c, int ldc) {
#if TANDEM_HAVE_ONEDNN
  if (g_library.load(std::memory_order_relaxed) == GemmLibrary::kOneDnn) {
    if (m == 0 || n == 0) return;
    apply_omp_threads();
    if (g_precision.load(std::memory_order_relaxed) == Precision::kBf16 && k > 0) {
      bf16_gemm_run(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
      return;
    }
    // The shapes routed to OpenBLAS fall through to its call below.
    const bool routed =
        k > 0 && fp32_routes_to_openblas() && avx2_fp32_uses_openblas(trans_a, trans_b, m, n, k);
    if (!routed && k > 0 && onednn_fp32_uses_matmul(trans_a, trans_b, m, n, k)) {
      run_matmul(cached_matmul({false, trans_a, trans_b, m, n, k, lda, ldb, ldc, alpha, beta}), a,
                 b, c);
      return;
    }
    if (!routed) {
      const dnnl_status_t status = dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', m, n, k,
                                              alpha, a, lda, b, ldb, beta, c, ldc);
      TANDEM_CHECK(status == dnnl_success);
      return;
    }
  }
#endif
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
              trans_b ? CblasTrans : CblasNoTrans, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

void gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a, int lda,
          const float* b, int ldb, float beta, float* c, int ldc) {
  sgemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

void gemm(bool trans_a, bool trans_b, int m, int n, int k, double alpha, const double* a, int lda,
          const double* b, int ldb, double beta, double* c, int ldc) {
  cblas_dgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
              trans_b ? CblasTrans : CblasNoTrans, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

void to_bf16(unsigned short* out, const float* in, long n) {
  narrow(DataType::kBFloat16, out, in, static_cast<std::size_t>(n));
}

float bf16_to_float(unsigned short v) { return widen(DataType::kBFloat16, v); }

}  // namespace tandem
