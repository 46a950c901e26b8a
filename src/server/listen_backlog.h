#pragma once
// Debian's libcpp-httplib is a compiled library whose listen() backlog is fixed at 5. When dozens
// of clients connect at once to a busy server, that accept queue overflows, the kernel drops
// their handshakes and each client retries after 1, 2, 4... s or fails ("transport error: Read"
// in `warden bench` at concurrency 32, and seconds of extra time to first token).

namespace warden::server {

// Calls listen() again, with `backlog`, on this process's listening TCP socket bound to `port`
// (Linux lets a listening socket change its backlog this way; the kernel caps it at
// net.core.somaxconn). Returns false when no such socket was found or listen() failed.
bool raise_listen_backlog(int port, int backlog);

}  // namespace warden::server
