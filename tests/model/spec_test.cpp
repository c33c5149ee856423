#include <gtest/gtest.h>

#include <string>

#include "core/error.h"
#include "model/model.h"

namespace tandem {
namespace {

TEST(ModelSpecTest, ParsesMlp) {
  const ModelSpec s = ModelSpec::parse("mlp:4x256", 10);
  EXPECT_EQ(s.text, "mlp:4x256");
  EXPECT_EQ(s.depth, 4);
  EXPECT_EQ(s.input, 256);
  EXPECT_EQ(s.width, 256);
  EXPECT_EQ(s.classes, 10);
  EXPECT_TRUE(s.bias);
  EXPECT_EQ(s.activation, Activation::kReLU);
  EXPECT_EQ(s.default_batch, 0);
  EXPECT_EQ(s.parameter_count(), 3 * (256 * 256 + 256) + 256 * 10 + 10);
}

TEST(ModelSpecTest, ParsesActivationSuffix) {
  EXPECT_EQ(ModelSpec::parse("mlp:4x256,gelu").activation, Activation::kGELU);
  EXPECT_EQ(ModelSpec::parse("mlp:4x256,relu").activation, Activation::kReLU);
  EXPECT_EQ(ModelSpec::parse("mlp:2x8").classes, 16);  // the default
}

TEST(ModelSpecTest, ParsesLinearAndCourse) {
  const ModelSpec l = ModelSpec::parse("linear:128x32", 10);
  EXPECT_EQ(l.depth, 1);
  EXPECT_EQ(l.input, 128);
  EXPECT_EQ(l.classes, 32);  // O, not the classes argument
  EXPECT_FALSE(l.bias);
  EXPECT_EQ(l.parameter_count(), 128 * 32);

  const ModelSpec c = ModelSpec::parse("course");
  EXPECT_EQ(c.text, "course");
  EXPECT_EQ(c.depth, 1);
  EXPECT_EQ(c.input, 512);
  EXPECT_EQ(c.classes, 512);
  EXPECT_FALSE(c.bias);
  EXPECT_EQ(c.default_batch, 1024);
  EXPECT_EQ(c.parameter_count(), 512 * 512);
}

std::string error_of(const std::string& text, int classes = 16) {
  try {
    ModelSpec::parse(text, classes);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(ModelSpecTest, RejectsBadSpecsWithClearMessages) {
  EXPECT_EQ(error_of("foo"), "unknown model 'foo' (expected mlp:DxW, linear:IxO or course)");
  EXPECT_EQ(error_of("mlp:0x5"), "model 'mlp:0x5': depth must be >= 1");
  EXPECT_EQ(error_of(""), "unknown model '' (expected mlp:DxW, linear:IxO or course)");
  EXPECT_NE(error_of("mlp:4").find("expected mlp:DxW"), std::string::npos);
  EXPECT_NE(error_of("mlp:4x0").find("width must be >= 1"), std::string::npos);
  EXPECT_NE(error_of("mlp:-1x4").find("not a number"), std::string::npos);
  EXPECT_NE(error_of("mlp:+1x4").find("not a number"), std::string::npos);
  EXPECT_NE(error_of("mlp:2x4x4").find("not a number"), std::string::npos);
  EXPECT_NE(error_of("mlp:2x").find("not a number"), std::string::npos);
  EXPECT_NE(error_of("mlp: 2x4").find("not a number"), std::string::npos);
  EXPECT_NE(error_of("mlp:2x4,tanh").find("unknown activation 'tanh'"), std::string::npos);
  EXPECT_NE(error_of("mlp:2x4", 0).find("classes"), std::string::npos);
  EXPECT_NE(error_of("linear:4x4,gelu").find("no options"), std::string::npos);
  EXPECT_NE(error_of("course,gelu").find("no options"), std::string::npos);
  EXPECT_NE(error_of("linear:0x4").find("input must be >= 1"), std::string::npos);
  EXPECT_NE(error_of("MLP:2x4").find("unknown model"), std::string::npos);
}

TEST(ModelSpecTest, RejectsAbsurdSizesBeforeAllocating) {
  EXPECT_NE(error_of("mlp:2x65537").find("width must be <= 65536"), std::string::npos);
  EXPECT_NE(error_of("mlp:2x99999999999999999999999").find("<= 65536"), std::string::npos);
  EXPECT_NE(error_of("mlp:100000x8").find("depth must be <= 1024"), std::string::npos);
  // 1024 layers of 65536^2 weights: each dimension is allowed, the total is not.
  EXPECT_NE(error_of("mlp:1024x65536").find("exceed the limit"), std::string::npos);
  EXPECT_NE(error_of("linear:65536x65536").find("exceed the limit"), std::string::npos);
  EXPECT_EQ(ModelSpec::parse("linear:65536x32768").parameter_count(), std::int64_t{1} << 31);
}

}  // namespace
}  // namespace tandem
