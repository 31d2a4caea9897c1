// `roce_doctor check PEER [--port P] [--json] [--netdev IF] [--dev RDMA_DEV[:PORT]] [--mtu N]`:
// checks the path to a `roce_doctor serve` on PEER end to end, in order:
//   reachability  the route to PEER (local netdev, source address; the model of gid/netdev.hpp)
//                 and the control connection
//   netdev_mtu    the local egress netdev's MTU against the server's netdev's
//   path_mtu      the largest DF datagram that reaches the server (doctor_pmtu.hpp) against the
//                 RoCEv2 packets our devices send (RoCE MTU + IP/UDP/BTH/RETH/ICRC)
//   rc_sw, ud_sw  ping-pongs over the userspace device (RC SENDs of 8 B and 64 KiB; UD datagrams)
//   rc_verbs      the RC ping-pong over the verbs backend (skipped without an RDMA device)
// One line per check, `check NAME: ok|FAIL|skip — detail`, or one JSON object (--json). Exit 0
// when no check failed, 1 otherwise, 2 on usage errors. Every step has a deadline: a dead or
// absent server is a FAIL within seconds.
#pragma once

#include <cstdio>

namespace roce::doctor {

int check_main(int argc, char** argv);   // argv[1] == "check"
void check_usage(FILE* f);

} // namespace roce::doctor
