#include "common/netns.hpp"

#include <fcntl.h>
#include <linux/sockios.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <exception>
#include <system_error>
#include <thread>

namespace roce {

namespace {

// Runs fn on a short-lived thread joined to the namespace `nsfd`: setns(CLONE_NEWNET) changes only
// the calling thread, so the caller's own threads stay where they are. Returns 0, or the errno of
// a refused setns (fn not run), or EAGAIN when no thread can be started (a container's pids
// limit: std::thread throws, and the callers promise an errno). Exceptions of fn are rethrown.
int run_in_netns(int nsfd, const std::function<void()>& fn) {
    int err = 0;
    std::exception_ptr exc;
    std::thread t;
    try {
        t = std::thread([&] {
            if (::setns(nsfd, CLONE_NEWNET) != 0) {
                err = errno;
                return;
            }
            try {
                fn();
            } catch (...) {
                exc = std::current_exception();
            }
        });
    } catch (const std::system_error&) {
        return EAGAIN;
    }
    t.join();
    if (exc)
        std::rethrow_exception(exc);
    return err;
}

} // namespace

Status in_netns(const std::string& ns, const std::function<void()>& fn, std::string& err) {
    if (ns.empty()) {
        fn();
        return Status::ok;
    }
    const std::string path = ns.find('/') != std::string::npos ? ns : "/var/run/netns/" + ns;
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        err = "network namespace " + path + ": " + std::strerror(errno);
        return Status::no_device;
    }
    struct Close {
        int fd;
        ~Close() { ::close(fd); }
    } close_fd{fd};
    if (const int e = run_in_netns(fd, fn); e != 0) {
        err = "cannot enter network namespace " + path + ": " + std::strerror(e);
        return Status::no_device;
    }
    return Status::ok;
}

int socket_beside(int ref, int domain, int type, int protocol) {
    const int ns = ::ioctl(ref, SIOCGSKNS);
    if (ns < 0)
        return ::socket(domain, type, protocol);
    struct stat theirs {}, ours {};
    const bool here = ::fstat(ns, &theirs) == 0 && ::stat("/proc/thread-self/ns/net", &ours) == 0 &&
                      theirs.st_ino == ours.st_ino && theirs.st_dev == ours.st_dev;
    int fd = -1, err = 0;
    auto make = [&] {
        fd = ::socket(domain, type, protocol);
        err = errno;
    };
    if (here)
        make();
    else if (const int e = run_in_netns(ns, make); e != 0)
        err = e;
    ::close(ns);
    if (fd < 0)
        errno = err;
    return fd;
}

} // namespace roce
