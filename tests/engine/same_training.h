// Two training runs that must be the same run: every parameter's bits at the end and every
// step's loss (the techniques that change how, not what, is computed).
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "engine/trainer.h"

namespace tandem {

inline void expect_same_training(const TrainResult& a, const TrainResult& b,
                                 const std::string& what) {
  ASSERT_FALSE(a.final_params.empty()) << what;
  ASSERT_EQ(a.final_params.size(), b.final_params.size()) << what;
  EXPECT_EQ(std::memcmp(a.final_params.data(), b.final_params.data(), 4 * a.final_params.size()), 0)
      << what << ": the final parameters differ";
  ASSERT_EQ(a.steps.size(), b.steps.size()) << what;
  for (std::size_t i = 0; i < a.steps.size(); ++i) {
    EXPECT_EQ(a.steps[i].loss, b.steps[i].loss) << what << ", step " << a.steps[i].step;
  }
}

}  // namespace tandem
