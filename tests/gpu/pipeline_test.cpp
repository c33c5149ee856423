// Pipeline stages on --device cuda (docs/PIPELINE.md). On one GPU, two CUDA rank models
// play two stages of one pipeline in this thread, the activation and its gradient moved
// between them by device copies, and their gradients match one whole model's; on two
// GPUs the trainer's pipeline over NCCL matches the same run on the CPU. Skipped without
// a GPU (two for the second).
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <set>
#include <tuple>
#include <utility>
#include <vector>

#include "engine/trainer.h"
#include "gpu/gpu_support.h"
#include "gpu/train_support.h"
#include "model/rank_model.h"

namespace tandem {
namespace {

ModelConfig cuda_config(const std::string& model, int rows) {
  return {.spec = ModelSpec::parse(model),
          .batch = rows,
          .data_batches = 4,
          .seed = 7,
          .device = Device::kCuda,
          .ordinal = 0};
}

void sync(RankModel& model) {
  ASSERT_EQ(cudaStreamSynchronize(static_cast<cudaStream_t>(model.stream())), cudaSuccess);
}

std::vector<float> grads_of(RankModel& model) {
  sync(model);
  std::vector<float> host(model.grads().size());
  EXPECT_EQ(cudaMemcpy(host.data(), model.grads().data(), host.size() * sizeof(float),
                       cudaMemcpyDeviceToHost),
            cudaSuccess);
  return host;
}

// Units [0, cut] on stage 0, the rest on stage 1; gpipe's order over `micro` micro-batches
// (every forward, then every backward in micro order), each in its own slot.
void expect_two_stages_match_whole(const std::string& model, int cut, int micro) {
  RankRecorder recorder(0, 1 << 14, /*enabled=*/false);
  const ModelConfig config = cuda_config(model, 2);
  auto whole = make_rank_model(config, recorder);
  auto first = make_rank_model(config, recorder);
  auto second = make_rank_model(config, recorder);
  const int units = whole->units();
  ASSERT_LT(cut + 1, units);
  std::vector<bool> owned0(static_cast<std::size_t>(units), false), owned1 = owned0;
  for (int u = 0; u < units; ++u) (u <= cut ? owned0 : owned1)[static_cast<std::size_t>(u)] = true;
  first->configure_stage(owned0, micro);
  second->configure_stage(owned1, micro);
  whole->begin_step(0);
  first->begin_step(0);
  second->begin_step(0);

  for (int m = 0; m < micro; ++m) {
    whole->set_micro_batch(m);
    for (int u = 0; u < units; ++u) whole->forward_unit(u);
    whole->forward_loss();
    whole->backward_loss();
    for (int u = units - 1; u >= 0; --u) whole->backward_unit(u);
  }

  for (int m = 0; m < micro; ++m) {
    first->select_slot(m);
    second->select_slot(m);
    first->set_micro_batch(m);
    second->set_micro_batch(m);
    for (int u = 0; u <= cut; ++u) first->forward_unit(u);
    sync(*first);  // the "send": stage 0's output, copied into stage 1's slot
    const std::span<float> out = first->unit_input(cut + 1, m);
    const std::span<float> in = second->unit_input(cut + 1, m);
    ASSERT_EQ(out.size(), in.size());
    ASSERT_EQ(cudaMemcpy(in.data(), out.data(), out.size_bytes(), cudaMemcpyDeviceToDevice),
              cudaSuccess);
    for (int u = cut + 1; u < units; ++u) second->forward_unit(u);
    second->forward_loss();
  }
  cuda::DeviceBuffer<float> grad(first->unit_input(cut + 1, 0).size());
  for (int m = 0; m < micro; ++m) {
    second->select_slot(m);
    second->backward_loss();
    for (int u = units - 1; u > cut; --u) second->backward_unit(u);
    const std::span<const float> g = second->input_grad(cut + 1);
    ASSERT_EQ(g.size(), grad.size());
    sync(*second);
    ASSERT_EQ(cudaMemcpy(grad.data(), g.data(), g.size_bytes(), cudaMemcpyDeviceToDevice),
              cudaSuccess);
    first->select_slot(m);
    first->begin_backward(cut, {grad.data(), grad.size()});
    for (int u = cut; u >= 0; --u) first->backward_unit(u);
    sync(*first);  // `grad` is refilled by the next micro-batch
  }
  const double whole_loss = whole->end_step().loss_sum;
  first->end_step();
  const double stage_loss = second->end_step().loss_sum;
  EXPECT_NEAR(stage_loss, whole_loss, 1e-5 * std::abs(whole_loss)) << model;

  const std::vector<float> want = grads_of(*whole), got0 = grads_of(*first),
                           got1 = grads_of(*second);
  const ModelLayout& layout = whole->layout();
  double worst = 0;
  for (int u = 0; u < units; ++u) {
    const std::vector<float>& got = u <= cut ? got0 : got1;
    for (std::size_t i = layout.unit_begin(u); i < layout.unit_end(u); ++i) {
      // gpt's head adds into the tied embedding on the second stage: unit 0's gradient is
      // the two stages' sum.
      const double value = u == 0 && layout.spec().kind == ModelKind::kGpt &&
                                   layout.spec().is_transformer()
                               ? static_cast<double>(got0[i]) + got1[i]
                               : got[i];
      worst = std::max(worst, std::abs(value - want[i]) / (1e-3 + std::abs(want[i])));
    }
  }
  EXPECT_LT(worst, 1e-5) << model << ": largest relative difference of a gradient";
  EXPECT_GT(first->activation_bytes(), 0);
  EXPECT_GT(second->activation_bytes(), 0);
}

TEST(CudaPipelineTest, TwoStagesOnOneGpuMatchAWholeModel) {
  TANDEM_SKIP_WITHOUT_GPU();
  expect_two_stages_match_whole("mlp:4x64", 1, 3);
  expect_two_stages_match_whole("llama:layers=2,dim=64,heads=4,seq=16", 1, 2);
  expect_two_stages_match_whole("gpt:layers=2,dim=64,heads=4,seq=16,vocab=128", 2, 2);
}

// Two stages on two GPUs (nccl) or sharing one (shared); two stages times two replicas
// (the data-parallel groups split from the world); four stages, overlapped and with the
// transfers after compute (characterize's sequential scenario), whose lone sends once
// deadlocked on a device (Note [device exchanges]).
TEST(CudaPipelineTest, StagesTrainAPipelineLikeTheCpu) {
  TANDEM_SKIP_WITHOUT_GPU();
  struct Run {
    const char* schedule;
    int ranks;
    int stages;
    CommMode mode = CommMode::kOverlapped;
  };
  const Run runs[] = {{"1f1b", 2, 2},
                      {"gpipe", 2, 2},
                      {"1f1b", 4, 2},
                      {"1f1b", 4, 4},
                      {"1f1b", 4, 4, CommMode::kSequential},
                      {"gpipe", 2, 2, CommMode::kSequential}};
  for (const auto& [schedule, ranks, stages, mode] : runs) {
    TrainConfig c = testing::cuda_train_config(
        {.model = "llama:layers=4,dim=64,heads=4,seq=16", .ranks = ranks, .batch = 8, .steps = 3});
    c.device_comm = testing::device_comm_for(ranks);
    c.verify = false;  // each rank holds a stage
    c.reducer.mode = mode;
    c.pipeline = {.stages = stages, .schedule = parse_schedule(schedule), .micro_batches = 4};
    const TrainResult gpu = train_local(c);
    c.device = Device::kCpu;
    const TrainResult cpu = train_local(c);
    ASSERT_EQ(gpu.steps.size(), cpu.steps.size());
    for (std::size_t i = 0; i < cpu.steps.size(); ++i) {
      ASSERT_EQ(gpu.steps[i].has_loss, cpu.steps[i].has_loss);
      if (!cpu.steps[i].has_loss) continue;
      EXPECT_NEAR(gpu.steps[i].loss, cpu.steps[i].loss, 1e-4 * std::abs(cpu.steps[i].loss))
          << schedule << " " << stages << " stages, " << to_string(mode) << ", step "
          << cpu.steps[i].step << " rank " << cpu.steps[i].rank;
    }
    // Every forward and backward span carries its micro-batch, as on the cpu (the GPU's
    // spans are recorded at the step's end, long after the micro-batch passed).
    auto labels = [](const TrainResult& r) {
      std::set<std::tuple<int, int, int, int>> out;  // step, rank, kind, micro
      for (const Span& s : r.timeline.spans) {
        if (s.kind == SpanKind::kForward || s.kind == SpanKind::kBackward) {
          out.insert({s.step, s.rank, static_cast<int>(s.kind), s.micro});
        }
      }
      return out;
    };
    const auto gpu_labels = labels(gpu);
    EXPECT_EQ(gpu_labels, labels(cpu)) << schedule;
    for (const auto& label : gpu_labels) EXPECT_GE(std::get<3>(label), 0) << schedule;
  }
}

}  // namespace
}  // namespace tandem
