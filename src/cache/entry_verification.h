#pragma once
// What an entry of any tier must match to be loaded in this process, and the store key that
// files it: every input of its compile (the engine, the device target's description, the key
// material), hashed. The seal (MAC) is checked by the tier that read the entry; these checks
// follow it, before any code is mapped.

#include <string>
#include <vector>

#include "cache/executable_container.h"

namespace torchneuron {

// This host's requirements, but for the key material: the engine (its codegen fingerprint) and
// the device target's description.
LoadRequirements hostRequirements();

// The store key of an entry compiled from `required` (32 hex digits).
std::string storeKeyFor(const LoadRequirements& required);

// The store key the entry holding `container` belongs under: its own compile inputs, as it
// records them, hashed (whichever host it was compiled for). An entry under any other key was
// moved or copied there (its MAC covers its bytes, not the key it is filed under): never loaded,
// and reported as misfiled by `list`/`verify` and refused by `import`.
std::string ownStoreKey(const ExecutableContainer& container);

// "" when `container` belongs under `store_key` (ownStoreKey), else the problem, naming both keys.
std::string misfiledProblem(const std::string& store_key, const ExecutableContainer& container);

// Parses `bytes` and checks them against this host and their own key material, which must hash
// to `store_key` (an entry filed under its own key): "" with the container in `*container`, or
// the problem. For copies between tiers (the CLI's push and pull) and prefetches, whose caller
// has no key material of its own to compare.
std::string verifyEntryForHost(const std::string& store_key, const std::vector<char>& bytes,
                               ExecutableContainer* container = nullptr);

} // namespace torchneuron
