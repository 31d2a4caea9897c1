# UCP/UCT-level acceptance through the real UCX tools, with the plugin preloaded by roce-env.sh.
set(_env ${CMAKE_BINARY_DIR}/roce-env.sh)
set(_sh ${CMAKE_CURRENT_SOURCE_DIR})

# ucx_info sees the component, transport, device and capabilities; -c documents the variables.
add_test(NAME ucx_info.devices COMMAND ${_sh}/check_ucx_info.sh ${_env} devices)
add_test(NAME ucx_info.config COMMAND ${_sh}/check_ucx_info.sh ${_env} config)
add_test(NAME ucx_info.short_timeout COMMAND ${_sh}/check_ucx_info.sh ${_env} short_timeout)
add_test(NAME ucx_info.lanes COMMAND ${_sh}/check_ucx_info.sh ${_env} lanes)
add_test(NAME ucx_info.bad_device COMMAND ${_sh}/check_ucx_info.sh ${_env} bad_device)
add_test(NAME ucx_info.bad_gid_settings COMMAND ${_sh}/check_ucx_info.sh ${_env} bad_gid_settings)
add_test(NAME ucx_info.device_filter COMMAND ${_sh}/check_ucx_info.sh ${_env} device_filter)
set_tests_properties(ucx_info.device_filter PROPERTIES SKIP_RETURN_CODE 77)

# ucx_perftest pairs: one test per "name|arguments" entry of `tests`, named <prefix>.<name>,
# run with `extra` arguments (UCT level: -x <tl> -d lo) and `env` (UCP level: UCX_TLS).
function(roce_perftests prefix tests extra env)
  foreach(_t ${tests})
    string(REPLACE "|" ";" _parts "${_t}")
    list(GET _parts 0 _name)
    list(GET _parts 1 _args)
    separate_arguments(_args UNIX_COMMAND "${extra} ${_args}")
    add_test(NAME ${prefix}.${_name} COMMAND ${_sh}/perftest_pair.sh ${_env} 180 ${_args})
    set_tests_properties(${prefix}.${_name} PROPERTIES RUN_SERIAL TRUE TIMEOUT 240)
    if(env)
      set_tests_properties(${prefix}.${_name} PROPERTIES ENVIRONMENT "${env}")
    endif()
  endforeach()
endfunction()

# rc_roce: UCT level (-x rc_roce -d lo) and UCP level (UCX_TLS=rc_roce,self).
set(_uct_tests
    "am_lat|-t am_lat -n 20000"
    "am_bw_bcopy|-t am_bw -D bcopy -s 4096 -n 20000"
    "am_bw_zcopy|-t am_bw -D zcopy -s 65536 -n 2000"
    "put_lat|-t put_lat -n 20000"
    "put_bw_zcopy|-t put_bw -D zcopy -s 1048576 -n 500"
    "put_bw_bcopy|-t put_bw -D bcopy -s 4096 -n 20000"
    "get_zcopy|-t get -D zcopy -s 65536 -n 2000"
    "get_bcopy|-t get -D bcopy -s 4096 -n 5000"
    "add_lat|-t add_lat -n 20000"
    "fadd|-t fadd -n 20000"
    "cswap|-t cswap -n 20000")
set(_ucp_tests
    "tag_lat|-t tag_lat -n 20000"
    "tag_bw|-t tag_bw -s 1048576 -n 500"
    "ucp_put_bw|-t ucp_put_bw -s 1048576 -n 500"
    "ucp_get|-t ucp_get -s 1048576 -n 500"
    "ucp_fadd|-t ucp_fadd -n 10000")
roce_perftests(perftest.uct "${_uct_tests}" "-x rc_roce -d lo" "")
roce_perftests(perftest.ucp "${_ucp_tests}" "" "UCX_TLS=rc_roce,self")

# ud_roce: UCT AMs (it has no RDMA), and the same UCP tests with UCX_TLS=ud_roce,self, where UCP
# emulates RMA and atomics with AMs and moves large messages as AM fragments.
set(_ud_uct_tests
    "am_lat|-t am_lat -n 20000"
    "am_bw_short|-t am_bw -D short -s 1000 -n 20000"
    "am_bw_bcopy|-t am_bw -D bcopy -s 4096 -n 20000"
    "am_bw_zcopy|-t am_bw -D zcopy -s 32768 -n 5000")
roce_perftests(perftest.uct.ud_roce "${_ud_uct_tests}" "-x ud_roce -d lo" "")
roce_perftests(perftest.ucp.ud_roce "${_ucp_tests}" "" "UCX_TLS=ud_roce,self")

# Diagnostics: live counters (UCX_RC_ROCE_STATS_DIR + roce_doctor counters), packet traces
# (UCX_RC_ROCE_PCAP + tshark), the retransmit counter under fault injection.
foreach(_mode counters faults ud devices)
  add_test(NAME diag.${_mode} COMMAND ${_sh}/diag_check.sh ${_env} $<TARGET_FILE:roce_doctor>
                                      ${CMAKE_SOURCE_DIR}/src/tests/tshark_check.sh ${_mode})
  set_tests_properties(diag.${_mode} PROPERTIES RUN_SERIAL TRUE TIMEOUT 240)
endforeach()

# The path MTU against a 1500-byte netdev (veth between two network namespaces): auto picks what
# fits and 1 MiB messages arrive; an MTU whose packets do not fit is refused with a clear error;
# a 9000-byte end sending to a 1500-byte one uses the smaller end's MTU.
foreach(_tl rc_roce ud_roce)
  foreach(_mode auto 4096 mixed)
    add_test(NAME mtu.${_tl}.${_mode} COMMAND ${_sh}/mtu_check.sh ${_env} ${_tl} ${_mode})
    set_tests_properties(mtu.${_tl}.${_mode} PROPERTIES TIMEOUT 120 SKIP_RETURN_CODE 77)
  endforeach()
