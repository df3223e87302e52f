#include "sse.h"

#include <cerrno>
#include <chrono>
#include <cstdio>

#include <poll.h>
#include <sys/socket.h>

namespace harness {

namespace {

enum class Wrote { Ok, Gone, Slow, Cancelled };

// Poll in slices this long while a write waits, to see a cancel (the server cancels a request whose
// client left, or that it is stopping) without waiting out the whole write timeout.
constexpr int POLL_SLICE_MS = 100;

Wrote write_all(int fd, const std::string & data, double timeout_s, const Request & req) {
    using clock = std::chrono::steady_clock;
    const auto deadline = clock::now() + std::chrono::duration_cast<clock::duration>(std::chrono::duration<double>(timeout_s));
    const char * p = data.data();
    size_t n = data.size();
    while (n > 0) {
        ssize_t k = ::send(fd, p, n, MSG_NOSIGNAL);
        if (k > 0) {
            p += k;
            n -= (size_t) k;
            continue;
        }
        if (k < 0 && errno == EINTR) continue;
        if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            // the client's socket buffer is full: wait until it takes more, the request is cancelled,
            // or the event has waited the whole write timeout
            while (true) {
                if (req.cancelled.load()) return Wrote::Cancelled;
                auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock::now()).count();
                if (left <= 0) return Wrote::Slow;
                pollfd pfd{fd, POLLOUT, 0};
                int r = ::poll(&pfd, 1, (int) std::min<long long>(left, POLL_SLICE_MS));
                if (r < 0 && errno != EINTR) return Wrote::Gone;
                if (r > 0) {
                    if (pfd.revents & (POLLERR | POLLHUP | POLLNVAL)) return Wrote::Gone;
                    if (pfd.revents & POLLOUT) break;
                }
            }
            continue;
        }
        return Wrote::Gone;  // EPIPE, ECONNRESET, ...: the client is gone
    }
    return Wrote::Ok;
}

// One event's bytes: the chunk head (chunked responses), prefix + value + suffix, the chunk's end.
void append_event(std::string & buf, const SseTarget & t, const std::string & value) {
    const size_t len = t.prefix.size() + value.size() + t.suffix.size();
    if (t.chunked) {
        char head[24];
        int h = std::snprintf(head, sizeof head, "%zx\r\n", len);
        buf.append(head, (size_t) h);
    }
    buf += t.prefix;
    buf += value;
    buf += t.suffix;
    if (t.chunked) buf += "\r\n";
}

// The events for what the request gained since the last ones: chat, the engine's partial chat parse
// (`final`: the last, whole parse), else `text` as one JSON string. Returns how many were appended.
size_t append_deltas(std::string & buf, const Engine & engine, Request & req, const SseTarget & t, bool chat,
                     const std::string & text, bool final = false) {
    if (!chat) {
        append_event(buf, t, json_quote(text));
        return 1;
    }
    size_t n = 0;
    for (const auto & d : engine.chat_diff_list(req, final)) {
        append_event(buf, t, d);
        n++;
    }
    return n;
}

// What the loop's thread writes while the pump waits (Request::set_writer): each delta's events,
// sent at once without waiting. What the client's socket did not take stays in `rest` for the pump.
struct InlineWriter {
    const Engine & engine;
    Request & req;
    const SseTarget & t;
    bool chat;
    PumpResult & out;
    std::string buf, rest;
    bool gone = false;

    bool write(const std::string & delta) {
        if (delta.empty()) return true;
        buf.clear();
        const size_t n = append_deltas(buf, engine, req, t, chat, delta);
        size_t off = 0;
        while (off < buf.size()) {
            ssize_t k = ::send(t.fd, buf.data() + off, buf.size() - off, MSG_NOSIGNAL | MSG_DONTWAIT);
            if (k > 0) {
                off += (size_t) k;
                continue;
            }
            if (k < 0 && errno == EINTR) continue;
            if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
            gone = true;  // EPIPE, ECONNRESET, ...
            return false;
        }
        out.events += n;  // counted as written: what is left goes out first when the pump takes over
        if (off == buf.size()) return true;
        rest.assign(buf, off, std::string::npos);
        return false;
    }
};

}  // namespace

PumpResult pump_sse(const Engine & engine, Request & req, const SseTarget & t, bool chat) {
    PumpResult out;
    std::string buf;
    InlineWriter iw{engine, req, t, chat, out, {}, {}, false};
    auto stop = [&](Wrote w) -> PumpResult & {
        req.cancel();
        out.outcome = w == Wrote::Gone ? "gone" : w == Wrote::Slow ? "slow" : "cancelled";
        return out;
    };
    while (true) {
        // Nothing queued: the loop's thread writes the deltas itself until the client's socket is full
        // (or the client gone), which wakes this thread; the end wakes it too.
        const bool inline_on = req.set_writer([w = &iw](const std::string & d) { return w->write(d); });
        std::optional<Event> e = req.next();
        if (inline_on) {
            req.unset_writer();
            if (iw.gone) return stop(Wrote::Gone);
            if (!iw.rest.empty()) {
                Wrote w = write_all(t.fd, iw.rest, t.write_timeout_s, req);
                iw.rest.clear();
                if (w != Wrote::Ok) return stop(w);
            }
        }
        if (!e) {  // the end was taken before: nothing more will come
            out.outcome = "done";
            return out;
        }
        // every delta already there goes out in one event (a client that fell behind gets them
        // coalesced; one that keeps up finds one delta each time)
        std::string text;
        while (e && e->kind == Event::Delta) {
            text += e->text;
            e = req.try_next();
        }
        std::optional<Event> end;
        if (e) end = std::move(e);
        buf.clear();
        size_t n = text.empty() ? 0 : append_deltas(buf, engine, req, t, chat, text);
        if (chat && end && end->kind == Event::Done) {
            const std::string reason = req.finish_reason();
            if (reason != "error" && reason != "cancelled") n += append_deltas(buf, engine, req, t, chat, "", true);
        }
        if (!buf.empty()) {
            Wrote w = write_all(t.fd, buf, t.write_timeout_s, req);
            if (w != Wrote::Ok) return stop(w);
            out.events += n;
        }
        if (end) {
            out.outcome = "done";
            out.end = std::move(end);
            return out;
        }
    }
}

}  // namespace harness
