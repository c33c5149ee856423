// What every model over a device backend (backend.h) has, whatever its passes: its layout,
// its backend and the flat parameter and gradient arrays in the backend's memory,
// initialized from a seed. MlpOn (mlp.h) and TransformerOn (transformer.h) derive from it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "model/layout.h"

namespace tandem {

template <typename Backend>
class ModelOn {
 public:
  using T = typename Backend::Scalar;
  using Timer = typename Backend::Timer;
  using LossValue = typename Backend::LossValue;
  using Config = typename Backend::Config;

  const ModelSpec& spec() const { return layout_.spec(); }
  const ModelLayout& layout() const { return layout_; }
  int units() const { return layout_.units(); }
  // The flat arrays (layout.h) in the backend's memory: device pointers on a GPU.
  std::span<T> flat_params() { return {params_.data(), params_.size()}; }
  std::span<T> flat_grads() { return {grads_.data(), grads_.size()}; }
  std::span<const T> flat_params() const { return {params_.data(), params_.size()}; }
  std::span<const T> flat_grads() const { return {grads_.data(), grads_.size()}; }
  Backend& backend() { return *backend_; }
  const Backend& backend() const { return *backend_; }
  void zero_grad() { backend_->zero(grads_); }
  // Elements [begin, end) of the flat parameters or gradients read as zero afterwards;
  // the backend may give their memory back (the CPU's whole pages go to the OS, a GPU's
  // units to its driver). Restored, they may be used again (rank_model.h).
  void discard_params(std::size_t begin, std::size_t end) {
    backend_->discard(params_, begin, end);
  }
  void discard_grads(std::size_t begin, std::size_t end) { backend_->discard(grads_, begin, end); }
  void restore_params(std::size_t begin, std::size_t end) {
    backend_->restore(params_, begin, end);
  }
  void restore_grads(std::size_t begin, std::size_t end) { backend_->restore(grads_, begin, end); }
  std::vector<T> download_params() const { return backend_->download(params_); }
  // Once the device has finished: the memory of every discard goes back now.
  void settle() {
    backend_->settle(params_);
    backend_->settle(grads_);
  }

 protected:
  // The same initial parameters for a seed on every device (layout.h); zero gradients.
  ModelOn(const ModelSpec& spec, LayoutOptions layout, std::uint64_t seed, Config config)
      : layout_(spec, layout),
        backend_(std::make_unique<Backend>(config)),
        params_(backend_->flat(layout_)),
        grads_(backend_->flat(layout_)) {
    backend_->initialize(params_, layout_, seed);
  }
  ~ModelOn() = default;
  ModelOn(ModelOn&&) noexcept = default;
  ModelOn& operator=(ModelOn&&) noexcept = default;

 private:
  ModelLayout layout_;
  std::unique_ptr<Backend> backend_;  // a device's holds a library handle: not movable
  typename Backend::Flat params_;
  typename Backend::Flat grads_;
};

}  // namespace tandem
