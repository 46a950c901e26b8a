#pragma once
// The order in which to read a safetensors checkpoint into the page cache before loading it
// (util::prefetch_in_background).
#include <vector>

#include "formats/safetensors_file.h"
#include "util/mapped_file.h"

namespace warden::model {

// The tensors the loader reads while loading come first (block scales, norms, shapes, a head it
// converts), then the codes it reads where the file maps them (compressed-tensors' packed int4,
// FP8 e4m3 or e5m2: only the first token reads them), then an embedding table that is only looked
// up (not `tied` to the head; its rows are read as tokens come). Within each class, file order;
// neighbouring ranges less than util::kPrefetchChunk apart are one range. On a cold page cache the
// loader's own work then overlaps the reading of the codes instead of waiting behind it: the
// codes lie first in many files, a converted head or the scales last.
std::vector<util::FileRange> safetensors_prefetch_order(const formats::SafetensorsModel& st,
                                                        bool tied);

}  // namespace warden::model
