// Activation slots of a pipeline stage (Note [activation slots] in transformer.cpp): a
// model's per-micro-batch state `Acts` (what one micro-batch keeps from its forward to its
// backward) lives in the model itself, as the current slot; the other slots are parked
// here. Selecting a slot swaps the current state with the parked one: Acts holds vectors,
// so nothing is copied and pointers into a slot's buffers stay valid while it is parked.
#pragma once

#include <cstddef>
#include <utility>
#include <vector>

#include "core/error.h"

namespace tandem {

template <typename Acts>
class ActivationSlots {
 public:
  // `slots` slots; `current` becomes slot 0, and `allocate(acts)` sizes each other one.
  template <typename Allocate>
  void configure(int slots, Allocate allocate) {
    TANDEM_CHECK(slots >= 1);
    slot_ = 0;
    parked_.clear();  // Acts may be move-only (device buffers)
    parked_.resize(static_cast<std::size_t>(slots));
    for (std::size_t k = 1; k < parked_.size(); ++k) allocate(parked_[k]);
  }
  int current() const { return slot_; }
  // Slots configured (1 before configure: the current one alone).
  int count() const { return parked_.empty() ? 1 : static_cast<int>(parked_.size()); }
  // Makes `slot` the current one (held in `current`).
  void select(Acts& current, int slot) {
    TANDEM_CHECK(slot >= 0 && (slot == 0 || static_cast<std::size_t>(slot) < parked_.size()));
    if (slot == slot_) return;
    std::swap(current, parked_[static_cast<std::size_t>(slot_)]);
    std::swap(current, parked_[static_cast<std::size_t>(slot)]);
    slot_ = slot;
  }
  // The state of `slot`, current or parked.
  Acts& of(Acts& current, int slot) {
    return slot == slot_ ? current : parked_.at(static_cast<std::size_t>(slot));
  }

 private:
  int slot_ = 0;
  std::vector<Acts> parked_;  // parked_[slot_] is empty: it is the current one
};

}  // namespace tandem
