// When fsdp gathers, waits for and gives back each unit's parameters (ddp/sharded.h): a
// pure state machine over the step's compute events, shared by ShardedSync, which moves
// the data, and the simulator (simulate/simulator.h), which predicts it. It moves no data
// and knows no backend.
//
// Events of a step: micro-batch m's forward of unit u is m·2n + u, its backward of unit u
// is m·2n + 2n-1-u (n units). An event needs the parameters of the units its pass reads
// (ModelLayout::units_read: gpt's head also reads the tied embedding).
#pragma once

#include <cstdint>
#include <vector>

namespace tandem {

class ShardSchedule {
 public:
  // `reads[u]`: the units unit u's passes read. `prefetch`: events whose gathers are
  // issued ahead of the one computing (0 in the sequential scenario: gather, then wait,
  // just in time). `reshard_after_forward`: give a unit's parameters back after its
  // forward (else they stay until its backward).
  ShardSchedule(std::vector<std::vector<int>> reads, int micro_batches, int prefetch,
                bool reshard_after_forward);

  int units() const { return static_cast<int>(reads_.size()); }
  int events() const { return events_; }
  const std::vector<int>& needs(int event) const;
  bool forward_event(int event) const;

  // The gathers to issue before `event` computes: every unit the events in
  // [event, event + prefetch] need that is neither resident nor being gathered; they are
  // being gathered from now on.
  std::vector<int> gathers_before(int event);
  // The gathers to wait for before `event` computes: the units it needs that are not
  // resident (each was issued by gathers_before); they are resident from now on.
  std::vector<int> waits_before(int event);
  // The units to give back after `event`: those it needed that no event within the
  // prefetch window (at least the next) needs again; not resident from now on. None after
  // a forward without reshard_after_forward.
  std::vector<int> releases_after(int event);

  // Outside a step's events (the full parameters between steps): a gather issued, a unit
  // gathered, a unit given back.
  void start_gather(int unit);
  void finish_gather(int unit);
  void release(int unit);

  bool resident(int unit) const { return state_[static_cast<std::size_t>(unit)] == kResident; }
  bool gathering(int unit) const { return state_[static_cast<std::size_t>(unit)] == kGathering; }

 private:
  enum State : std::uint8_t { kAbsent, kGathering, kResident };

  std::vector<std::vector<int>> reads_;
  int events_per_micro_ = 0;
  int events_ = 0;
  int prefetch_ = 0;
  bool reshard_after_forward_ = true;
  std::vector<State> state_;
};

}  // namespace tandem
