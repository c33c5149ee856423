// End to end on one process: the model, the loss, SGD and the dataset together learn the
// synthetic task. Deterministic (fixed seeds), so the thresholds are not flaky.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>

#include "model/mlp.h"
#include "model/sgd.h"
#include "model/dataset.h"
#include "timeline/recorder.h"

namespace tandem {
namespace {

double accuracy(Mlp& model, const SyntheticDataset& data, int batches, RankRecorder& rec) {
  int correct = 0, total = 0;
  const int classes = model.spec().classes;
  for (int s = 0; s < batches; ++s) {
    const Batch batch = data.batch(s);
    model.forward(batch, rec, -1);
    const auto logits = model.logits();
    for (int r = 0; r < batch.rows; ++r) {
      const float* row = logits.data() + r * classes;
      correct += (std::max_element(row, row + classes) - row) == batch.y[r];
      ++total;
    }
  }
  return double(correct) / total;
}

TEST(LearnTest, SgdHalvesTheLossAndGeneralizesAcrossRanks) {
  const int classes = 8, rows = 64, batches = 32;
  const ModelSpec spec = ModelSpec::parse("mlp:2x32,gelu", classes);
  const SyntheticDataset data(spec.input, classes, rows, batches, 2024, 0);
  Mlp model(spec, rows, 1);
  Sgd sgd({.lr = 0.05f, .momentum = 0.9f}, model.flat_params().size());
  RankRecorder recorder(0, 16, /*enabled=*/false);

  double first = 0, last = 0;
  const int steps = 200, window = 16;
  for (int step = 0; step < steps; ++step) {
    model.zero_grad();
    const float loss = model.forward(data.batch(step), recorder, step);
    model.backward(recorder, step, {});
    sgd.step(model.flat_params(), model.flat_grads());
    if (step < window) first += loss / window;
    if (step >= steps - window) last += loss / window;
  }
  std::printf("[ learn ] mean loss of the first %d steps %.4f, of the last %d steps %.4f\n", window,
              first, window, last);
  EXPECT_LT(last, 0.5 * first);

  // Rank 1 draws other inputs labelled by the same teacher, so the model should do well
  // there; a dataset from another seed has another teacher and should be near chance.
  const SyntheticDataset same_teacher(spec.input, classes, rows, 4, 2024, 1);
  const SyntheticDataset other_teacher(spec.input, classes, rows, 4, 2025, 0);
  const double acc_same = accuracy(model, same_teacher, 4, recorder);
  const double acc_other = accuracy(model, other_teacher, 4, recorder);
  std::printf("[ learn ] accuracy on rank 1: %.3f, on another seed's teacher: %.3f\n", acc_same,
              acc_other);
  EXPECT_GT(acc_same, 0.4);  // chance is 1/8
  EXPECT_GT(acc_same, acc_other + 0.3);
}

}  // namespace
}  // namespace tandem
