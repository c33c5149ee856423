#include "report/summary_header.h"

#include "core/error.h"
#include "core/version.h"
#include "report/machine.h"

namespace tandem {

namespace {

constexpr ResultsCommand kCommands[] = {ResultsCommand::kTrain, ResultsCommand::kCharacterize,
                                        ResultsCommand::kAnalyze, ResultsCommand::kTune};

}  // namespace

std::string_view to_string(ResultsCommand command) {
  switch (command) {
    case ResultsCommand::kTrain:
      return "train";
    case ResultsCommand::kCharacterize:
      return "characterize";
    case ResultsCommand::kAnalyze:
      return "analyze";
    case ResultsCommand::kTune:
      return "tune";
  }
  return "?";
}

nlohmann::ordered_json summary_header(ResultsCommand command,
                                      const std::vector<std::string>& argv) {
  return {{"schema", kSummarySchema},      {"tool", "tandem"}, {"version", tandem_version()},
          {"command", to_string(command)}, {"argv", argv},     {"created", utc_timestamp()},
          {"machine", machine_json()}};
}

ResultsCommand read_summary_header(const nlohmann::json& s, const std::filesystem::path& file) {
  const std::string where = file.string() + ": ";
  if (!s.is_object()) throw UsageError(where + "not a JSON object");
  if (!s.contains("schema")) {
    if (s.contains("version") && s["version"] == 1) {
      throw UsageError(where +
                       "schema 1 (written before tandem's summary header) is no longer read; "
                       "run the command again to regenerate the directory (docs/REPORT.md)");
    }
    throw UsageError(where + "no \"schema\" header (not a tandem summary)");
  }
  const nlohmann::json& schema = s["schema"];
  if (!schema.is_number_integer() || schema.get<std::int64_t>() != kSummarySchema) {
    throw UsageError(where + "schema " + schema.dump() + " is not supported (this tandem reads " +
                     "schema " + std::to_string(kSummarySchema) + ")");
  }
  if (!s.contains("tool") || s["tool"] != "tandem") {
    throw UsageError(where + "\"tool\" is not \"tandem\" (not a tandem summary)");
  }
  const std::string command =
      s.contains("command") && s["command"].is_string() ? s["command"].get<std::string>() : "";
  for (ResultsCommand c : kCommands) {
    if (command == to_string(c)) return c;
  }
  throw UsageError(where + "unknown command " +
                   (s.contains("command") ? s["command"].dump() : std::string("(none)")) +
                   " (expected train, characterize or analyze)");
}

}  // namespace tandem
