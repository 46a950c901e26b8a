#include "server/listen_backlog.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <system_error>

namespace warden::server {

namespace {
// The local port of a listening TCP socket, or -1 for any other descriptor.
int listening_port(int fd) {
    int accepting = 0;
    socklen_t len = sizeof(accepting);
    if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &accepting, &len) != 0 || accepting != 1)
        return -1;
    sockaddr_storage addr{};
    len = sizeof(addr);
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) return -1;
    if (addr.ss_family == AF_INET)
        return ntohs(reinterpret_cast<const sockaddr_in*>(&addr)->sin_port);
    if (addr.ss_family == AF_INET6)
        return ntohs(reinterpret_cast<const sockaddr_in6*>(&addr)->sin6_port);
    return -1;
}
}  // namespace

bool raise_listen_backlog(int port, int backlog) {
    std::error_code ec;
    bool raised = false;
    // httplib keeps its socket private, so find it among this process's descriptors.
    for (const auto& e : std::filesystem::directory_iterator("/proc/self/fd", ec)) {
        const std::string name = e.path().filename().string();
        char* end = nullptr;
        const long fd = std::strtol(name.c_str(), &end, 10);
        if (end == name.c_str() || *end != '\0') continue;
        if (listening_port(static_cast<int>(fd)) == port &&
            ::listen(static_cast<int>(fd), backlog) == 0)
            raised = true;
    }
    return raised;
}

}  // namespace warden::server
