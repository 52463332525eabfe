// The overlap rules decided from view geometry agree with ATen's, which read data pointers.

#include "device/view_geometry.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <vector>

namespace torchneuron {
namespace {

struct View {
  std::vector<int64_t> sizes, strides;
  int64_t offset;
};

// Views of one 64-element storage: dense, transposed, strided, expanded, shifted, empty.
const std::vector<View>& views() {
  static const std::vector<View> all = {
      {{4, 4}, {4, 1}, 0},  {{4, 4}, {1, 4}, 0}, {{4, 4}, {4, 1}, 2}, {{4, 4}, {4, 1}, 16},
      {{16}, {1}, 0},       {{8}, {2}, 0},       {{8}, {2}, 1},       {{4, 4}, {0, 1}, 0},
      {{2, 8}, {8, 1}, 8},  {{0, 4}, {4, 1}, 0}, {{4, 2}, {4, 1}, 0}, {{1, 16}, {16, 1}, 0},
      {{2, 2}, {8, 1}, 32}, {{16}, {1}, 48},
  };
  return all;
}

at::Tensor viewOf(const at::Tensor& base, const View& v) {
  return base.as_strided(v.sizes, v.strides, v.offset);
}

TEST(ViewGeometry, OverlapStatusMatchesAten) {
  const at::Tensor base = at::zeros({64});
  for (const View& a : views()) {
    for (const View& b : views()) {
      const at::Tensor ta = viewOf(base, a), tb = viewOf(base, b);
      EXPECT_EQ(overlapStatus(ViewGeometry::of(ta), ViewGeometry::of(tb)),
                at::get_overlap_status(ta, tb))
          << ta.sizes() << ta.strides() << ta.storage_offset() << " vs " << tb.sizes()
          << tb.strides() << tb.storage_offset();
    }
    const at::Tensor ta = viewOf(base, a);
    EXPECT_EQ(overlapStatus(ViewGeometry::of(ta), ViewGeometry::of(ta)),
              at::get_overlap_status(ta, ta)); // one tensor overlaps itself fully
    EXPECT_EQ(internalOverlap(ViewGeometry::of(ta)), at::has_internal_overlap(ta));
  }
  // Views of different storages never overlap, whatever their offsets.
  const at::Tensor other = at::zeros({64});
  EXPECT_EQ(overlapStatus(ViewGeometry::of(base), ViewGeometry::of(other)),
            at::MemOverlapStatus::No);
}

TEST(ViewGeometry, PlannedViewsClassifyLayoutsAsC10Does) {
  const at::Tensor base = at::zeros({64});
  for (const View& v : views()) {
    const at::Tensor t = viewOf(base, v);
    const ViewGeometry planned = ViewGeometry::planned(v.sizes, v.strides, v.offset, 4);
    EXPECT_EQ(planned.contiguous, t.is_contiguous()) << t.sizes() << t.strides();
    EXPECT_EQ(planned.dense, t.is_non_overlapping_and_dense()) << t.sizes() << t.strides();
    EXPECT_EQ(planned.numel, t.numel());
    EXPECT_EQ(planned.storage, nullptr); // a planned tensor aliases nothing
  }
}

} // namespace
} // namespace torchneuron
