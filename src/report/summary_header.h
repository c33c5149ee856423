// The header every summary.json starts with. ResultsWriter writes it; `tandem report`
// checks it before reading anything else and dispatches on "command":
//
//   {"schema": 2, "tool": "tandem", "version": "0.1.0", "command": "characterize",
//    "argv": ["tandem", "characterize", ...], "created": "2026-11-22T06:00:00Z",
//    "machine": {...}, ...the command's own body...}
//
// "schema" is the version of the layout, bumped whenever a reader of the old layout would
// misread the new one; "version" is the version of tandem that wrote it. Schema 1 (before
// this header; its "version" was the layout's) is not read: docs/REPORT.md says how to
// regenerate such a directory.
#pragma once

#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace tandem {

inline constexpr int kSummarySchema = 2;

enum class ResultsCommand : std::uint8_t { kTrain, kCharacterize, kAnalyze, kTune };
// "train", "characterize", "analyze", "tune"
std::string_view to_string(ResultsCommand command);

// The header of a summary written now by `command`, run as `argv`.
nlohmann::ordered_json summary_header(ResultsCommand command, const std::vector<std::string>& argv);

// Checks the header of a parsed summary.json and returns the command that wrote it. Throws
// UsageError("<file>: ...") for a summary without the header (schema 1 included), of
// another tool, or of a schema or command this tandem does not know.
ResultsCommand read_summary_header(const nlohmann::json& summary,
                                   const std::filesystem::path& file);

}  // namespace tandem
