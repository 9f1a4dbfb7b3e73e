#ifndef RECEIPT_RECONCILER_CCURL_SHIM_H
#define RECEIPT_RECONCILER_CCURL_SHIM_H
#include <curl/curl.h>

/*
 * curl_easy_setopt, curl_easy_getinfo and curl_multi_setopt are variadic, which Swift cannot call.
 * These typed wrappers are the only way the HTTP module reaches them: one per argument type.
 */

typedef size_t (*rr_curl_data_callback)(char *data, size_t size, size_t count, void *context);

static inline CURLcode rr_curl_easy_setopt_long(CURL *handle, CURLoption option, long value) {
    return curl_easy_setopt(handle, option, value);
}

static inline CURLcode rr_curl_easy_setopt_string(CURL *handle, CURLoption option, const char *value) {
    return curl_easy_setopt(handle, option, value);
}

static inline CURLcode rr_curl_easy_setopt_pointer(CURL *handle, CURLoption option, void *value) {
    return curl_easy_setopt(handle, option, value);
}

static inline CURLcode rr_curl_easy_setopt_off_t(CURL *handle, CURLoption option, curl_off_t value) {
    return curl_easy_setopt(handle, option, value);
}

static inline CURLcode rr_curl_easy_setopt_slist(CURL *handle, CURLoption option, struct curl_slist *value) {
    return curl_easy_setopt(handle, option, value);
}

static inline CURLcode rr_curl_easy_setopt_data_callback(CURL *handle, CURLoption option, rr_curl_data_callback value) {
    return curl_easy_setopt(handle, option, value);
}

static inline CURLcode rr_curl_easy_getinfo_long(CURL *handle, CURLINFO info, long *value) {
    return curl_easy_getinfo(handle, info, value);
}

static inline CURLcode rr_curl_easy_getinfo_double(CURL *handle, CURLINFO info, double *value) {
    return curl_easy_getinfo(handle, info, value);
}

static inline CURLcode rr_curl_easy_getinfo_pointer(CURL *handle, CURLINFO info, void **value) {
    return curl_easy_getinfo(handle, info, value);
}

static inline CURLMcode rr_curl_multi_setopt_long(CURLM *handle, CURLMoption option, long value) {
    return curl_multi_setopt(handle, option, value);
}

static inline CURLMcode rr_curl_multi_setopt_pointer(CURLM *handle, CURLMoption option, void *value) {
    return curl_multi_setopt(handle, option, value);
}

static inline CURLMcode rr_curl_multi_setopt_socket_callback(CURLM *handle, curl_socket_callback value) {
    return curl_multi_setopt(handle, CURLMOPT_SOCKETFUNCTION, value);
}

static inline CURLMcode rr_curl_multi_setopt_timer_callback(CURLM *handle, curl_multi_timer_callback value) {
    return curl_multi_setopt(handle, CURLMOPT_TIMERFUNCTION, value);
}

/*
 * The loop thread's readiness set for libcurl's multi_socket API: an epoll instance holding the
 * sockets libcurl asks to watch, and an eventfd that wakes the loop from other threads. Swift's
 * Glibc module has neither, and struct epoll_event is packed, so it never crosses into Swift.
 */
#include <errno.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

static inline int rr_epoll_create(void) { return epoll_create1(EPOLL_CLOEXEC); }

static inline int rr_eventfd_create(void) { return eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC); }

/* Watches fd for reading and/or writing, whether or not it was watched before. */
static inline int rr_epoll_watch(int epoll, int fd, int readable, int writable) {
    struct epoll_event event = {0};
    event.events = (readable ? EPOLLIN : 0) | (writable ? EPOLLOUT : 0);
    event.data.fd = fd;
    if (epoll_ctl(epoll, EPOLL_CTL_MOD, fd, &event) == 0) return 0;
    if (errno != ENOENT) return -1;
    return epoll_ctl(epoll, EPOLL_CTL_ADD, fd, &event);
}

static inline int rr_epoll_unwatch(int epoll, int fd) { return epoll_ctl(epoll, EPOLL_CTL_DEL, fd, NULL); }

/*
 * Waits up to timeout_ms (-1: no limit) and writes each ready descriptor with its readiness as
 * libcurl's CURL_CSELECT_* bits. A hang-up reads as readable (libcurl then reads the end of the
 * stream); an error as CURL_CSELECT_ERR. Returns the count, 0 on timeout or signal, -1 on error.
 */
static inline int rr_epoll_wait(int epoll, int *fds, int *masks, int capacity, int timeout_ms) {
    struct epoll_event events[64];
    if (capacity > 64) capacity = 64;
    int count = epoll_wait(epoll, events, capacity, timeout_ms);
    if (count < 0) return errno == EINTR ? 0 : -1;
    for (int index = 0; index < count; index++) {
        unsigned int ready = events[index].events;
        fds[index] = events[index].data.fd;
        masks[index] = ((ready & (EPOLLIN | EPOLLHUP)) ? CURL_CSELECT_IN : 0) | ((ready & EPOLLOUT) ? CURL_CSELECT_OUT : 0)
            | ((ready & EPOLLERR) ? CURL_CSELECT_ERR : 0);
    }
    return count;
}

/* Wakes the loop: adds one to the eventfd's counter. Callable from any thread. */
static inline void rr_eventfd_signal(int fd) {
    uint64_t one = 1;
    ssize_t written = write(fd, &one, sizeof one);
    (void)written; /* EAGAIN: the counter is already far from zero, the loop wakes anyway */
}

/* Resets the eventfd's counter after a wake-up. */
static inline void rr_eventfd_drain(int fd) {
    uint64_t count;
    ssize_t got = read(fd, &count, sizeof count);
    (void)got; /* EAGAIN: nothing was pending */
}

#endif
