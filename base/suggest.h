// "Did you mean": the closest of a set of known names to a misspelled one (a TOML key, an
// environment variable, a topic-template placeholder, a subcommand).
// Thread safety: pure functions.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace walrelay {

// Edit distance (insertions, deletions, substitutions, and transpositions of two
// neighbours), case-sensitive.
size_t EditDistance(std::string_view a, std::string_view b);

// The candidate closest to `word`, if it is near enough to be a likely misspelling (at most
// a third of the longer name's length, and at least 1 edit allowed); empty otherwise. Ties:
// the first candidate.
std::string ClosestName(std::string_view word, const std::vector<std::string>& candidates);

// "; did you mean X?" for ClosestName's answer, or "" when there is none.
std::string DidYouMean(std::string_view word, const std::vector<std::string>& candidates);

}  // namespace walrelay