endforeach()
add_test(NAME mtu.ud_roce.segsize COMMAND ${_sh}/mtu_check.sh ${_env} ud_roce segsize)
set_tests_properties(mtu.ud_roce.segsize PROPERTIES TIMEOUT 120 SKIP_RETURN_CODE 77)

# UCX_*_PORT_RANGE behind a real firewall (nftables in a network namespace drops UDP outside
# 47000-47015): ucx_perftest (and mpi-tests' port_range.*.mpi) pass with the range; without it the
# client fails within seconds (the check can fail, and a dead peer is not a hang); a range whose
# every port is held elsewhere does not open, with one error.
foreach(_tl rc_roce ud_roce)
  foreach(_mode range blocked full)
    add_test(NAME port_range.${_tl}.${_mode} COMMAND ${_sh}/port_range_check.sh ${_env} ${_tl} ${_mode})
    set_tests_properties(port_range.${_tl}.${_mode} PROPERTIES TIMEOUT 120 SKIP_RETURN_CODE 77)
  endforeach()
endforeach()

# The README's table of variables is generated from the config table compiled into the plugin.
add_test(NAME docs.config_table_in_sync
         COMMAND ${CMAKE_SOURCE_DIR}/cmake/sync-readme.sh $<TARGET_FILE:roce_config_doc> --check)

# Issue 5: killing one rank mid-run gives the survivor a UCP peer-failure error within a bound
# (30 s), then a clean forced close. ucp.peer_failure.<tl>: the survivor keeps posting to the dead
# peer; .idle: both sides drain first and the survivor posts nothing, so UCP keepalive (1 s here,
# UCX's default is 20 s) must find the failure. Adding a transport is one word, e.g.
# -DROCE_PEER_FAILURE_TRANSPORTS="rc_roce;ud_roce". ud_roce declares a peer dead after
# UCX_UD_ROCE_TIMEOUT without any acknowledgement (30 s by default, like UCX's ud): 5 s here.
set(ROCE_PEER_FAILURE_TRANSPORTS "rc_roce;ud_roce" CACHE STRING
    "UCX transports the UCP peer-failure tests (ucp.peer_failure.<tl>) run over")
foreach(tl IN LISTS ROCE_PEER_FAILURE_TRANSPORTS)
  set(_pf ${_sh}/peer_failure.sh ${_env} $<TARGET_FILE:ucp_peer_failure> -t 30)
  if(tl STREQUAL "ud_roce")
    list(APPEND _pf -s 32768)   # one AM fragment per message (see ucp_peer_failure.c)
  endif()
  add_test(NAME ucp.peer_failure.${tl} COMMAND ${_pf})
  add_test(NAME ucp.peer_failure.${tl}.idle COMMAND ${_pf} -i)
  # The peer's traffic cut instead of the peer killed: SIGSTOPped, alive, its port still bound.
  add_test(NAME ucp.peer_failure.${tl}.cut COMMAND ${_pf} -c)
  set(_pf_env "UCX_TLS=${tl},self;UCX_KEEPALIVE_INTERVAL=1s")
  if(tl STREQUAL "ud_roce")
    list(APPEND _pf_env "UCX_UD_ROCE_TIMEOUT=5s")
  endif()
  set_tests_properties(ucp.peer_failure.${tl} ucp.peer_failure.${tl}.idle ucp.peer_failure.${tl}.cut PROPERTIES
                       RUN_SERIAL TRUE TIMEOUT 120 ENVIRONMENT "${_pf_env}")
endforeach()
# The killed rank never sent its DREQ: the survivor's userspace device frees the QP it created for
# that rank's connection on its own (CM PROBE unanswered, src/sw/cm.hpp), here within 1 s of
# silence + 2 s after the first PROBE; the survivor lingers 6 s after its ep close and its counter
# file must show cm_reaped.
if("rc_roce" IN_LIST ROCE_PEER_FAILURE_TRANSPORTS)
  # .cut, then the partition heals: a new ep to the same address is a new connection (not for
  # ud_roce: it refuses a new endpoint to an address it gave up, see the README).
  add_test(NAME ucp.peer_failure.rc_roce.reconnect COMMAND ${_sh}/peer_failure.sh ${_env}
           $<TARGET_FILE:ucp_peer_failure> -t 30 -r)
  set_tests_properties(ucp.peer_failure.rc_roce.reconnect PROPERTIES RUN_SERIAL TRUE TIMEOUT 120
                       ENVIRONMENT "UCX_TLS=rc_roce,self;UCX_KEEPALIVE_INTERVAL=1s")
  add_test(NAME ucp.peer_failure.rc_roce.reap
           COMMAND ${_sh}/peer_failure.sh ${_env} $<TARGET_FILE:ucp_peer_failure> -t 30 -i -l 6)
  set_tests_properties(ucp.peer_failure.rc_roce.reap PROPERTIES RUN_SERIAL TRUE TIMEOUT 120 ENVIRONMENT
    "UCX_TLS=rc_roce,self;UCX_KEEPALIVE_INTERVAL=1s;UCX_RC_ROCE_PASSIVE_PROBE=1s;UCX_RC_ROCE_PASSIVE_REAP=2s;PF_EXPECT_COUNTER=cm_reaped;ROCE_DOCTOR=$<TARGET_FILE:roce_doctor>")
endif()
