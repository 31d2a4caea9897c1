// Running a piece of set-up inside another network namespace. A socket belongs to the namespace
// of the thread that created it, for its whole life: so a process can stay where its launcher
// reaches it (Open MPI's PMIx server listens on the host's loopback) while its RoCE sockets live
// in a namespace (a container's, or a test fabric's), by creating them on a thread that joined
// that namespace. Netdev lists (getifaddrs) taken there show that namespace's interfaces.
#pragma once

#include <functional>
#include <string>

#include "common/status.hpp"

namespace roce {

// Runs fn on a thread inside network namespace `ns` (a name under /var/run/netns, as `ip netns`
// makes them, or a path such as /proc/<pid>/ns/net) and waits for it; with an empty ns, runs fn
// here. Exceptions of fn are rethrown here. Fails (with err set, fn not run) when the namespace
// cannot be opened or joined (no such name, not permitted).
Status in_netns(const std::string& ns, const std::function<void()>& fn, std::string& err);

// socket(2) in the network namespace of the socket `ref`, whichever namespace the calling thread
// is in. A device opened under UCX_ROCE_NETNS creates sockets later too (a class socket when a
// connection negotiates another priority), on whatever thread runs the connection manager then:
// the application's, or a thread started in the namespace. Where the namespace of `ref` cannot be
// read (SIOCGSKNS needs CAP_NET_ADMIN: then no namespace was joined either), creates it here.
// Returns the descriptor, or -1 with errno set.
int socket_beside(int ref, int domain, int type, int protocol);

} // namespace roce
