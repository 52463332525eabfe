// The overlap rules decided from view geometry agree with ATen's, which read data pointers.

#include "device/view_geometry.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <algorithm>
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

// The elements' offsets in the storage, enumerated.
std::vector<int64_t> offsetsOf(const at::Tensor& base, const View& v) {
  const at::Tensor offsets = viewOf(base, v).contiguous();
  return std::vector<int64_t>(offsets.data_ptr<int64_t>(),
                              offsets.data_ptr<int64_t>() + offsets.numel());
}

TEST(ViewGeometry, ProvablyDisjointIsExactOnSmallViews) {
  const at::Tensor base = at::arange(64, at::kLong);
  std::vector<View> all = views();
  // Column blocks of a 4 x 6 matrix (a GRU cell's chunk(3, 1)), and a block straddling two.
  for (int64_t offset : {0, 2, 4, 1})
    all.push_back({{4, 2}, {6, 1}, offset});
  all.push_back({{3, 3}, {9, 3}, 1}); // every third element of rows of 9, shifted
  all.push_back({{3, 3}, {9, 3}, 2});
  all.push_back({{8}, {3}, 0});
  for (const View& a : all) {
    for (const View& b : all) {
      const std::vector<int64_t> in_a = offsetsOf(base, a), in_b = offsetsOf(base, b);
      bool shared = false;
      for (int64_t x : in_a)
        shared |= std::find(in_b.begin(), in_b.end(), x) != in_b.end();
      const at::Tensor ta = viewOf(base, a), tb = viewOf(base, b);
      EXPECT_EQ(provablyDisjoint(ViewGeometry::of(ta), ViewGeometry::of(tb)), !shared)
          << ta.sizes() << ta.strides() << ta.storage_offset() << " vs " << tb.sizes()
          << tb.strides() << tb.storage_offset();
    }
  }
}

TEST(ViewGeometry, ProvablyDisjointIsNeverClaimedUnproven) {
  // Views of one storage as two item sizes are not judged.
  const at::Tensor bytes = at::zeros({64}, at::kByte);
  const at::Tensor words = bytes.view(at::kInt);
  EXPECT_FALSE(provablyDisjoint(ViewGeometry::of(bytes.narrow(0, 0, 4)),
                                ViewGeometry::of(words.narrow(0, 8, 4))));
  // A search longer than its budget proves nothing: these share no element (even offsets
  // against odd ones), but the indices to try are many.
  const at::Tensor base = at::zeros({1 << 20});
  const at::Tensor a = base.as_strided({64, 64, 64}, {2, 6, 10}, 0);
  const at::Tensor b = base.as_strided({64, 64, 64}, {4, 8, 14}, 1);
  EXPECT_FALSE(provablyDisjoint(ViewGeometry::of(a), ViewGeometry::of(b)));
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
