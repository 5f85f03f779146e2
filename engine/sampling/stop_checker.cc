#include "engine/sampling/stop_checker.h"

#include <algorithm>
#include <deque>

namespace blossom {
namespace {

bool IsContinuation(unsigned char c) { return (c & 0xC0) == 0x80; }

// Bytes in the UTF-8 sequence a lead byte starts; 1 for ASCII and for bytes that cannot lead, so
// invalid text is passed through rather than held forever.
size_t SequenceLength(unsigned char lead) {
  if (lead >= 0xF0 && lead <= 0xF7) return 4;
  if (lead >= 0xE0) return lead <= 0xEF ? 3 : 1;
  if (lead >= 0xC0) return 2;
  return 1;
}

// The largest position <= cut at which s can be split without cutting a UTF-8 character in two.
// At the end of s, an incomplete final sequence counts as unfinished (its remaining bytes may
// arrive with the next delta), so the cut moves before it.
size_t Utf8SafeCut(absl::string_view s, size_t cut) {
  if (cut < s.size()) {
    for (int k = 0; k < 3 && cut > 0 && IsContinuation(static_cast<unsigned char>(s[cut])); ++k) {
      --cut;
    }
    return cut;
  }
  size_t lead = s.size();
  for (int k = 0; k < 3 && lead > 0 && IsContinuation(static_cast<unsigned char>(s[lead - 1]));
       ++k) {
    --lead;
  }
  if (lead == 0) return s.size();  // continuation bytes only: invalid, nothing to wait for
  --lead;
  const size_t need = SequenceLength(static_cast<unsigned char>(s[lead]));
  return need > 1 && s.size() - lead < need ? lead : s.size();
}

}  // namespace

const char* FinishReasonName(FinishReason reason) {
  switch (reason) {
    case FinishReason::kNone:
      return "none";
    case FinishReason::kLength:
      return "length";
    case FinishReason::kEosToken:
      return "eos_token";
    case FinishReason::kStopToken:
      return "stop_token";
    case FinishReason::kStopString:
      return "stop_string";
    case FinishReason::kCancelled:
      return "cancelled";
    case FinishReason::kError:
      return "error";
    case FinishReason::kAborted:
      return "abort";
  }
  return "unknown";
}

StopChecker::StopChecker(const StoppingParams& params, absl::Span<const int32_t> end_token_ids)
    : params_(params) {
  if (!params_.ignore_eos) {
    for (int32_t id : end_token_ids) {
      if (!IsEndToken(id)) end_token_ids_.push_back(id);
    }
  }
  for (const std::string& s : params_.stop_strings) {
    if (!s.empty()) stops_.push_back(s);
  }
  // Trie of the stop strings.
  nodes_.emplace_back();
  for (size_t index = 0; index < stops_.size(); ++index) {
    int32_t node = 0;
    for (char ch : stops_[index]) {
      const unsigned char byte = static_cast<unsigned char>(ch);
      int32_t next = Child(node, byte);
      if (next < 0) {
        next = static_cast<int32_t>(nodes_.size());
        Node child;
        child.depth = nodes_[node].depth + 1;
        nodes_.push_back(std::move(child));
        nodes_[node].children.emplace_back(byte, next);
      }
      node = next;
    }
    if (nodes_[node].match < 0) nodes_[node].match = static_cast<int32_t>(index);
  }
  // Fail links breadth-first, so that a node's fail target (shallower) is complete before it.
  std::deque<int32_t> queue;
  nodes_[0].hold = 0;
  for (const auto& edge : nodes_[0].children) queue.push_back(edge.second);
  while (!queue.empty()) {
    const int32_t u = queue.front();
    queue.pop_front();
    Node& node = nodes_[u];  // its fail link was set when its parent was visited
    const Node& fail = nodes_[node.fail];
    if (node.match < 0) node.match = fail.match;
    node.hold = node.children.empty() ? fail.hold : node.depth;
    for (const auto& edge : node.children) {
      nodes_[edge.second].fail = u == 0 ? 0 : Step(node.fail, edge.first);
      queue.push_back(edge.second);
    }
  }
}

int32_t StopChecker::Child(int32_t node, unsigned char byte) const {
  for (const auto& edge : nodes_[node].children) {
    if (edge.first == byte) return edge.second;
  }
  return -1;
}

int32_t StopChecker::Step(int32_t node, unsigned char byte) const {
  while (true) {
    const int32_t next = Child(node, byte);
    if (next >= 0) return next;
    if (node == 0) return 0;
    node = nodes_[node].fail;
  }
}

StopChecker::Result StopChecker::Finish(FinishReason reason, std::string text,
                                        std::string matched_stop) {
  reason_ = reason;
  held_.clear();
  Result result;
  result.text_to_emit = std::move(text);
  result.finished = true;
  result.reason = reason;
  result.matched_stop = std::move(matched_stop);
  return result;
}

bool StopChecker::IsEndToken(int32_t token) const {
  return std::find(end_token_ids_.begin(), end_token_ids_.end(), token) != end_token_ids_.end();
}

bool StopChecker::IsStopToken(int32_t token) const {
  const std::vector<int32_t>& ids = params_.stop_token_ids;
  return std::find(ids.begin(), ids.end(), token) != ids.end();
}

bool StopChecker::EndsOn(int32_t token) const {
  if (finished() || num_generated_ + 1 < params_.min_new_tokens) return false;
  return IsEndToken(token) || IsStopToken(token);
}

StopChecker::Result StopChecker::Process(int32_t token, absl::string_view text_delta,
                                         absl::string_view completed_before) {
  if (finished()) {
    Result result;
    result.finished = true;
    result.reason = reason_;
    return result;
  }
  ++num_generated_;
  held_.append(completed_before.data(), completed_before.size());
  // vLLM V1: EOS and stop tokens end the output from token min_new_tokens on, stop strings only
  // after it (its detokenizer checks them once more than min_tokens tokens exist).
  const bool check_stop_tokens = num_generated_ >= params_.min_new_tokens;
  const bool check_stop_strings = num_generated_ > params_.min_new_tokens;
  if (check_stop_tokens) {
    if (IsEndToken(token)) {
      // vLLM leaves out the ending token's text unless include_stop_str_in_output (EOS has text
      // only with skip_special_tokens off).
      std::string text = std::move(held_);
      if (params_.include_stop_string_in_output) text.append(text_delta.data(), text_delta.size());
      return Finish(FinishReason::kEosToken, std::move(text), "");
    }
    if (IsStopToken(token)) {
      std::string text = std::move(held_);
      if (params_.include_stop_string_in_output) text.append(text_delta.data(), text_delta.size());
      return Finish(FinishReason::kStopToken, std::move(text), "");
    }
  }

  // Only the new bytes go through the automaton; held_ keeps the not-yet-emitted tail, which by
  // the hold-back rule contains the start of any stop string that can still complete.
  const size_t old_size = held_.size();
  held_.append(text_delta.data(), text_delta.size());
  for (size_t i = old_size; i < held_.size(); ++i) {
    state_ = Step(state_, static_cast<unsigned char>(held_[i]));
    const int32_t match = nodes_[state_].match;
    const bool at_text_end = i + 1 == held_.size();
    if (check_stop_strings && match >= 0 && (at_text_end || !params_.stop_at_text_end)) {
      const std::string& stop = stops_[match];
      const size_t end = i + 1;
      const size_t cut = params_.include_stop_string_in_output
                             ? end
                             : (end >= stop.size() ? end - stop.size() : 0);
      return Finish(FinishReason::kStopString, held_.substr(0, cut), stop);
    }
  }

  // With the stop string included, text that may start one needs no holding: it is output
  // whether or not the match completes (vLLM's stop buffer is 0 then too). Holding it would move
  // it to a later token, or to the EOS that ends the output (which TGI's stream drops).
  const size_t hold = params_.include_stop_string_in_output
                          ? 0
                          : std::min(held_.size(), static_cast<size_t>(nodes_[state_].hold));
  const size_t cut = Utf8SafeCut(held_, held_.size() - hold);
  Result result;
  result.text_to_emit = held_.substr(0, cut);
  held_.erase(0, cut);
  if (num_generated_ >= params_.max_new_tokens) {
    result.text_to_emit += held_;
    return Finish(FinishReason::kLength, std::move(result.text_to_emit), "");
  }
  return result;
}

std::string StopChecker::Flush() {
  std::string out = std::move(held_);
  held_.clear();
  return out;
}

std::vector<int32_t> StopChecker::SuppressedTokens(int32_t num_generated) const {
  if (num_generated >= params_.min_new_tokens) return {};
  std::vector<int32_t> out = end_token_ids_;
  for (int32_t id : params_.stop_token_ids) {
    if (std::find(out.begin(), out.end(), id) == out.end()) out.push_back(id);
  }
  return out;
}

}  // namespace blossom
