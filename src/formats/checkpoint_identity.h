// What identifies a checkpoint across machines, for the prefill/decode KV handoff: two servers
// may exchange KV pages only when they computed them from the same weights. The identity is a
// hash of the checkpoint's content, not of its path: a copy under another name (or on another
// host) is the same checkpoint, a fine-tune with the same file name and size is not.
#pragma once

#include <string>

namespace warden::formats {

// A GGUF file, or a Hugging Face directory (every regular file in it, by name). Hashed: each
// file's size, its first 1 MiB (GGUF metadata and tensor table, safetensors JSON header, config
// files whole) and 64 evenly spaced 4 KiB samples of the rest, so a multi-hundred-gigabyte
// checkpoint costs ~1 MiB + 64 small reads per file, not a full read. Returned as 16 hex
// digits. Throws util::Error when the path or a file in it cannot be read.
std::string checkpoint_identity(const std::string& path);

}  // namespace warden::formats
