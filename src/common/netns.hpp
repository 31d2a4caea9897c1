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

} // namespace roce
