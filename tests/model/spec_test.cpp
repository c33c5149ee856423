#include <gtest/gtest.h>

#include <string>
#include <tuple>

#include "core/error.h"
#include "model/model_spec.h"

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
  EXPECT_EQ(error_of("foo"),
            "unknown model 'foo' (expected mlp:DxW, linear:IxO, course, gpt:layers=L,dim=D,heads=H,seq=S, "
            "llama:layers=L,dim=D,heads=H,seq=S, or a preset: gpt3-xl gpt3-2.7b gpt3-6.7b gpt3-13b "
            "llama2-13b)");
  EXPECT_EQ(error_of("mlp:0x5"), "model 'mlp:0x5': depth must be >= 1");
  EXPECT_EQ(error_of(""),
            "unknown model '' (expected mlp:DxW, linear:IxO, course, gpt:layers=L,dim=D,heads=H,seq=S, "
            "llama:layers=L,dim=D,heads=H,seq=S, or a preset: gpt3-xl gpt3-2.7b gpt3-6.7b gpt3-13b "
            "llama2-13b)");
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

// The presets at the ISPASS study's shapes; counts from the architecture's formula:
// gpt: V*D + S*D (embeddings, head tied) + L*(12 D^2 + 13 D) + 2 D;
// llama: 2 V*D (untied head) + L*(4 D^2 + 3 D F + 2 D) + D.
TEST(ModelSpecTest, PresetsHaveThePublishedShapesAndCounts) {
  const ModelSpec xl = ModelSpec::parse("gpt3-xl");
  EXPECT_EQ(xl.kind, ModelKind::kGpt);
  EXPECT_EQ(xl.transformer.layers, 24);
  EXPECT_EQ(xl.transformer.dim, 2048);
  EXPECT_EQ(xl.transformer.heads, 32);
  EXPECT_EQ(xl.transformer.seq, 2048);
  EXPECT_EQ(xl.transformer.vocab, 50304) << "50257 padded to a multiple of 64";
  EXPECT_EQ(xl.transformer.hidden, 4 * 2048);
  EXPECT_EQ(xl.parameter_count(), 1315819520);
  for (const auto& [name, layers, dim, heads] :
       {std::tuple{"gpt3-2.7b", 32, 2560, 32}, std::tuple{"gpt3-6.7b", 32, 4096, 32},
        std::tuple{"gpt3-13b", 40, 5120, 40}}) {
    const ModelSpec s = ModelSpec::parse(name);
    EXPECT_EQ(s.transformer.layers, layers) << name;
    EXPECT_EQ(s.transformer.dim, dim) << name;
    EXPECT_EQ(s.transformer.heads, heads) << name;
    const std::int64_t D = dim, L = layers;
    EXPECT_EQ(s.parameter_count(), 50304 * D + 2048 * D + L * (12 * D * D + 13 * D) + 2 * D)
        << name;
  }
  const ModelSpec llama = ModelSpec::parse("llama2-13b");
  EXPECT_EQ(llama.kind, ModelKind::kLlama);
  EXPECT_EQ(llama.transformer.hidden, 13824);
  EXPECT_EQ(llama.transformer.vocab, 32000);
  EXPECT_EQ(llama.transformer.seq, 4096);
  EXPECT_EQ(llama.parameter_count(), 13015864320) << "LLaMA-2 13B's published count";
  EXPECT_EQ(llama_hidden(4096), 11008);
}

TEST(ModelSpecTest, OverridesShrinkAPresetKeepingItsProportions) {
  const ModelSpec s =
      ModelSpec::parse("gpt3-xl").with_overrides({.layers = 2, .dim = 256, .seq = 128});
  EXPECT_EQ(s.transformer.layers, 2);
  EXPECT_EQ(s.transformer.dim, 256);
  EXPECT_EQ(s.transformer.heads, 4) << "the head size (64) stays";
  EXPECT_EQ(s.transformer.hidden, 1024);
  EXPECT_EQ(s.transformer.seq, 128);
  EXPECT_EQ(s.text, "gpt3-xl:layers=2,dim=256,seq=128") << "heads follow dim";
  EXPECT_EQ(ModelSpec::parse(s.text).parameter_count(), s.parameter_count()) << "round trip";
  const ModelSpec l = ModelSpec::parse("llama2-13b").with_overrides({.layers = 1, .dim = 512});
  EXPECT_EQ(l.transformer.hidden, 1536) << "LLaMA's rule for dim 512";
  EXPECT_EQ(l.transformer.heads, 4);
  const ModelSpec text = ModelSpec::parse("gpt:layers=2,dim=64,heads=2,seq=32").with_vocab(256, "--data");
  EXPECT_EQ(text.transformer.vocab, 256);
}

TEST(ModelSpecTest, RejectsBadTransformerShapesNamingTheKey) {
  EXPECT_NE(error_of("gpt:layers=2,dim=30,heads=4,seq=8").find("heads=4"), std::string::npos);
  EXPECT_NE(error_of("llama:layers=2,dim=12,heads=4,seq=8").find("even head size"),
            std::string::npos);
  EXPECT_NE(error_of("gpt:layers=2,dim=32,seq=8").find("heads"), std::string::npos);
  EXPECT_NE(error_of("gpt:layers=2,dim=32,heads=2,seq=8,hidden=4").find("hidden"),
            std::string::npos)
      << "gpt's MLP is 4 x dim";
  EXPECT_NE(error_of("gpt3-xl:colour=3").find("colour"), std::string::npos);
  EXPECT_THROW((void)ModelSpec::parse("gpt3-xl").with_overrides({.dim = 100}), UsageError);
  EXPECT_THROW((void)ModelSpec::parse("mlp:2x8").with_overrides({.layers = 2}), UsageError);
  EXPECT_THROW(ModelSpec::parse("gpt3-13b").check_size(), UsageError) << "13B floats > 2^31";
  EXPECT_NO_THROW(ModelSpec::parse("gpt3-xl").check_size());
}

}  // namespace
}  // namespace tandem
