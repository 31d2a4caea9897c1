// `roce_doctor serve [--bind ADDR] [--port P] [--dev RDMA_DEV[:PORT]] [--once] [--idle S]`: the
// far end of `roce_doctor check`. Listens for control connections on TCP port P (default 18515)
// and answers path-MTU probes on UDP port P (doctor_pmtu.hpp). One client session at a time: per
// session it opens the devices the ping-pongs need (the userspace device's RC and UD QPs on the
// address the client reached, and an rc device on the RDMA port, if any) and echoes everything
// they receive. A malformed control message ends that session with a message on stderr; a client
// silent for S seconds (default 15) is dropped. --once: exit after the first session (0 if it
// ended with BYE or a clean close, 1 otherwise).
#pragma once

#include <cstdio>

namespace roce::doctor {

int serve_main(int argc, char** argv);   // argv[1] == "serve"
void serve_usage(FILE* f);

} // namespace roce::doctor
