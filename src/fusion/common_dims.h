#pragma once
// Dimensions shared by two views of one linear index (prologue fusion, window_partition.h): an
// elementwise group iterates its coalesced dimensions, the reduction it feeds its kept and
// reduced ones, and both enumerate the same elements in the same order. Their common
// refinement splits each dimension where any space has a boundary (a boundary is the product
// of the sizes inside it), so every memref of either side has one stride per common dimension.
// Spaces whose boundaries do not nest (inner sizes 4 and 6 of 24) have none.

#include <c10/util/ArrayRef.h>
#include <c10/util/Optional.h>
#include <c10/util/SmallVector.h>

#include <cstdint>

namespace torchneuron::fusion {

using DimList = c10::SmallVector<int64_t, 6>;

// The coarsest dimensions (sizes, outermost first, none of size 1) refining every space in
// `spaces` (each a list of sizes, outermost first, all with the same product > 0); nullopt when
// none exists.
c10::optional<DimList> commonDims(c10::ArrayRef<c10::ArrayRef<int64_t>> spaces);

// The strides over `dims` (a refinement of `sizes`, from commonDims, possibly with dimensions
// of size 1 added, whose stride is 0) of a memref with these sizes and strides.
DimList stridesOver(c10::ArrayRef<int64_t> sizes, c10::ArrayRef<int64_t> strides,
                    c10::ArrayRef<int64_t> dims);

} // namespace torchneuron::fusion
