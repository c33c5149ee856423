// The report in a real browser: Debian's chromium, headless, renders report.html from
// file:// with no console message, every chart has its SVG elements in the rendered
// DOM, a hostile span name stays text, and a screenshot is kept as a test artifact
// (report-browser.png next to the test binary, or in $TANDEM_ARTIFACT_DIR).
// scripts/install-deps installs chromium; without it these tests skip, saying so.
#include <gtest/gtest.h>

#include <cstdlib>
#include <regex>

#include "cli/report_support.h"

namespace tandem::testing {
namespace {

namespace fs = std::filesystem;

std::string find_chromium() {
  for (const char* name : {"chromium", "chromium-browser"}) {
    const std::string probe = std::string("command -v ") + name + " >/dev/null 2>&1";
    if (std::system(probe.c_str()) == 0) return name;
  }
  return "";
}

struct Browser {
  std::string out;  // stdout (the DOM with --dump-dom)
  std::string log;  // stderr (chromium's log, console messages included)
  int exit_code = -1;
};

// One headless run; `mode` is --dump-dom or --screenshot=PATH. The profile lives in a
// fresh directory and every background service that could reach the network is off.
Browser run_chromium(const std::string& chromium, const fs::path& page, const std::string& mode) {
  TempDir profile;
  TempDir io;
  const std::string cmd =
      "timeout 120 " + chromium +
      " --headless --no-sandbox --disable-gpu --disable-quic --no-first-run"
      " --disable-background-networking --disable-component-update --disable-sync"
      " --hide-scrollbars --enable-logging=stderr --v=0 --window-size=1400,2400"
      " --user-data-dir=" +
      profile.path().string() + " " + mode + " file://" + fs::absolute(page).string() + " >" +
      (io.path() / "out").string() + " 2>" + (io.path() / "err").string() + " </dev/null";
  const int status = std::system(cmd.c_str());
  return {slurp(io.path() / "out"), slurp(io.path() / "err"),
          WIFEXITED(status) ? WEXITSTATUS(status) : -1};
}

// The <svg ...class="chart KIND"...>...</svg> elements of a serialized DOM.
std::vector<std::string> charts(const std::string& dom, const std::string& kind) {
  std::vector<std::string> out;
  const std::string marker = "class=\"chart " + kind + "\"";
  for (std::size_t at = dom.find(marker); at != std::string::npos; at = dom.find(marker, at + 1)) {
    const std::size_t start = dom.rfind("<svg", at);
    const std::size_t end = dom.find("</svg>", at);
    if (start != std::string::npos && end != std::string::npos) {
      out.push_back(dom.substr(start, end - start));
    }
  }
  return out;
}

std::size_t count(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (std::size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) {
    ++n;
  }
  return n;
}

void expect_no_console_messages(const Browser& b) {
  const std::regex console(":CONSOLE[^\n]*");
  std::smatch m;
  EXPECT_FALSE(std::regex_search(b.log, m, console)) << m.str();
  EXPECT_EQ(b.log.find("Uncaught"), std::string::npos) << b.log;
}

class ReportBrowserTest : public ::testing::Test {
 protected:
  void SetUp() override {
    chromium_ = find_chromium();
    if (chromium_.empty()) {
      GTEST_SKIP() << "chromium is not installed (scripts/install-deps installs it); the "
                      "report was not checked in a browser";
    }
  }
  std::string chromium_;
};

TEST_F(ReportBrowserTest, RendersEveryChartWithoutConsoleErrors) {
  TempDir dir;
  const fs::path page = make_characterize_results(dir.path()) / "report.html";
  const Browser b = run_chromium(chromium_, page, "--dump-dom");
  ASSERT_EQ(b.exit_code, 0) << b.log;
  expect_no_console_messages(b);
  ASSERT_NE(b.out.find("<h1>tandem characterize"), std::string::npos) << b.out.substr(0, 500);

  const auto gantts = charts(b.out, "gantt");
  ASSERT_EQ(gantts.size(), 4u);
  for (const std::string& g : gantts) {
    EXPECT_GT(count(g, "class=\"f-comp\"") + count(g, "class=\"f-comm\""), 0u) << g.substr(0, 300);
    EXPECT_GT(count(g, "<line"), 0u);  // the time axis
  }
  EXPECT_GT(count(gantts[0], "class=\"ovl\""), 0u);  // the overlapped scenario overlaps
  const auto bars = charts(b.out, "bars");
  ASSERT_EQ(bars.size(), 1u);
  EXPECT_GE(count(bars[0], "<rect"), 2u * 2u);  // >= 2 configurations' bars
  // The breakdown per configuration, then the waiting split of the chosen one per rank.
  const auto stacked = charts(b.out, "stacked");
  ASSERT_EQ(stacked.size(), 2u);
  EXPECT_GE(count(stacked[0], "<rect"), 2u * 2u);
  EXPECT_GE(count(stacked[1], "<rect"), 2u);  // the fixture's 2 ranks
  const auto scatter = charts(b.out, "scatter");
  ASSERT_EQ(scatter.size(), 1u);
  EXPECT_EQ(count(scatter[0], "<circle"), 2u);  // one dot per configuration
  const auto lines = charts(b.out, "lines");
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(count(lines[0], "<polyline"), 3u);  // sequential, overlapped, ideal
  const auto power = charts(b.out, "power");
  ASSERT_EQ(power.size(), 4u);
  for (const std::string& p : power) EXPECT_EQ(count(p, "<polyline"), 1u);
}

TEST_F(ReportBrowserTest, HostileSpanNameIsTextInTheRenderedPage) {
  TempDir dir;
  const fs::path page = make_hostile_train_results(dir.path()) / "report.html";
  ASSERT_EQ(run_tandem("report " + page.parent_path().string()).exit_code, 0);
  const Browser b = run_chromium(chromium_, page, "--dump-dom");
  ASSERT_EQ(b.exit_code, 0) << b.log;
  expect_no_console_messages(b);
  // The serialized DOM escapes text nodes, so the name as text reads &lt;script&gt;; a
  // <script element would mean it had become markup.
  EXPECT_EQ(b.out.find("<script"), std::string::npos);
  EXPECT_NE(b.out.find("&lt;script&gt;alert(1)&lt;/script&gt;"), std::string::npos);
}

TEST_F(ReportBrowserTest, ScreenshotIsSavedAsAnArtifact) {
  TempDir dir;
  const fs::path page = make_characterize_results(dir.path()) / "report.html";
  // Next to the test binary (the build tree) unless told otherwise, wherever it runs from.
  const char* artifacts = std::getenv("TANDEM_ARTIFACT_DIR");
  const fs::path shot =
      (artifacts ? fs::absolute(artifacts) : fs::read_symlink("/proc/self/exe").parent_path()) /
      "report-browser.png";
  fs::remove(shot);
  const Browser b = run_chromium(chromium_, page, "--screenshot=" + shot.string());
  ASSERT_EQ(b.exit_code, 0) << b.log;
  expect_no_console_messages(b);
  const std::string png = slurp(shot);
  ASSERT_GT(png.size(), 8u);
  EXPECT_EQ(png.substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8));
  EXPECT_GT(png.size(), 20'000u);  // a blank page compresses to a few KB
}

}  // namespace
}  // namespace tandem::testing
