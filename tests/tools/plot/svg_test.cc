// The plotting module: round ticks, and scales that map data into the plot area.
#include "tools/plot/svg.h"

#include "gtest/gtest.h"

namespace ddpkit::plot {
namespace {

TEST(PlotTest, NiceTicksAreRoundAndCoverTheRange) {
  EXPECT_EQ(NiceTicks(0, 1, 5), (std::vector<double>{0, 0.2, 0.4, 0.6, 0.8, 1}));
  EXPECT_EQ(NiceTicks(0, 7.3, 5), (std::vector<double>{0, 2, 4, 6}));
  EXPECT_EQ(NiceTicks(0, 200, 5), (std::vector<double>{0, 50, 100, 150, 200}));
  EXPECT_EQ(NiceTicks(3, 3, 5), (std::vector<double>{3}));
  EXPECT_EQ(TickLabel(0.5), "0.5");
}

TEST(PlotTest, AxesMapDataIntoTheAreaAndClamp) {
  const Axes a{.x = 10,
               .y = 20,
               .width = 100,
               .height = 50,
               .x_min = 0,
               .x_max = 10,
               .y_min = 0,
               .y_max = 1};
  EXPECT_DOUBLE_EQ(a.X(5), 60);
  EXPECT_DOUBLE_EQ(a.Y(1), 20);
  EXPECT_DOUBLE_EQ(a.Y(0), 70);
  EXPECT_DOUBLE_EQ(a.X(99), 110);  // clamped to the area
}

TEST(PlotTest, TextIsEscaped) {
  Svg svg(10, 10);
  svg.Text(0, 0, "a < b & \"c\"");
  EXPECT_NE(svg.Finish().find("a &lt; b &amp; &quot;c&quot;"), std::string::npos);
}

}  // namespace
}  // namespace ddpkit::plot
