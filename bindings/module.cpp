// torchneuron._C: the device runtime's Python surface. Loading it registers the device
// (allocator, guard, kernels) with PyTorch through neuron_device's static initializers.

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <c10/util/Exception.h>

#include <cstdio>
#include <map>
#include <stdexcept>
#include <thread>

#include "cache/background_compiles.h"
#include "cache/cache_directory_tag.h"
#include "cache/directory_trust.h"
#include "cache/entry_authenticator.h"
#include "cache/kernel_cache.h"
#include "cache/persistent_store.h"
#include "cache/remote_cache.h"
#include "cache/remote_transfer.h"
#include "device/autograd_device_thread.h"
#include "device/caching_allocator.h"
#include "device/device.h"
#include "device/eager_call_cache.h"
#include "device/list_launch.h"
#include "device/lstm_sequence.h"
#include "device/metrics.h"
#include "device/openmp_wait.h"
#include "device/torch_fork_safety.h"
#include "device/warm_start.h"
#include "support/settings.h"
#include "tracer/debug_check.h"
#include "tracer/fused_kernels.h"
#include "tracer/tracer.h"

namespace py = pybind11;

namespace {

py::dict allocatorStatsDict() {
  const torchneuron::AllocatorStats stats = torchneuron::allocatorStats();
  py::dict result;
  result["allocated_bytes"] = stats.allocated_bytes;
  result["peak_allocated_bytes"] = stats.peak_allocated_bytes;
  result["reserved_bytes"] = stats.reserved_bytes;
  result["peak_reserved_bytes"] = stats.peak_reserved_bytes;
  result["allocations"] = stats.allocations;
  result["cache_hits"] = stats.cache_hits;
  result["system_allocations"] = stats.system_allocations;
  result["system_frees"] = stats.system_frees;
  result["prefaulted_blocks"] = stats.prefaulted_blocks;
  result["prefaulted_bytes"] = stats.prefaulted_bytes;
  result["huge_page_blocks"] = stats.huge_page_blocks;
  result["huge_page_bytes"] = stats.huge_page_bytes;
  return result;
}

// Not reset by reset_metrics(): it describes how this process started.
py::dict warmStartDict() {
  const torchneuron::WarmStartStats w = torchneuron::warmStartStats();
  py::dict result;
  result["profile_found"] = w.profile_found;
  result["kernels_listed"] = w.kernels_listed;
  result["kernels_prefetched"] = w.kernels_prefetched;
  result["blocks_listed"] = w.blocks_listed;
  result["bytes_listed"] = w.bytes_listed;
  result["bytes_prefaulted"] = w.bytes_prefaulted;
  result["background_ms"] = w.background_ms;
  result["done"] = w.done;
  return result;
}

// Whether a Python source file belongs to torch's or torchneuron's package (not the user's code):
// it lies in one of their package directories (a checkout may itself be named torchneuron, so
// the test is the installed package's own directory, not a name in the path). The GIL is held.
bool isLibraryFile(const std::string& file) {
  static const std::vector<std::string> packages = [] {
    std::vector<std::string> directories;
    for (const char* name : {"torch", "torchneuron"}) {
      try {
        py::object os_path = py::module_::import("os.path");
        py::object file = py::module_::import(name).attr("__file__");
        for (py::object path : {file, os_path.attr("realpath")(file)})
          directories.push_back(os_path.attr("dirname")(path).cast<std::string>() + "/");
      } catch (const py::error_already_set& error) {
        // Without the package's directory its frames count as the user's: a line inside it.
      }
    }
    return directories;
  }();
  if (file.rfind("<frozen ", 0) == 0) return true;
  for (const std::string& directory : packages)
    if (file.rfind(directory, 0) == 0) return true;
  return false;
}

// NEURON_ADAPTIVE_DEBUG's source locator (tracer/debug_check.h): the innermost frame of this
// thread outside torch's and torchneuron's files ("train.py:42"), else the innermost frame, else
// "" (autograd's device thread runs no Python). Called without the tracer's lock held.
std::string pythonSourceLine() {
  if (!Py_IsInitialized()) return "";
  py::gil_scoped_acquire gil;
  std::string innermost, located;
  PyFrameObject* frame = PyEval_GetFrame(); // borrowed
  Py_XINCREF(frame);
  while (frame != nullptr && located.empty()) {
    PyCodeObject* code = PyFrame_GetCode(frame); // new reference
    const char* file = PyUnicode_AsUTF8(code->co_filename);
    const std::string here = std::string(file != nullptr ? file : "?") + ":" +
                             std::to_string(PyFrame_GetLineNumber(frame));
    Py_DECREF(code);
    if (innermost.empty()) innermost = here;
    if (file != nullptr && !isLibraryFile(file)) located = here;
    PyFrameObject* back = PyFrame_GetBack(frame); // new reference
    Py_DECREF(frame);
    frame = back;
  }
  Py_XDECREF(frame);
  if (PyErr_Occurred()) PyErr_Clear();
  return located.empty() ? innermost : located;
}

// metrics()["adaptive"]: the tracer's counters (src/tracer/tracer.h).
py::dict adaptiveDict() {
  torchneuron::tracer::AdaptiveStats stats;
  {
    py::gil_scoped_release release;
    stats = torchneuron::tracer::adaptiveStats();
  }
  py::dict result;
  result["enabled"] = stats.enabled;
  result["threshold"] = stats.threshold;
  result["windows"] = stats.windows;
  result["syncs"] = stats.syncs;
  result["signatures_cold"] = stats.signatures_cold;
  result["signatures_hot"] = stats.signatures_hot;
  result["pinned_sites"] = stats.pinned_sites;
  result["replays"] = stats.replays;
  result["ops_traced"] = stats.ops_traced;
  result["ops_deferred"] = stats.ops_deferred;
  result["ops_replayed"] = stats.ops_replayed;
  result["launches_recorded"] = stats.launches_recorded;
  result["calls_from_plan_cache"] = stats.calls_from_plan_cache;
  result["launches_saved"] = stats.launches_saved;
  result["fused_kernel_runs"] = stats.fused_kernel_runs;
  result["fused_reduction_runs"] = stats.fused_reduction_runs;
  result["fused_table_launches"] = stats.fused_table_launches;
  result["fused_kernels_in_tables"] = stats.fused_kernels_in_tables;
  result["accumulating_products"] = stats.accumulating_products;
  result["dead_launches"] = stats.dead_launches;
  result["unbacked_results_available"] = stats.unbacked_results_available;
  result["unbacked_results"] = stats.unbacked_results;
  result["unbacked_results_backed"] = stats.unbacked_results_backed;
  result["unbacked_results_live"] = stats.unbacked_results_live;
  result["partitions_computed"] = stats.partitions_computed;
  result["partitions_reused"] = stats.partitions_reused;
  result["fused_compiles"] = stats.fused_compiles;
  result["fused_compile_failures"] = stats.fused_compile_failures;
  result["fused_compiles_queued"] = stats.fused_compiles_queued;
  result["tracing_ns_per_op"] = stats.tracing_ns_per_op;
  result["recording_ns_per_op"] = stats.recording_ns_per_op;
  result["debug"] = stats.debug;
  result["debug_batches"] = stats.debug_batches;
  result["debug_mismatches"] = stats.debug_mismatches;
  return result;
}

// The remote tier's counters (remote_cache.h) and the kernel cache's remote hits; `location` is
// "" when there is no remote tier.
py::dict remoteStatsDict(const torchneuron::KernelCacheStats& kernels) {
  torchneuron::RemoteCacheStats r;
  if (torchneuron::RemoteCache* remote = torchneuron::RemoteCache::fromEnvironment())
    r = remote->stats();
  py::dict result;
  result["location"] = r.location;
  result["hits"] = kernels.remote_hits;
  result["load_ms_median"] = kernels.remote_load_ms_median;
  for (auto [name, value] : {std::pair<const char*, int64_t>{"misses", r.misses},
                             {"rejected", r.rejected},
                             {"forged", r.forged},
                             {"foreign", r.foreign},
                             {"faults", r.faults},
                             {"skipped", r.skipped},
                             {"breaker_trips", r.breaker_trips},
                             {"published", r.published},
                             {"publish_failures", r.publish_failures},
                             {"publishes_pending", r.publishes_pending},
                             {"lease_waits", r.lease_waits},
                             {"waited_hits", r.waited_hits},
                             {"wait_timeouts", r.wait_timeouts},
                             {"leases_lost", r.leases_lost},
                             {"bytes_fetched", r.bytes_fetched},
                             {"bytes_published", r.bytes_published}})
    result[name] = value;
  return result;
}

// metrics()["eager_call_cache"] (src/device/eager_call_cache.h).
py::dict eagerCallCacheDict() {
  const torchneuron::EagerCallCacheStats calls = torchneuron::eagerCallCacheStats();
  py::dict result;
  result["enabled"] = calls.enabled;
  result["replays"] = calls.replays;
  result["captures"] = calls.captures;
  result["uncapturable"] = calls.uncapturable;
  return result;
}

py::dict metricsDict() {
  const torchneuron::MetricsSnapshot snapshot = torchneuron::metricsSnapshot();
  py::dict result;
  result["launches"] = snapshot.launches;
  result["ops"] = snapshot.ops_by_kind;
  result["products_split"] = snapshot.products_split;
  result["allocator"] = allocatorStatsDict();
  const torchneuron::CompileMetrics& compile = snapshot.compile;
  result["compiles"] = compile.compiles;
  result["compile_failures"] = compile.compile_failures;
  result["compile_ms_total"] = compile.compile_ms_total;
  result["compile_ms_median"] = compile.compile_ms_median;
  result["compile_ms_max"] = compile.compile_ms_max;
  const torchneuron::BackgroundCompileStats background = torchneuron::backgroundCompileStats();
  result["background_compiles"] = background.queued;
  result["background_compiles_pending"] = background.pending;
  result["kernel_cache_hits"] = compile.kernel_cache_hits;
  result["kernel_cache_misses"] = compile.kernel_cache_misses;
  result["kernels_loaded"] = compile.kernels_loaded;
  result["kernel_cache_bytes"] = compile.kernel_cache_bytes;
  result["kernel_cache_evictions"] = compile.kernel_cache_evictions;
  result["persistent_hits"] = compile.persistent_hits;
  result["persistent_rejected"] = compile.persistent_rejected;
  result["persistent_load_ms_median"] = compile.persistent_load_ms_median;
  result["persistent_writes"] = compile.persistent_writes;
  result["persistent_write_batches"] = compile.persistent_write_batches;
  result["persistent_writes_pending"] = compile.persistent_writes_pending;
  result["warm_start"] = warmStartDict();
  result["adaptive"] = adaptiveDict();
  result["eager_call_cache"] = eagerCallCacheDict();
  result["remote"] = remoteStatsDict(torchneuron::kernelCacheStats());
  return result;
}

// The persistent cache, for the torchneuron-cache CLI (python/torchneuron/cache.py). A directory
// or key the store refuses is a RuntimeError naming the problem.
std::unique_ptr<torchneuron::PersistentStore> storeAt(const std::string& directory) {
  auto store = std::make_unique<torchneuron::PersistentStore>(directory, 0);
  TORCH_CHECK(store->problem().empty(), "[cache] ", store->problem());
  return store;
}

py::dict cacheStats(const std::string& directory) {
  auto store = storeAt(directory);
  const torchneuron::PersistentStoreStats s = store->stats();
  py::dict result;
  for (auto [name, value] : {std::pair<const char*, int64_t>{"entries", s.entries},
                             {"bytes", s.bytes},
                             {"hits", s.hits},
                             {"misses", s.misses},
                             {"corrupt", s.corrupt},
                             {"evicted", s.evicted},
                             {"foreign", s.foreign},
                             {"forged", s.forged}})
    result[name] = value;
  result["database_problem"] = s.database_problem;
  result["key_id"] = store->keyId();
  result["key_source"] = store->keySource();
  return result;
}

py::tuple cacheList(const std::string& directory) {
  std::string database_problem;
  py::list rows;
  for (const torchneuron::StoredEntryInfo& e : storeAt(directory)->list(&database_problem)) {
    py::dict row;
    row["key"] = e.key;
    row["bytes"] = e.bytes;
    row["kernels"] = e.kernels;
    row["last_use_unix_ms"] = e.last_use_unix_ms;
    row["problem"] = e.problem;
    row["format_version"] = e.format_version;
    row["key_id"] = e.key_id;
    row["seal"] = e.seal;
    row["program"] = e.program;
    rows.append(row);
  }
  return py::make_tuple(rows, database_problem);
}

// The remote tier at `url` under NEURON_CACHE_KEY_FILE; refused: a RuntimeError naming the problem.
std::unique_ptr<torchneuron::RemoteCache> remoteAt(const std::string& url) {
  std::string why;
  std::unique_ptr<torchneuron::RemoteCache> remote = torchneuron::RemoteCache::open(url, &why);
  TORCH_CHECK(remote, "[cache] ", why);
  return remote;
}

py::tuple transferTuple(const torchneuron::TransferReport& r) {
  return py::make_tuple(r.copied, r.present, r.rejected, r.other_hosts, r.failed, r.problem);
}

void defineCacheCommands(py::module_& m) {
  m.def("cache_default_directory", &torchneuron::defaultCacheDirectory);
  m.def("cache_stats", &cacheStats, py::arg("directory"));
  m.def("cache_list", &cacheList, py::arg("directory"));
  m.def(
      "cache_prune",
      [](const std::string& d, int64_t max_bytes) { return storeAt(d)->prune(max_bytes); },
      py::arg("directory"), py::arg("max_bytes"));
  m.def(
      "cache_clear",
      [](const std::string& d) {
        const torchneuron::ClearReport r = storeAt(d)->clear();
        return py::make_tuple(r.cleared, r.profiles, r.lock_files, r.kept_key, r.problem);
      },
      py::arg("directory"));
  m.def(
      "cache_repair", [](const std::string& d) { return storeAt(d)->repair(); },
      py::arg("directory"));
  m.def(
      "cache_export",
      [](const std::string& d, const std::string& file) {
        const torchneuron::ExportReport r = storeAt(d)->exportTo(file);
        return py::make_tuple(r.exported, r.skipped, r.problem);
      },
      py::arg("directory"), py::arg("file"));
  m.def(
      "cache_import",
      [](const std::string& d, const std::string& file, bool trust) {
        const torchneuron::ImportReport r = storeAt(d)->importFrom(file, trust);
        return py::make_tuple(r.imported, r.resigned, r.damaged, r.untrusted, r.problem);
      },
      py::arg("directory"), py::arg("file"), py::arg("trust"));
  m.def("cache_keygen", &torchneuron::writeNewKeyFile, py::arg("file"));
  m.def(
      "cache_directory_problem",
      [](const std::string& resolved) { return torchneuron::cacheDirectoryProblem(resolved); },
      py::arg("resolved"));
  m.def(
      "cache_remote_survey",
      [](const std::string& url) {
        const torchneuron::RemoteSurvey s = torchneuron::surveyRemote(*remoteAt(url));
        py::dict result;
        result["location"] = s.location;
        result["key_id"] = s.key_id;
        result["entries"] = s.entries;
        result["bytes"] = s.bytes;
        result["authentic"] = s.authentic;
        result["rejected"] = s.rejected;
        result["problem"] = s.problem;
        return result;
      },
      py::arg("url"));
  m.def(
      "cache_remote_usage",
      [](const std::string& url) {
        std::string problem;
        std::map<std::string, int64_t> sums = remoteAt(url)->usage(&problem);
        return py::make_tuple(sums, problem);
      },
      py::arg("url"));
  m.def(
      "cache_push",
      [](const std::string& d, const std::string& url) {
        return transferTuple(torchneuron::pushEntries(*storeAt(d), *remoteAt(url)));
      },
      py::arg("directory"), py::arg("url"));
  m.def(
      "cache_pull",
      [](const std::string& d, const std::string& url) {
        return transferTuple(torchneuron::pullEntries(*storeAt(d), *remoteAt(url)));
      },
      py::arg("directory"), py::arg("url"));
  // The CLI's own warnings: one line each on stderr.
  m.def("cache_warnings_to_stderr", [] {
    torchneuron::setCacheWarningHandler([](const std::string& text) {
      std::fprintf(stderr, "torchneuron-cache: warning: %s\n", text.c_str());
    });
  });
}

// c10's default warning handler (a fresh thread has it): a thread that still has it is not
// inside a Python call (or an autograd task), so a TORCH_WARN there would only reach the log.
c10::WarningHandler* defaultWarningHandler() {
  static c10::WarningHandler* handler = [] {
    c10::WarningHandler* found = nullptr;
    std::thread([&found] { found = c10::Warning::get_warning_handler(); }).join();
    return found;
  }();
  return handler;
}

// Cache warnings raised inside an op called from Python become that call's UserWarnings; the
// others wait in the cache's queue for the next op or for take_cache_warnings().
bool deliverCacheWarning(const std::string& text) {
  if (c10::Warning::get_warning_handler() == defaultWarningHandler()) return false;
  TORCH_WARN(text);
  return true;
}

// Reads the settings (support/settings.h): a bad NEURON_FALLBACK raises; a bad cache knob
// queues one warning naming it.
void checkSettings() {
  torchneuron::cacheSettings();
  try {
    torchneuron::fallbackMode();
  } catch (const std::invalid_argument& error) {
    TORCH_CHECK(false, error.what());
  }
}

} // namespace

