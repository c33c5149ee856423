#include "workload_flags.h"

#include <cstdio>

#include "core/error.h"
#include "flag_checks.h"
#include "model/rank_model.h"

namespace tandem::cli {

void add_workload_flags(CLI::App& app, WorkloadFlags& f, WorkloadUse use) {
  const bool here = use == WorkloadUse::kRun;
  if (here) {
    app.add_option("--ranks", f.ranks,
                   "Data-parallel ranks: threads of this process (local backend); under "
                   "mpirun/srun the job's processes, so leave it out or give the same count")
        ->check(integer_in(1, 1024))
        ->capture_default_str();
  }
  app.add_option("--model", f.model,
                 "Model: mlp:DxW (D Linear layers of width W, ReLU; add ',gelu' for GELU), "
                 "linear:IxO (y = x.W), course (linear:512x512, batch 1024), "
                 "gpt:layers=L,dim=D,heads=H,seq=S, llama:layers=L,dim=D,heads=H,seq=S, or a "
                 "preset: gpt3-xl, gpt3-2.7b, gpt3-6.7b, gpt3-13b, llama2-13b (docs/MODELS.md)")
      ->capture_default_str();
  app.add_option("--layers", f.shape.layers,
                 "Transformers: blocks (shrinks a preset, keeping its other proportions)")
      ->check(integer_in(1, 1024));
  app.add_option("--dim", f.shape.dim,
                 "Transformers: model width; heads follow so that the head size stays, "
                 "unless --heads is given")
      ->check(integer_in(1, 65536));
  app.add_option("--heads", f.shape.heads, "Transformers: attention heads (must divide --dim)")
      ->check(integer_in(1, 65536));
  app.add_option("--seq", f.shape.seq, "Transformers: sequence length (context) in tokens")
      ->check(integer_in(1, 65536));
  if (here) {
    app.add_option("--data", f.data,
                   "Transformers: train on this file's bytes (vocabulary 256, a disjoint shard "
                   "per rank, the last tenth held out for a validation loss); default: "
                   "synthetic tokens");
    app.add_option("--eval-every", f.eval_every,
                   "With --data: the validation loss every N steps (0: after the last step only)")
        ->check(integer_in(0, 10'000'000))
        ->capture_default_str();
  }
  app.add_option("--batch", f.batch, "Samples per rank per micro-batch (per rank, as in DDP)")
      ->check(integer_in(1, 1 << 20))
      ->capture_default_str();
  app.add_option("--steps", f.steps, "Training steps (iterations)")
      ->check(integer_in(1, 10'000'000))
      ->capture_default_str();
  if (here) {
    app.add_option("--lr", f.lr, "SGD learning rate")
        ->check(number_in({.min = 0, .max = 1000, .min_open = true}))
        ->capture_default_str();
    app.add_option("--momentum", f.momentum, "SGD momentum")
        ->check(number_in({.min = 0, .max = 1}))
        ->capture_default_str();
    app.add_option("--weight-decay", f.weight_decay, "SGD L2 weight decay")
        ->check(number_in({.min = 0, .max = 1}))
        ->capture_default_str();
  }
  app.add_option("--strategy", f.strategy,
                 "Gradient synchronization: DDP's sequential (after backward, no overlap), "
                 "layerwise, bucketed, chunked:N; or sharded data parallelism: zero1 "
                 "(optimizer state sharded), zero2 (gradients too), fsdp (parameters too, "
                 "gathered unit by unit; docs/SHARDING.md)" +
                     std::string(here ? ", on either device (on cuda the device memory is not "
                                        "given back)"
                                      : ""))
      ->capture_default_str();
  app.add_option("--prefetch", f.prefetch,
                 "fsdp: units whose all-gather runs ahead of the unit computing (0: each "
                 "gathered just before it is used, no overlap)")
      ->check(integer_in(0, 64))
      ->capture_default_str();
  app.add_flag("--no-reshard-after-forward", f.no_reshard_after_forward,
               "fsdp: keep each unit's gathered parameters from its forward to its backward "
               "(PyTorch's reshard_after_forward=False: fewer gathers, more memory)");
  app.add_option("--bucket-mb", f.bucket_mb, "Bucket cap in MiB (bucketed and sequential)")
      ->check(number_in(kBucketMbBounds))
      ->capture_default_str();
  app.add_option("--first-bucket-mb", f.first_bucket_mb,
                 "Cap of the first (earliest) bucket in MiB")
      ->check(number_in(kBucketMbBounds))
      ->capture_default_str();
  app.add_option("--accumulate", f.accumulate,
                 "Micro-batches per synchronization (gradient accumulation)")
      ->check(integer_in(1, 1 << 20))
      ->capture_default_str();
  app.add_flag("--overlap-optimizer", f.overlap_optimizer,
               "Update each bucket's parameters as soon as its all-reduce is done, while "
               "backward and the other buckets' all-reduces go on (DDP's optimizer in "
               "backward, ZeRO's overlapped step for zero1, zero2 and fsdp: each unit's shard as "
               "its reduce-scatter is done; bit for bit the same update; not with "
               "--pipeline)");
  app.add_flag("--double-buffer", f.double_buffer,
               "Two gradient buffers: each step's gradients are all-reduced during the next "
               "step's forward and backward, and the update uses them one step late "
               "(communication overlaps a whole step; the staleness changes the loss; DDP "
               "strategies only)");
  app.add_option("--compress", f.compress,
                 "Gradient compression, as DDP's communication hooks: none, fp16 or bf16 (each "
                 "bucket or sharded unit cast to 16 bits as it becomes ready, reduced in 16 bits "
                 "and widened back: half the bytes), powersgd:R (rank-R factors with error "
                 "feedback and warm start; DDP buckets of whole parameters, on the cpu); not "
                 "with --pipeline")
      ->capture_default_str();
  if (here) {
    app.add_option("--layer-drop", f.layer_drop,
                   "Transformers: each block is skipped (the identity) with this probability "
                   "in each micro-batch on each rank, seeded (LayerDrop): its parameters get "
                   "no gradient, so a DDP bucket waits for them forever unless --find-unused")
        ->check(number_in({.min = 0, .max = 1}))
        ->capture_default_str();
    app.add_flag("--find-unused", f.find_unused,
                 "Mark the gradients of units a micro-batch skipped ready at once (DDP's "
                 "find_unused_parameters); without it a skipped block stops the step with one "
                 "line naming its bucket");
  }
  app.add_option("--recompute", f.recompute,
                 "Transformers: activations dropped after forward and computed again in "
                 "backward: none, full (each block keeps only its input) or selective (the "
                 "attention probabilities only, as Megatron-LM); bit for bit the same training")
      ->capture_default_str();
  app.add_option(
         "--tensor", f.tensor,
         "Tensor parallelism T (transformers, Megatron-style): each block's attention "
         "heads and MLP width, the embedding's and head's vocabulary split over T ranks, "
         "with an all-reduce after each row-parallel product in forward and backward; "
         "--ranks = T x pipeline stages x replicas, T innermost; train runs it on the cpu only so "
         "far, simulate and tune model it (docs/TENSOR.md)")
      ->check(integer_in(1, 1024))
      ->capture_default_str();
  app.add_flag("--sequence-parallel", f.sequence_parallel,
               "With --tensor: the norms and the residual stream split along the tokens too; "
               "each all-reduce becomes an all-gather before a column-parallel product and a "
               "reduce-scatter after a row-parallel one (backward gathers each norm's output "
               "again instead of keeping it): T times smaller D-wide activations "
               "(docs/TENSOR.md)");
  app.add_flag("--tp-overlap", f.tp_overlap,
               "With --sequence-parallel: the all-gathers and reduce-scatters of the blocks, the "
               "embedding and the head run as ring steps of point-to-point transfers, each "
               "overlapping the work on the token block already present (async TP); without it "
               "they are waited for in place");
  app.add_option("--pipeline", f.pipeline,
                 "Pipeline stages P: the model cut into P stages on different ranks, "
                 "--ranks = P x replicas (x --tensor) (docs/PIPELINE.md)")
      ->check(integer_in(1, 1024))
      ->capture_default_str();
  app.add_option("--schedule", f.schedule,
                 "Pipeline schedule: gpipe (all forwards, then all backwards), 1f1b "
                 "(PipeDream-flush, Megatron's), interleaved:V (V model chunks per stage; "
                 "micro-batches a multiple of P" +
                     std::string(here ? "; cpu only" : "") + "); needs --pipeline 2 or more")
      ->capture_default_str();
  app.add_option("--micro-batches", f.micro_batches,
                 "Micro-batches per step: --batch is cut into M of --batch/M rows (with or "
                 "without --pipeline; instead of --accumulate)")
      ->check(integer_in(1, 4096));
  app.add_option("--split", f.split,
                 "Units per model chunk in model order, e.g. 3,3,2 (P x V numbers adding up to "
                 "the model's units), or auto: balanced by each unit's forward + backward time, "
                 "measured before training (one process) or, in a simulation, predicted; "
                 "default: balanced by FLOPs");
  if (here) {
    app.add_option("--link", f.link,
                   "Emulate a slower interconnect: BANDWIDTH,LATENCY (e.g. 25GB/s,5us; "
                   "bandwidth 1B/s to 1000TB/s, latency at most 1000s); alpha-beta wire time "
                   "added after the real data movement");
    app.add_option("--seed", f.seed, "Seed of parameters and data (0..2^64-1)")
        ->check(unsigned_integer())
        ->capture_default_str();
    app.add_option("--threads", f.threads, "BLAS threads per rank")
        ->check(integer_in(1, 1024))
        ->capture_default_str();
    app.add_option("--bind", f.bind,
                   "Ranks that are threads of this process: auto (each rank's threads bound "
                   "to CPUs of its own, --threads per rank, when all ranks fit the CPUs this "
                   "process may use; as mpirun binds one process per core) or none (the "
                   "operating system places every thread)")
        ->check(CLI::IsMember({"auto", "none"}))
        ->capture_default_str();
    app.add_option("--timeout", f.timeout_s,
                   "Seconds a collective may take before the run stops with an error (at most "
                   "1e6, about 11.6 days)")
        ->check(number_in({.min = 0, .max = kMaxTimeoutS, .min_open = true}))
        ->capture_default_str();
  }
  app.add_flag("--no-timeline", f.no_timeline,
               here ? "Record no spans (measures the timeline's own cost; no trace, fewer "
                      "metrics)"
                    : "Keep no spans (no trace.json, fewer metrics; for very many ranks)");
  if (!here) {
    app.add_option("--precision", f.precision, "GEMM precision: fp32, tf32, fp16, bf16")
        ->capture_default_str();
    return;
  }
  app.add_flag("--verify", f.verify,
               "Check after every step that all ranks hold identical parameters");
  app.add_option("--device", f.device,
                 "Where the math runs: cpu (oneDNN or OpenBLAS, see --gemm) or cuda (one GPU per "
                 "rank: rank r "
                 "on device r, or device rank % GPUs under mpirun; cuBLAS plus tandem's "
                 "kernels, spans timed with CUDA events; mlp and transformer models; run on "
                 "one H100, not yet on several GPUs; see docs/GPU.md)")
      ->capture_default_str();
  app.add_option("--precision", f.precision,
                 "GEMM precision: fp32, bf16 (cast GEMM inputs, fp32 accumulation; on the cpu "
                 "where it has AVX512-BF16 or AMX), and with --device cuda also tf32 (tensor "
                 "cores, fp32 storage) and fp16 (cuda transformers: a dynamic loss scale; not "
                 "with sharded strategies or pipelines); master weights, gradients and "
                 "all-reduce stay fp32")
      ->capture_default_str();
  app.add_option("--gemm", f.gemm,
                 "The cpu device's GEMM library: onednn (kernels picked from the CPU's "
                 "features at run time; the default where built; on an AVX2 CPU whose OpenBLAS "
                 "knows the model, the shapes oneDNN runs slower there go to OpenBLAS) or "
                 "openblas (the system's, kernels picked by CPU model)")
      ->capture_default_str();
  app.add_option("--device-comm", f.device_comm,
                 "Collectives between GPUs with --device cuda: nccl (a GPU per "
                 "rank), shared (several ranks on one GPU, moving real data), emulated (a "
                 "ring emulated on one GPU, for one rank), or auto (nccl with several ranks, "
                 "emulated with one)")
      ->capture_default_str();
}

void check_in_process_flags(const WorkloadFlags& f, const std::string& backend) {
  if (backend == "local") return;
  if (!f.link.empty()) {
    throw UsageError("--link: link emulation is for the local backend; under " + backend +
                     " the real interconnect is measured");
  }
  if (!f.binds_ranks()) {
    throw UsageError("--bind " + f.bind +
                     ": places the ranks that are threads of one process; under " + backend +
                     " the launcher places each process (e.g. mpirun --bind-to none)");
  }
}

void apply_cpu_gemm_flags(const WorkloadFlags& f) {
  set_blas_threads(f.threads);
  set_gemm_library(for_flag("--gemm", [&] { return parse_gemm_library(f.gemm); }));
  const Precision precision = for_flag("--precision", [&] { return parse_precision(f.precision); });
  // On the cpu a precision it cannot run is one line (set_gemm_precision throws); a cuda
  // run's --precision is the GPU's, and the cpu keeps its own.
  if (f.device == "cpu") {
    set_gemm_precision(precision);
  } else if (cpu_precision_error(precision, gemm_library()).empty()) {
    set_gemm_precision(precision);
  }
}

void print_cpu_gemm_lines() {
  std::printf("  GEMM: %s per rank\n", blas_description().c_str());
  if (const std::string warning = gemm_report().warning; !warning.empty()) {
    std::printf("  warning: %s\n", warning.c_str());
  }
}

namespace {

// A flag the user gave that cannot apply to the run is a usage error naming both flags:
// accepted in silence, it would look as if it had done something.
void check_flags_apply(const WorkloadFlags& f, const TrainConfig& c) {
  const auto given = [&](const char* flag) { return f.given.contains(flag); };
  const bool fsdp = c.reducer.plan.strategy.kind == StrategyKind::kFsdp;
  const std::string strategy = "--strategy " + c.reducer.plan.strategy.to_string();
  if (given("--prefetch") && !fsdp) {
    throw UsageError("--prefetch: applies to --strategy fsdp only, not to " + strategy);
  }
  if (given("--no-reshard-after-forward") && !fsdp) {
    throw UsageError("--no-reshard-after-forward: applies to --strategy fsdp only, not to " +
                     strategy);
  }
  if (given("--eval-every") && c.data_path.empty()) {
    throw UsageError("--eval-every: measures the held-out loss of --data, and this run has no "
                     "--data");
  }
  if (given("--eval-every") && c.pipeline.stages > 1) {
    throw UsageError("--eval-every: not with --pipeline (pipeline runs measure no validation "
                     "loss)");
  }
}

}  // namespace

TrainConfig to_train_config(const WorkloadFlags& f, bool batch_given, bool runs_here) {
  TrainConfig c;
  c.model = for_flag("--model", [&] { return ModelSpec::parse(f.model); });
  c.model = c.model.with_overrides(f.shape);
  if (!f.data.empty()) c.model = c.model.with_vocab(256, "--data");
  c.model.recompute = for_flag("--recompute", [&] { return parse_recompute(f.recompute); });
  c.model.layer_drop = f.layer_drop;
  c.model.tensor = f.tensor;
  c.model.sequence_parallel = f.sequence_parallel;
  c.model.tp_overlap = f.tp_overlap;
  if (c.model.recompute != Recompute::kNone && !c.model.is_transformer()) {
    throw UsageError(
        "--recompute: transformer models only (gpt, llama and the presets); an "
        "mlp layer keeps only its input and its output");
  }
  c.data_path = f.data;
  c.eval_every = f.eval_every;
  c.ranks = f.ranks;
  c.batch = !batch_given && c.model.default_batch > 0 ? c.model.default_batch : f.batch;
  c.steps = f.steps;
  c.accumulate = f.accumulate;
  c.pipeline.stages = f.pipeline;
  c.pipeline.schedule = parse_schedule(f.schedule);  // its errors name --schedule
  c.pipeline.micro_batches = f.micro_batches;
  // auto: measured where the run trains, predicted where it is simulated.
  c.pipeline.split_auto = f.split == "auto";
  for (const std::string& item : f.split.empty() || c.pipeline.split_auto
                                     ? std::vector<std::string>{}
                                     : split(f.split, ',')) {
    c.pipeline.split.push_back(static_cast<int>(parse_int_in(trim(item), "--split", 1, 1 << 20)));
  }
  c.sgd = {.lr = f.lr, .momentum = f.momentum, .weight_decay = f.weight_decay};
  c.reducer.plan.strategy = for_flag("--strategy", [&] { return Strategy::parse(f.strategy); });
  c.shard = {.prefetch = f.prefetch, .reshard_after_forward = !f.no_reshard_after_forward};
  c.reducer.plan.bucket_cap_bytes = static_cast<std::int64_t>(f.bucket_mb * (1 << 20));
  c.reducer.plan.first_bucket_cap_bytes = static_cast<std::int64_t>(f.first_bucket_mb * (1 << 20));
  // The flags' bounds keep the products in range; what remains is a cap below one float.
  if (c.reducer.plan.bucket_cap_bytes < 4) {
    throw UsageError("--bucket-mb: too small (below 4 bytes, one float)");
  }
  if (c.reducer.plan.first_bucket_cap_bytes < 4) {
    throw UsageError("--first-bucket-mb: too small (below 4 bytes, one float)");
  }
  c.reducer.overlap_optimizer = f.overlap_optimizer;
  c.reducer.double_buffer = f.double_buffer;
  c.reducer.compress = for_flag("--compress", [&] { return Compression::parse(f.compress); });
  c.reducer.find_unused = f.find_unused;
  c.timeout_ns = static_cast<std::int64_t>(f.timeout_s * 1e9);
  if (!f.link.empty()) c.link = for_flag("--link", [&] { return LinkModel::parse(f.link); });
  c.seed = f.seed;
  c.blas_threads = f.threads;
  c.bind = f.binds_ranks();
  c.record = !f.no_timeline;
  c.verify = f.verify;
  c.device = for_flag("--device", [&] { return parse_device(f.device); });
  c.precision = for_flag("--precision", [&] { return parse_precision(f.precision); });
  c.gemm = for_flag("--gemm", [&] { return parse_gemm_library(f.gemm); });
  c.device_comm = f.device_comm;
  check_flags_apply(f, c);
  validate(c, runs_here);
  if (runs_here) check_device_available(c.device);
  return c;
}

std::set<std::string> given_options(const CLI::App& command) {
  std::set<std::string> out;
  for (const CLI::Option* option : command.get_options()) {
    if (option->count() > 0) out.insert(option->get_name());
  }
  return out;
}

}  // namespace tandem::cli
