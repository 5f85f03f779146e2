// The step plans the MPI launcher's leader broadcasts to its followers (engine/model/mpi_runner),
// as int32 words.
#ifndef BLOSSOM_ENGINE_MODEL_STEP_PLAN_H_
#define BLOSSOM_ENGINE_MODEL_STEP_PLAN_H_

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/model/bloom_model.h"

namespace blossom {

// What the leader asks the followers to do, broadcast over the control communicator before it
// does the same itself. Encoded as int32 words: kind, then the kind's arguments.
enum class PlanKind : int32_t { kForward = 1, kAllocateKv = 2, kKvBudget = 3, kShutdown = 4 };

std::string EncodePlan(PlanKind kind, std::initializer_list<int32_t> args = {});

// kForward: max_blocks_per_seq, the five vectors' sizes, then their contents.
std::string EncodeForward(const StepBatch& batch);

// The plan's words (kind first); Internal for a malformed message.
absl::StatusOr<std::vector<int32_t>> PlanWords(const std::string& bytes);

// A kForward plan's batch; Internal for a truncated plan or trailing words.
absl::StatusOr<StepBatch> DecodeForward(const std::vector<int32_t>& words);

}  // namespace blossom

#endif  // BLOSSOM_ENGINE_MODEL_STEP_PLAN_H_
