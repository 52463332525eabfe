#pragma once
// Temporary directories for tests: private (mode 0700), under $TMPDIR (else /tmp), and removed
// with everything in them when the test process exits, whatever the tests did with them. A
// forked child never removes its parent's directories.

#include <string>

namespace torchneuron::testing {

// A new empty directory whose name starts with `prefix`; aborts the test program if none can be
// made (a test without its directory would only fail later, less clearly).
std::string makeTestDirectory(const std::string& prefix);

} // namespace torchneuron::testing
