#include "common/netns.hpp"

#include <fcntl.h>
#include <sched.h>
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

} // namespace roce
