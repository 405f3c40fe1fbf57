# The ThreadSanitizer tree (-DGEMMSERVE_TSAN=ON, tests/tsan.sh): Abseil's locks
# made visible to TSan.
#
# Debian's Abseil is not built with -fsanitize=thread, so TSan does not see an
# absl::Mutex being taken: every absl::Mutex-guarded field that two threads
# touch would read as a race (serving_test alone printed 21 such reports). With
# GEMMSERVE_TSAN_ABSL_SOURCE, the source of the installed Abseil (Debian's
# `abseil` source package of the same version, which tests/tsan.sh fetches),
# the files that implement its Mutex, CondVar and waiting are compiled here with TSan against the
# installed headers (the same inline namespace) and linked into every
# executable of the tree. An executable's definitions come before a shared
# library's, for gRPC's calls into Abseil as for ours, so every absl::Mutex,
# Notification, BlockingCounter and Barrier of the process is TSan's to see.
#
#   cmake -DGEMMSERVE_TSAN=ON -DGEMMSERVE_TSAN_ABSL_SOURCE=<abseil-20220623.1>
set(GEMMSERVE_TSAN_ABSL_SOURCE "" CACHE PATH
    "Source of the installed Abseil, whose locks the TSan tree compiles with TSan")
if(NOT GEMMSERVE_TSAN_ABSL_SOURCE)
  message(WARNING "GEMMSERVE_TSAN without GEMMSERVE_TSAN_ABSL_SOURCE: TSan cannot see "
                  "absl::Mutex, and reports its locking as races (use tests/tsan.sh)")
  return()
endif()

set(_absl_files
  synchronization/mutex.cc synchronization/barrier.cc synchronization/blocking_counter.cc
  synchronization/notification.cc synchronization/internal/create_thread_identity.cc
  synchronization/internal/graphcycles.cc synchronization/internal/per_thread_sem.cc
  synchronization/internal/waiter.cc base/internal/thread_identity.cc
  base/internal/low_level_alloc.cc)
# Not base/internal/spinlock.cc: absl::SpinLock's fast path is inline, and
# Debian's libabsl_time takes one (in absl::Now) without TSan's annotations;
# an annotated slow path under it fails TSan's own check. Debian's build of
# the slow path serves both.
set(_absl_sources "")
foreach(file ${_absl_files})
  set(path "${GEMMSERVE_TSAN_ABSL_SOURCE}/absl/${file}")
  if(NOT EXISTS "${path}")
    message(FATAL_ERROR "GEMMSERVE_TSAN_ABSL_SOURCE=${GEMMSERVE_TSAN_ABSL_SOURCE} has no "
                        "absl/${file}: not an Abseil source tree")
  endif()
  list(APPEND _absl_sources "${path}")
endforeach()
# Compiled against the installed headers only: the source tree's own headers
# are not on the include path (a quoted include finds them only beside the
# including file, and Abseil's name them from the root).
add_library(gemmserve_tsan_absl OBJECT ${_absl_sources})
target_link_libraries(gemmserve_tsan_absl PRIVATE absl::synchronization)
set_target_properties(gemmserve_tsan_absl PROPERTIES UNITY_BUILD OFF)

# Every executable target below DIR gets the objects.
function(gemmserve_tsan_link_absl dir)
  get_property(targets DIRECTORY "${dir}" PROPERTY BUILDSYSTEM_TARGETS)
  foreach(target ${targets})
    get_target_property(type ${target} TYPE)
    if(type STREQUAL "EXECUTABLE")
      target_sources(${target} PRIVATE $<TARGET_OBJECTS:gemmserve_tsan_absl>)
    endif()
  endforeach()
  get_property(subdirectories DIRECTORY "${dir}" PROPERTY SUBDIRECTORIES)
  foreach(subdirectory ${subdirectories})
    gemmserve_tsan_link_absl("${subdirectory}")
  endforeach()
endfunction()
gemmserve_tsan_link_absl("${PROJECT_SOURCE_DIR}")
message(STATUS "TSan: Abseil's locks from ${GEMMSERVE_TSAN_ABSL_SOURCE}")
