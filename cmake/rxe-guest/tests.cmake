# CTest tests that run inside a QEMU guest with kernel soft-RoCE (rdma_rxe): cmake/rxe-guest/.
# Included from the top-level CMakeLists.txt:  include(cmake/rxe-guest/tests.cmake)
#
#   ctest -L rxe -V            # run them, streaming the guest console
#
# Host packages: bash cmake/rxe-guest/setup-deps.sh. Without QEMU or a guest kernel the tests are
# skipped (exit 77) with a message, unless ROCE_REQUIRE_RXE=1 is set in the environment of ctest.
# Figures: "rxe-result name=... value=... unit=..." lines in the output and in
# ${CMAKE_BINARY_DIR}/rxe-guest/run-suite/results.txt (logs of every step in run-suite/logs/,
# the guest console in run-suite/console.log).
option(ROCE_RXE_TESTS "Define the rxe QEMU-guest tests (label rxe)" ON)
if(ROCE_RXE_TESTS)
  set(_rxe_dir ${CMAKE_CURRENT_LIST_DIR})
  set(ROCE_RXE_TIMEOUT 1200 CACHE STRING "CTest timeout (s) of the rxe guest suite")
  # (the suite takes 600-650 s on a quiet 2-core host; a busy host made one 30% slower: 823 s)
  math(EXPR _rxe_host_timeout "${ROCE_RXE_TIMEOUT} - 30")
  set(_rxe_env
      "ROCE_BUILD_DIR=${CMAKE_BINARY_DIR}"
      "ROCE_RXE_WORK=${CMAKE_BINARY_DIR}/rxe-guest")

  # One guest boot (~15 s) runs the whole batch: verbs sanity, UCX rc_verbs/ud_verbs baselines, MPI,
  # rc_roce on rxe0, and the userspace device against a kernel rxe QP (interop).
  add_test(NAME rxe.suite
           COMMAND bash ${_rxe_dir}/run-in-guest.sh ${_rxe_dir}/tests/suite.sh)
  set_tests_properties(rxe.suite PROPERTIES
      LABELS rxe RUN_SERIAL TRUE TIMEOUT ${ROCE_RXE_TIMEOUT} SKIP_RETURN_CODE 77
      ENVIRONMENT "${_rxe_env};ROCE_RXE_HOST_TIMEOUT=${_rxe_host_timeout}")

  # The harness itself: arguments, environment, shares, and a non-zero exit code reaching the host.
  add_test(NAME rxe.harness
           COMMAND bash ${_rxe_dir}/expect-exit.sh 3
                   bash ${_rxe_dir}/run-in-guest.sh ${_rxe_dir}/tests/harness-selftest.sh ${CMAKE_BINARY_DIR})
  set_tests_properties(rxe.harness PROPERTIES
      LABELS rxe RUN_SERIAL TRUE TIMEOUT 180 SKIP_RETURN_CODE 77
      ENVIRONMENT "${_rxe_env};ROCE_RXE_HOST_TIMEOUT=150")
endif()