PYBIND11_MODULE(_C, m) {
  m.doc() = "torchneuron device runtime";
  // c10 errors reach Python as RuntimeError with PyTorch's message and no C++ backtrace.
  py::register_exception_translator([](std::exception_ptr error) {
    try {
      if (error) std::rethrow_exception(error);
    } catch (const c10::Error& e) {
      PyErr_SetString(PyExc_RuntimeError, e.what_without_backtrace());
    }
  });
  defaultWarningHandler();
  torchneuron::makeTorchForkSafe(); // before the program starts threads that may fork
  // A backward pass that ran before this import left autograd without the device's worker.
  torchneuron::startMissingAutogradDeviceThread();
  torchneuron::setCacheWarningDelivery(&deliverCacheWarning);
  m.def("check_settings", &checkSettings);
  // Applies NEURON_OPENMP_WAIT (device/openmp_wait.h) once; returns the rule's name.
  m.def("apply_openmp_wait_rule", [] {
    return std::string(torchneuron::openMpWaitRuleName(torchneuron::applyOpenMpWaitRule()));
  });
  m.def("parked_openmp_team_size", &torchneuron::parkedOpenMpTeamSize);
  m.def("idle_openmp_workers_spin_long",
        [] { return torchneuron::idleOpenMpWorkersSpinLong(torchneuron::applyOpenMpWaitRule()); });
  m.def("take_cache_warnings", &torchneuron::takeQueuedCacheWarnings);
  m.def("flush_store_writes", &torchneuron::flushPersistentWrites,
        py::call_guard<py::gil_scoped_release>());
  m.def("device_count", [] { return static_cast<int>(torchneuron::neuronDeviceCount()); });
  // Any Python int: checked in range before it becomes a c10::DeviceIndex (8 bits), where 256
  // was device 0 and 255 no index at all.
  m.def("check_device_index", [](py::int_ index) {
    const auto count = static_cast<int64_t>(torchneuron::neuronDeviceCount());
    const bool valid = index >= py::int_(0) && index < py::int_(count);
    TORCH_CHECK(valid, "[device] invalid neuron device index ", std::string(py::str(index)),
                ": torchneuron has ", count, " device(s), valid indices are 0..", count - 1);
  });
  m.def("allocator_stats", &allocatorStatsDict);
  m.def("reset_peak_memory_stats", &torchneuron::resetPeakAllocatorStats);
  m.def("empty_cache", &torchneuron::emptyAllocatorCache);
  m.def("rounded_block_size", &torchneuron::roundedBlockSize, py::arg("nbytes"));
  m.def("metrics", &metricsDict);
  m.def("reset_metrics", [] {
    torchneuron::resetMetrics();
    torchneuron::resetEagerCallCacheStats();
    torchneuron::tracer::resetAdaptiveStats();
  });
  // The adaptive tracer (src/tracer/tracer.h). A bad NEURON_ADAPTIVE_* value is a ValueError.
  m.def("configure_adaptive", [] {
    try {
      torchneuron::tracer::configureFromEnvironment();
    } catch (const std::invalid_argument& error) {
      throw py::value_error(error.what());
    }
  });
  m.def("set_adaptive", &torchneuron::tracer::setAdaptive, py::arg("enabled"),
        py::call_guard<py::gil_scoped_release>());
  m.def("adaptive_enabled", &torchneuron::tracer::adaptiveEnabled);
  m.def("set_adaptive_debug", &torchneuron::tracer::setAdaptiveDebug, py::arg("enabled"),
        py::call_guard<py::gil_scoped_release>());
  m.def("set_adaptive_fusion", &torchneuron::tracer::setAdaptiveFusion, py::arg("enabled"),
        py::arg("wait_for_compiles") = py::none(), py::call_guard<py::gil_scoped_release>());
  m.def(
      "set_adaptive_min_bytes",
      [](int64_t bytes) {
        try {
          py::gil_scoped_release released;
          torchneuron::tracer::setAdaptiveMinBytes(bytes);
        } catch (const std::invalid_argument& error) {
          throw py::value_error(error.what());
        }
      },
      py::arg("bytes"));
  m.def("adaptive_min_bytes", &torchneuron::tracer::adaptiveMinBytes);
  m.def("set_adaptive_unbacked", &torchneuron::tracer::setAdaptiveUnbacked,
        py::call_guard<py::gil_scoped_release>(), py::arg("enabled"));
  m.def("adaptive_unbacked", &torchneuron::tracer::adaptiveUnbacked);
  m.def("set_list_launches", &torchneuron::setListLaunches, py::arg("enabled"));
  m.def("list_launches_enabled", &torchneuron::listLaunchesEnabled);
  m.def("set_fused_lstm", &torchneuron::setFusedLstm, py::arg("enabled"));
  m.def("fused_lstm_enabled", &torchneuron::fusedLstmEnabled);
  m.def("wait_for_fused_compiles", &torchneuron::tracer::waitForFusedCompiles,
        py::call_guard<py::gil_scoped_release>());
  m.def("wait_for_background_compiles", &torchneuron::waitForBackgroundCompiles,
        py::call_guard<py::gil_scoped_release>());
  torchneuron::tracer::setSourceLocator(&pythonSourceLine);
  m.def(
      "sync_window",
      [] { torchneuron::tracer::sync(torchneuron::tracer::SyncCause::kSynchronize); },
      py::call_guard<py::gil_scoped_release>());
  m.def(
      "adaptive_signatures",
      [](size_t count) {
        std::vector<std::tuple<std::string, int64_t, bool>> result;
        for (const auto& s : torchneuron::tracer::frequentSignatures(count))
          result.emplace_back(s.hex, s.occurrences, s.hot);
        return result;
      },
      py::arg("count") = 100);
  m.def(
      "explain", [](size_t windows) { return torchneuron::tracer::explain(windows); },
      py::arg("windows") = 10, py::call_guard<py::gil_scoped_release>());
  // Warm start (src/device/warm_start.h): begun at import, finished at interpreter exit.
  m.def("start_warm_start", &torchneuron::startWarmStart);
  m.def("finish_warm_start", &torchneuron::finishWarmStart,
        py::call_guard<py::gil_scoped_release>());
  defineCacheCommands(m);
}
