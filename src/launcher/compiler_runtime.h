#pragma once
// Compiler-runtime routines that LLVM's code generator may call from a kernel but that this
// process does not otherwise have (Debian 12's libgcc predates them). The JIT resolves them here.

#include <utility>
#include <vector>

namespace torchneuron {

// {symbol name, address} of each routine, for the JIT's main symbol table.
std::vector<std::pair<const char*, void*>> compilerRuntimeSymbols();

} // namespace torchneuron
