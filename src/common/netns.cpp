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
#include <thread>

namespace roce {

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
    Status st = Status::ok;
    std::exception_ptr exc;
    // setns(CLONE_NEWNET) changes only the calling thread: a short-lived thread joins the
    // namespace, the caller's own threads stay where they are.
    std::thread t([&] {
        if (::setns(fd, CLONE_NEWNET) != 0) {
            err = "cannot enter network namespace " + path + ": " + std::strerror(errno);
            st = Status::no_device;
            return;
        }
        try {
            fn();
        } catch (...) {
            exc = std::current_exception();
        }
    });
    t.join();
    ::close(fd);
    if (exc)
        std::rethrow_exception(exc);
    return st;
}

int socket_beside(int ref, int domain, int type, int protocol) {
    const int ns = ::ioctl(ref, SIOCGSKNS);
    if (ns < 0)
        return ::socket(domain, type, protocol);
    struct stat theirs {}, ours {};
    const bool here = ::fstat(ns, &theirs) == 0 && ::stat("/proc/thread-self/ns/net", &ours) == 0 &&
                      theirs.st_ino == ours.st_ino && theirs.st_dev == ours.st_dev;
    int fd = -1, err = 0;
    if (here) {
        fd = ::socket(domain, type, protocol);
        err = errno;
    } else {
        std::thread t([&] {   // as in_netns: the caller's thread stays where it is
            if (::setns(ns, CLONE_NEWNET) != 0) {
                err = errno;
                return;
            }
            fd = ::socket(domain, type, protocol);
            err = errno;
        });
        t.join();
    }
    ::close(ns);
    if (fd < 0)
        errno = err;
    return fd;
}

} // namespace roce
