# UCP/UCT-level acceptance through the real UCX tools, with the plugin preloaded by roce-env.sh.
set(_env ${CMAKE_BINARY_DIR}/roce-env.sh)
set(_sh ${CMAKE_CURRENT_SOURCE_DIR})

# ucx_info sees the component, transport, device and capabilities; -c documents the variables.
add_test(NAME ucx_info.devices COMMAND ${_sh}/check_ucx_info.sh ${_env} devices)
add_test(NAME ucx_info.config COMMAND ${_sh}/check_ucx_info.sh ${_env} config)
add_test(NAME ucx_info.lanes COMMAND ${_sh}/check_ucx_info.sh ${_env} lanes)
add_test(NAME ucx_info.bad_device COMMAND ${_sh}/check_ucx_info.sh ${_env} bad_device)
add_test(NAME ucx_info.bad_gid_settings COMMAND ${_sh}/check_ucx_info.sh ${_env} bad_gid_settings)

# ucx_perftest, UCT level (-x rc_roce -d lo) and UCP level (UCX_TLS=rc_roce,self).
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
foreach(_t ${_uct_tests})
  string(REPLACE "|" ";" _parts "${_t}")
  list(GET _parts 0 _name)
  list(GET _parts 1 _args)
  separate_arguments(_args UNIX_COMMAND "${_args}")
  add_test(NAME perftest.uct.${_name} COMMAND ${_sh}/perftest_pair.sh ${_env} 180 -x rc_roce -d lo ${_args})
  set_tests_properties(perftest.uct.${_name} PROPERTIES RUN_SERIAL TRUE TIMEOUT 240)
endforeach()

set(_ucp_tests
    "tag_lat|-t tag_lat -n 20000"
    "tag_bw|-t tag_bw -s 1048576 -n 500"
    "ucp_put_bw|-t ucp_put_bw -s 1048576 -n 500"
    "ucp_get|-t ucp_get -s 1048576 -n 500"
    "ucp_fadd|-t ucp_fadd -n 10000")
foreach(_t ${_ucp_tests})
  string(REPLACE "|" ";" _parts "${_t}")
  list(GET _parts 0 _name)
  list(GET _parts 1 _args)
  separate_arguments(_args UNIX_COMMAND "${_args}")
  add_test(NAME perftest.ucp.${_name} COMMAND ${_sh}/perftest_pair.sh ${_env} 180 ${_args})
  set_tests_properties(perftest.ucp.${_name} PROPERTIES RUN_SERIAL TRUE TIMEOUT 240
                       ENVIRONMENT "UCX_TLS=rc_roce,self")
endforeach()

# Diagnostics: live counters (UCX_RC_ROCE_STATS_DIR + roce_doctor counters), packet traces
# (UCX_RC_ROCE_PCAP + tshark), the retransmit counter under fault injection.
foreach(_mode counters faults)
  add_test(NAME diag.${_mode} COMMAND ${_sh}/diag_check.sh ${_env} $<TARGET_FILE:roce_doctor>
                                      ${CMAKE_SOURCE_DIR}/src/tests/tshark_check.sh ${_mode})
  set_tests_properties(diag.${_mode} PROPERTIES RUN_SERIAL TRUE TIMEOUT 240)
endforeach()

# The README's table of variables is generated from the config table compiled into the plugin.
add_test(NAME docs.config_table_in_sync
         COMMAND ${CMAKE_SOURCE_DIR}/cmake/sync-readme.sh $<TARGET_FILE:roce_config_doc> --check)
