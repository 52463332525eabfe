#pragma once
// What a kernel key compiles to depends on code as well as on the key: the registry's lowerings,
// the pass pipeline, the vector-math table, the kernel ABI, the device target. The fingerprint is
// a hash of those sources' contents (made by the build, cmake/codegen_fingerprint.cmake), so a
// change to any of them changes every persistent cache key, while two builds of the same sources,
// on any machine and in any directory, share keys (DESIGN.md decision 3). No build id, time or
// path goes in.

namespace torchneuron::fusion {

// 32 hexadecimal digits. An array, so that other constants can be initialized with it.
extern const char kCodegenFingerprint[];

} // namespace torchneuron::fusion
